"""Turning a program's source into a callable Starlark module (executor child only).

A program is evaluated into one module together with two pieces of our own Starlark:

- the prelude (before it): `graphql`, `cel`, `print`, `fail` and the `tools` struct, each a thin
  Starlark function over one of the executor's Python callables. Defining them in Starlark gives
  Starlark's own argument errors, Starlark type names in our errors and Starlark's `str()` for print;
- the entry (after it): `ledger__entry(event)`, which calls `run(event)` and returns the output as
  JSON text.

Values leaving a program (host call arguments, the output) are checked to be JSON in Starlark,
where a struct or a non-finite float is still distinguishable (converted to Python, or by
json.encode, they silently become a dict and None or null), and bounded in depth.

Values leaving a program cross as JSON text made by Starlark's `json.encode` (host call arguments,
the output): one Rust pass, no Python objects, and a size check before anything large is copied.
(orjson would need ~15x a string's size of address space to encode it, which under RLIMIT_AS
crashes the executor with SIGSEGV; the standard library is slower.) Values entering a program
(the event) arrive as Python values; a host call's result arrives as its JSON text, decoded by Starlark's
`json.decode`, whenever that reads it as the exact value (see executor `_result_for_starlark`), else as a
Python value: starlark-pyo3 converts each Python value through several attribute lookups (~7k instructions
a dict, list or string, ~15k a bool or None), Starlark's decoder a whole text in one Rust pass. A string result
always arrives as JSON text, so a string is never taken for the value itself.

Host callables route to whichever run is innermost at call time, so a frozen module is reusable by
every run of its program, nested or not.
"""

from __future__ import annotations

import keyword
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import starlark as sl

PROGRAM_FILE = "tool.star"
PRELUDE_FILE = "prelude.star"
ENTRY_FILE = "entry.star"
ENTRY_FUNCTION = "ledger__entry"

# Deeper values are refused before json.encode sees them: it recurses natively, ~26 KB of stack
# a level (measured: 300 levels overflow the 8 MiB main stack and kill the executor; 100 levels
# inside 32 nested runs use 3.5 MiB).
MAX_JSON_DEPTH = 100

# __host_graphql(arguments_json), __host_cel(arguments_json), __host_tool(arguments_json), __print(line),
# __fail(message, hint), __not_json(label, what), __too_large(label, size).
# A host call takes one argument, its arguments' JSON text: starlark-pyo3 converts each argument of a
# Python callable through JSON on its own (~15k instructions an argument, whatever its type), so the
# function is told by which callable is called, and its label is rebuilt from the text when an error needs it.
HOST_CALL_NAMES = {"graphql": "__host_graphql", "cel": "__host_cel", "tool": "__host_tool"}
HOST_CALLABLE_NAMES = (*HOST_CALL_NAMES.values(), "__print", "__fail", "__not_json", "__too_large")

_STARLARK_KEYWORDS = frozenset(
    "and else load break for not continue if or def in pass elif return lambda "
    "as assert async await class del except finally from global import is nonlocal raise try "
    "while with yield".split()
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# __check_json walks breadth first with one comprehension per pass and level, several times
# faster than an item-by-item loop (100,000 small dicts: ~0.2 s; json.encode: ~0.1 s).
# Each JSON value takes at least a byte, so more values than the payload bound is surely too
# large; that also stops a list that contains itself twice from doubling level after level.
# `len` of a Starlark string counts characters, never more than its UTF-8 bytes: a text longer
# than the limit in characters is surely too large, and is refused before it is copied to Python.
_PRELUDE_HEAD = '''
__MAX_PAYLOAD = {max_payload_bytes}
__MAX_DEPTH = {max_depth}
__NON_FINITE = (float("nan"), float("inf"), float("-inf"))  # Starlark's nan equals nan
__JSON_KINDS = {{"dict": 0, "list": 0, "tuple": 0, "string": 0, "int": 0, "float": 0, "bool": 0, "NoneType": 0}}

def __check_json(value, label):
    level = [value]
    values = 0
    for _ in range(__MAX_DEPTH + 1):
        if not level:
            return
        values += len(level)
        if values > __MAX_PAYLOAD:
            __too_large(label, values)
        kinds = [type(item) for item in level]
        dicts = [item for item, kind in zip(level, kinds) if kind == "dict"]
        sequences = [item for item, kind in zip(level, kinds) if kind == "list" or kind == "tuple"]
        if len(dicts) + len(sequences) < len(level):
            odd = [kind for kind in kinds if kind not in __JSON_KINDS]
            if odd:
                __not_json(label, "a value of type `%s`" % odd[0])
            if "float" in kinds:
                if [item for item, kind in zip(level, kinds) if kind == "float" and item in __NON_FINITE]:
                    __not_json(label, "a float that is not a finite number")
        bad_keys = [key for d in dicts for key in d if type(key) != "string"]
        if bad_keys:
            __not_json(label, "a dict key of type `%s` (JSON object keys are strings)" % type(bad_keys[0]))
        level = [child for d in dicts for child in d.values()] + [child for s in sequences for child in s]
    __not_json(label, "values nested more than %d levels deep" % __MAX_DEPTH)

def __send(host, label, arguments, checked = False):
    if not checked:
        __check_json(arguments, "the call to " + label)
    text = json.encode(arguments)
    if len(text) > __MAX_PAYLOAD:
        __too_large("the call to " + label, len(text))
    result = host(text)
    return json.decode(result) if type(result) == "string" else result

# What __check_json would accept without a word for graphql()'s and cel()'s arguments when their variables
# (a dict or None, already required) hold only string keys and values of these kinds: those arguments are
# a string, such a dict, a string or None and a bool, 3 levels and a handful of values deep. Anything else
# (a float, which may not be finite; a nested value) is checked in full.
__FLAT_KINDS = ("string", "int", "bool", "NoneType")

def __flat(variables):
    if variables == None:
        return True
    if len(variables) > __MAX_PAYLOAD - 8:
        return False
    return not [key for key, value in variables.items() if type(key) != "string" or type(value) not in __FLAT_KINDS]

def __require(label, what, value, kinds):
    if type(value) not in kinds:
        __fail("%s: %s must be %s, not %s" % (label, what, " or ".join(kinds), type(value)), None)

def __tool(name, input, check):
    __require("tools.%s()" % name, "check", check, ("bool",))
    return __send(__host_tool, "tools.%s()" % name, [name, input, check])

def print(*args, sep = " "):
    __print(sep.join([str(arg) for arg in args]))

def fail(*args, hint = None, sep = " "):
    __fail(sep.join([str(arg) for arg in args]), hint)
'''

# graphql() and cel(): every tool program has both; a code-mode program only those its server lists.
_NATIVE_SOURCES = {
    "graphql": '''
def graphql(document, variables = None, operation_name = None, check = True):
    if (type(document) != "string" or type(variables) not in ("dict", "NoneType")
            or type(operation_name) not in ("string", "NoneType") or type(check) != "bool"):
        __require("graphql()", "the document", document, ("string",))
        __require("graphql()", "variables", variables, ("dict", "NoneType"))
        __require("graphql()", "operation_name", operation_name, ("string", "NoneType"))
        __require("graphql()", "check", check, ("bool",))
    return __send(__host_graphql, "graphql()", [document, variables, operation_name, check], __flat(variables))
''',
    "cel": '''
def cel(expression, variables = None, check = True, vars = None):
    if vars != None:
        variables = vars
    if type(expression) != "string" or type(variables) not in ("dict", "NoneType") or type(check) != "bool":
        __require("cel()", "the expression", expression, ("string",))
        __require("cel()", "variables", variables, ("dict", "NoneType"))
        __require("cel()", "check", check, ("bool",))
    return __send(__host_cel, "cel()", [expression, variables, check], __flat(variables))
''',
}
ALL_NATIVES = ("graphql", "cel")

# Code mode (an MCP server's `program`, DESIGN 12): `tools.<name>(prop=value, ...)` takes one keyword
# argument per top-level input property, and `attempt(tools.<name>, ...)` returns the failure instead of
# failing the program. attempt() knows the tool by the function it was given (the `tools` prelude lists
# them with their names), so no keyword is reserved.
_CODE_MODE_HEAD = '''
def __keyword_tool(name, args, input, check):
    label = "tools.%s()" % name
    if args:
        __fail("%s takes keyword arguments, one per input property: tools.%s(name = value, ...)" % (label, name), None)
    return __send(__host_tool, label, [name, input, check])
'''
# After the `tools` struct: `__TOOL_FUNCTIONS` and `__TOOL_NAMES` list its functions and their names.
_CODE_MODE_ATTEMPT = '''
def attempt(tool, *args, **input):
    if tool not in __TOOL_FUNCTIONS:
        __fail("attempt() takes one of tools.<name> first, then its keyword arguments: attempt(tools.x, a = 1)", None)
    return __keyword_tool(__TOOL_NAMES[__TOOL_FUNCTIONS.index(tool)], args, input, False)
'''

_ENTRY_SOURCE = '''
ledger__run_type = type(run)

def ledger__entry(event):
    output = run(event)
    if type(output) != "dict" or not __flat(output):  # a flat dict is JSON as __check_json would find it
        __check_json(output, "the output")
    text = json.encode(output)
    if len(text) > __MAX_PAYLOAD:
        __too_large("the output", len(text))
    return text
'''

_CODE_MODE_ENTRY_SOURCE = _ENTRY_SOURCE.replace("output = run(event)", "output = run()")
_PROBE_SOURCE = "\ndef ledger__probe():\n    run(None)\n"
_CODE_MODE_PROBE_SOURCE = "\ndef ledger__probe():\n    run()\n"
_DEF_RUN = re.compile(r"^def\s+run\s*\(", re.MULTILINE)
_ERROR_LINE = re.compile(r"^error: (.*)$", re.MULTILINE)
_SPAN_LINE = re.compile(r"^\s*--> ([^:\n]+):(\d+):(\d+)", re.MULTILINE)
_TRACEBACK_FRAME = re.compile(r"^\s*\* " + re.escape(PROGRAM_FILE) + r":(\d+), in ", re.MULTILINE)
_MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Problem:
    """A defect of a program and where it is (1-based), when it belongs to one place."""

    message: str
    line: int | None = None
    column: int | None = None

    def as_dict(self) -> dict:
        # Compile problems always carry a position: a program-wide one points at its start.
        return {"line": self.line or 1, "column": self.column or 1, "message": self.message}


class ProgramProblem(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def describe_error(text: str) -> Problem:
    """The rendered StarlarkError text -> its first error line and where in the program it is.

    The rendering is a traceback, an `error: ...` line and a ` --> file:line:column` span; the span
    may point into the prelude (e.g. inside `fail`), in which case the innermost traceback frame in
    the program gives the line.
    """
    errors = _ERROR_LINE.findall(text)
    message = errors[-1].strip() if errors else text.strip().splitlines()[-1] if text.strip() else "error"
    message = _shorten(message)
    tail = text[text.rfind("error: ") :] if errors else text
    span = _SPAN_LINE.search(tail)
    if span and span.group(1) == PROGRAM_FILE:
        return Problem(message, int(span.group(2)), int(span.group(3)))
    frames = _TRACEBACK_FRAME.findall(text)
    if frames:
        return Problem(message, int(frames[-1]))
    return Problem(message)


def _shorten(message: str) -> str:
    # Parse errors list every token that could have come next: keep the part a person reads.
    message = re.sub(r", expected one of .*$", "", message)
    return message if len(message) <= _MAX_MESSAGE_CHARS else message[: _MAX_MESSAGE_CHARS - 1] + "…"


def _prelude_source(tool_names: tuple[str, ...], code_mode: bool = False) -> str:
    seen: set[str] = set()
    fields = []
    for name in tool_names:
        if not _IDENTIFIER.match(name) or name in _STARLARK_KEYWORDS or keyword.iskeyword(name):
            raise ProgramProblem(Problem(f"the tool name `{name}` cannot be used as tools.{name}: it is not an identifier"))
        if name in seen:
            raise ProgramProblem(Problem(f"the tool name `{name}` is declared twice"))
        seen.add(name)
        if code_mode:
            fields.append(f'    {name} = lambda *args, **input: __keyword_tool("{name}", args, input, True),\n')
        else:
            fields.append(f'    {name} = lambda input, check = True: __tool("{name}", input, check),\n')
    source = "\ntools = struct(\n" + "".join(fields) + ")\n"
    if code_mode:
        listed = "".join(f"tools.{name}, " for name in tool_names)
        names = "".join(f'"{name}", ' for name in tool_names)
        source += f"__TOOL_FUNCTIONS = [{listed}]\n__TOOL_NAMES = [{names}]\n" + _CODE_MODE_ATTEMPT
    return source


def _line_of_run_definition(source: str) -> int:
    match = _DEF_RUN.search(source)
    return source.count("\n", 0, match.start()) + 1 if match else 1


class StarlarkLoader:
    """Parses and evaluates programs; the same callables are bound into every module it builds."""

    def __init__(self, callables: Mapping[str, Callable[..., object]], max_payload_bytes: int) -> None:
        assert set(callables) == set(HOST_CALLABLE_NAMES)
        self._callables = dict(callables)
        self._globals = sl.Globals.extended_by([sl.LibraryExtension.StructType, sl.LibraryExtension.Json])
        self._dialect = sl.Dialect.standard()
        self._dialect.enable_load = False  # no load(): a program is one file and reaches nothing else
        self._prelude_head_ast = sl.parse(
            PRELUDE_FILE,
            _PRELUDE_HEAD.format(max_payload_bytes=max_payload_bytes, max_depth=MAX_JSON_DEPTH),
            self._dialect,
        )
        self._entry_ast = sl.parse(ENTRY_FILE, _ENTRY_SOURCE, self._dialect)
        self._code_mode_head_ast = sl.parse(PRELUDE_FILE, _CODE_MODE_HEAD, self._dialect)
        self._code_mode_entry_ast = sl.parse(ENTRY_FILE, _CODE_MODE_ENTRY_SOURCE, self._dialect)
        self._native_asts = {name: sl.parse(PRELUDE_FILE, text, self._dialect) for name, text in _NATIVE_SOURCES.items()}
        self._preludes: OrderedDict[tuple, sl.AstModule] = OrderedDict()

    def load(self, source: str, tool_names: tuple[str, ...], options: sl.EvalOptions, *, code_mode: bool = False,
             natives: tuple[str, ...] = ALL_NATIVES) -> sl.FrozenModule:
        """Raises ProgramProblem for a defect found without running the program, and StarlarkError
        from evaluating its top level (the caller knows whether that was a fail(), a host call, a
        cancellation or a plain error).

        `code_mode`: an MCP server's program, whose `run()` takes no argument, whose tools take keyword
        arguments, with `attempt()`; `natives`: which of graphql() and cel() exist (a name that does not
        exist is a compile error where the program uses it)."""
        prelude = self._prelude(tool_names, code_mode)
        try:
            program = sl.parse(PROGRAM_FILE, source, self._dialect)
        except sl.StarlarkError as error:
            raise ProgramProblem(describe_error(str(error))) from None
        self._check_run_signature(source, code_mode)
        module = sl.Module()
        for name, function in self._callables.items():
            module.add_callable(name, function)
        sl.eval_with(options, module, self._prelude_head_ast, self._globals)
        for name in ALL_NATIVES:
            if name in natives:
                sl.eval_with(options, module, self._native_asts[name], self._globals)
        if code_mode:
            sl.eval_with(options, module, self._code_mode_head_ast, self._globals)
        sl.eval_with(options, module, prelude, self._globals)
        sl.eval_with(options, module, program, self._globals)
        sl.eval_with(options, module, self._code_mode_entry_ast if code_mode else self._entry_ast, self._globals)
        if module["ledger__run_type"] != "function":
            raise ProgramProblem(
                Problem("`run` must be a function: " + _RUN_SHAPE[code_mode], _line_of_run_definition(source))
            )
        return module.freeze()

    def _prelude(self, tool_names: tuple[str, ...], code_mode: bool = False) -> sl.AstModule:
        """The `tools` struct for these names (the rest of the prelude is shared by every program)."""
        key = (tool_names, code_mode)
        prelude = self._preludes.get(key)
        if prelude is None:
            prelude = sl.parse(PRELUDE_FILE, _prelude_source(tool_names, code_mode), self._dialect)
            self._preludes[key] = prelude
            if len(self._preludes) > 64:
                self._preludes.popitem(last=False)
        else:
            self._preludes.move_to_end(key)
        return prelude

    def _check_run_signature(self, source: str, code_mode: bool = False) -> None:
        """Type-check a call `run(None)` (code mode: `run()`) appended to the source: the checker reports
        a missing `run` or one that cannot take exactly that without running anything."""
        probe_line = source.count("\n") + (0 if source.endswith("\n") else 1) + 1
        probe = _CODE_MODE_PROBE_SOURCE if code_mode else _PROBE_SOURCE
        try:
            probed = sl.parse(PROGRAM_FILE, source + ("" if source.endswith("\n") else "\n") + probe, self._dialect)
            errors, _, _ = probed.typecheck(self._globals, {})
        except Exception:  # the checker is an extra; the run-time call reports the same defect
            return
        for error in errors:
            span = error.span
            if span is None or span.span.begin.line + 1 < probe_line:
                continue  # a finding about the program's own code: not ours to judge here
            if "not found" in str(error):
                raise ProgramProblem(Problem("the program does not define `run`: " + _RUN_SHAPE[code_mode]))
            what = "must take no argument" if code_mode else "must take exactly one argument, the event"
            raise ProgramProblem(Problem(f"`run` {what}: " + _RUN_SHAPE[code_mode], _line_of_run_definition(source)))


_RUN_SHAPE = {False: "def run(event): ...", True: "def run(): ..."}
