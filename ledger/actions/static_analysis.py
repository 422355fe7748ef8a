"""Static checks of a tool's Starlark program, run when a definition is written (DESIGN.md §6).

Two defects are caught before the program ever runs:

- a `tools.<name>` that names no declared tool reference;
- a GraphQL document that reaches `graphql()` and is wrong for the schema: a syntax or validation
  error, a missing or unknown operation name, a required variable that is not supplied.

Only what is *statically known* is checked: a string literal, a module constant (a name assigned once,
at module level, to a string literal), or a parameter of the program's own functions whose call sites
pass one of those, through any number of functions. A document built or chosen at run time (a
conditional, a loop element, a concatenation, an f-string, a call result, a lambda's parameter), or
passed with a `check` other than the literal `True`, is left to the run-time check of `graphql()`.

The program has already been accepted by the Starlark compiler, which is the authority on syntax.
Starlark is a syntactic subset of Python, so Python's `ast` reads it; when `ast` cannot, the analysis
reports nothing rather than second-guess the compiler. Nothing here recurses over the program's
structure, so a deeply nested (but compilable) program cannot exhaust the Python stack.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import graphql

__all__ = ["ProgramProblem", "analyze_program"]

_DOCUMENT_CACHE_SIZE = 1024
_MAX_PROBLEMS = 100
# (document, call) pairs judged per program; past it the rest are judged when the calls run. Real
# programs have tens; the bound is for the n call sites x m calls of one function that take a document.
_MAX_DOCUMENT_CHECKS = 2000
# graphql(document, variables=None, operation_name=None, check=True), as DESIGN.md §8 gives it.
_GRAPHQL_PARAMETERS = ("document", "variables", "operation_name", "check")
# An operation name chosen at run time (a distinct value: None means "no operation name").
_UNKNOWN = object()
# The line breaks Python's tokenizer counts (str.splitlines also splits on \f, \v, \u2028, ...).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ProgramProblem:
    """A defect of the program: where it is (1-based line and column) and what is wrong."""

    line: int
    column: int
    message: str


def analyze_program(
    source: str, declared_tools: set[str], schema: graphql.GraphQLSchema
) -> list[ProgramProblem]:
    """Every static problem of `source`, ordered by position; [] when `ast` cannot read it."""
    try:
        module = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return []
    program = _Program.read(module)
    positions = _Positions(source)
    found = itertools.chain(
        _undeclared_tools(program, declared_tools, positions),
        _document_problems(program, schema, positions),
    )
    return _first_problems(found)


def _first_problems(found: Iterable[ProgramProblem]) -> list[ProgramProblem]:
    """The distinct problems in position order, at most _MAX_PROBLEMS of them and a note if more.

    Identical text at the same place tells the reader nothing new (two calls on one line). The cap
    keeps a pathological program (a thousand call sites feeding a thousand calls) from building an
    error of a million entries in the server process: generation stops at the first one over it.
    """
    unique: dict[ProgramProblem, None] = {}
    for problem in found:
        if len(unique) == _MAX_PROBLEMS and problem not in unique:
            listed = sorted(unique, key=lambda p: (p.line, p.column))
            note = f"more problems follow; only the first {_MAX_PROBLEMS} are listed, fix these first"
            return [*listed, ProgramProblem(problem.line, problem.column, note)]
        unique[problem] = None
    return sorted(unique, key=lambda p: (p.line, p.column))


# --- the program's names and scopes ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Binding:
    """One place a scope binds a name."""

    node: ast.AST
    # The value of a plain `name = value` (or `name: T = value`); None for any other kind of binding.
    assigned_value: ast.expr | None = None
    # A positional or keyword parameter of a `def` (not `*args`/`**kwargs`, not a lambda's).
    is_parameter: bool = False


@dataclass(eq=False)
class _Scope:
    node: ast.AST
    parent: _Scope | None
    bindings: dict[str, list[_Binding]] = field(default_factory=dict)
    declared_global: set[str] = field(default_factory=set)

    def bind(self, name: str, binding: _Binding) -> None:
        self.bindings.setdefault(name, []).append(binding)

    def defining_scope(self, name: str) -> _Scope | None:
        """The scope whose binding `name` refers to here; None for a predeclared name (`graphql`, ...)."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.bindings:
                return scope
            scope = scope.parent
        return None

    def nearest_function_or_module(self) -> _Scope:
        scope = self
        while isinstance(scope.node, _COMPREHENSIONS) and scope.parent is not None:
            scope = scope.parent
        return scope


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class _Program:
    """The parsed module with every scope's bindings and the scope each name and call is read in."""

    module_scope: _Scope
    scope_of: dict[ast.AST, _Scope]  # for every ast.Name and ast.Call, and the scope defining each def
    # Calls whose callee is a plain name, by (the scope defining that name, the name).
    calls_by_callee: dict[tuple[int, str], list[ast.Call]]

    @classmethod
    def read(cls, module: ast.Module) -> _Program:
        module_scope = _Scope(module, None)
        scope_of: dict[ast.AST, _Scope] = {}
        scopes: list[_Scope] = [module_scope]
        pending: list[tuple[ast.AST, _Scope]] = [(module, module_scope)]
        while pending:
            node, scope = pending.pop()
            pending.extend(_visit(node, scope, scope_of, scopes))
        _move_global_bindings_to_module(scopes, module_scope)
        calls_by_callee: dict[tuple[int, str], list[ast.Call]] = {}
        for node, scope in scope_of.items():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                defining = scope.defining_scope(node.func.id)
                if defining is not None:
                    calls_by_callee.setdefault((id(defining), node.func.id), []).append(node)
        for calls in calls_by_callee.values():
            calls.sort(key=_source_order)  # so routes, and problems, come in the order a reader meets them
        return cls(module_scope, scope_of, calls_by_callee)

    def is_predeclared(self, name: ast.Name) -> bool:
        """True when `name` is not bound by the program: it is the host's (`graphql`, `tools`)."""
        scope = self.scope_of.get(name)
        return scope is not None and scope.defining_scope(name.id) is None

    def module_constant(self, name: str) -> _Binding | None:
        """The binding of a module constant: bound once, at module level, to a string literal."""
        bindings = self.module_scope.bindings.get(name, [])
        if len(bindings) == 1 and _string_literal(bindings[0].assigned_value) is not None:
            return bindings[0]
        return None


def _visit(
    node: ast.AST, scope: _Scope, scope_of: dict[ast.AST, _Scope], scopes: list[_Scope]
) -> Iterator[tuple[ast.AST, _Scope]]:
    """Records what `node` binds and yields its children with the scope each is evaluated in."""
    if isinstance(node, (ast.Name, ast.Call, *_FUNCTIONS)):
        scope_of[node] = scope
    if isinstance(node, _FUNCTIONS):
        scope.bind(node.name, _Binding(node))
        inner = _new_scope(node, scope, scopes)
        _bind_parameters(node.args, inner, followable=True)
        yield from _in_scope(scope, [*node.decorator_list, *_parameter_defaults(node.args), node.returns])
        yield from _in_scope(scope, [a.annotation for a in _all_parameters(node.args)])
        yield from _in_scope(inner, node.body)
    elif isinstance(node, ast.Lambda):
        inner = _new_scope(node, scope, scopes)
        _bind_parameters(node.args, inner, followable=False)
        yield from _in_scope(scope, _parameter_defaults(node.args))
        yield (node.body, inner)
    elif isinstance(node, _COMPREHENSIONS):
        # The first iterable is evaluated outside; targets, conditions and the element inside.
        inner = _new_scope(node, scope, scopes)
        first, *rest = node.generators
        yield (first.iter, scope)
        yield from _in_scope(inner, [first.target, *first.ifs])
        for generator in rest:
            yield from _in_scope(inner, [generator.iter, generator.target, *generator.ifs])
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        yield from _in_scope(inner, elements)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _single_name_target(node) is not None:
        target = _single_name_target(node)
        assert target is not None
        scope_of[target] = scope
        scope.bind(target.id, _Binding(target, assigned_value=node.value))
        yield from _in_scope(scope, [node.value, getattr(node, "annotation", None)])
    elif isinstance(node, ast.Name):
        if not isinstance(node.ctx, ast.Load):
            scope.bind(node.id, _Binding(node))
    elif isinstance(node, ast.NamedExpr):
        # `x := v` binds in the enclosing function even from inside a comprehension.
        scope_of[node.target] = scope
        scope.nearest_function_or_module().bind(node.target.id, _Binding(node.target))
        yield (node.value, scope)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        if isinstance(node, ast.Global):
            scope.declared_global.update(node.names)
        else:  # Not Starlark; binding it locally is the cautious reading (the name is not predeclared).
            for name in node.names:
                scope.bind(name, _Binding(node))
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            scope.bind((alias.asname or alias.name).split(".")[0], _Binding(node))
    elif isinstance(node, ast.ExceptHandler) and node.name:
        scope.bind(node.name, _Binding(node))
        yield from _in_scope(scope, ast.iter_child_nodes(node))
    elif isinstance(node, ast.ClassDef):
        scope.bind(node.name, _Binding(node))
        yield from _in_scope(scope, ast.iter_child_nodes(node))
    else:
        _bind_load_statement(node, scope)
        yield from _in_scope(scope, ast.iter_child_nodes(node))


def _in_scope(scope: _Scope, nodes: Iterable[ast.AST | None]) -> Iterator[tuple[ast.AST, _Scope]]:
    return ((n, scope) for n in nodes if n is not None)


def _new_scope(node: ast.AST, parent: _Scope, scopes: list[_Scope]) -> _Scope:
    scope = _Scope(node, parent)
    scopes.append(scope)
    return scope


def _single_name_target(node: ast.Assign | ast.AnnAssign) -> ast.Name | None:
    if isinstance(node, ast.AnnAssign):
        target = node.target if node.value is not None else None
    else:
        target = node.targets[0] if len(node.targets) == 1 else None
    return target if isinstance(target, ast.Name) else None


def _all_parameters(args: ast.arguments) -> list[ast.arg]:
    extras = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extras]


def _parameter_defaults(args: ast.arguments) -> list[ast.expr]:
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _bind_parameters(args: ast.arguments, scope: _Scope, *, followable: bool) -> None:
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        scope.bind(arg.arg, _Binding(arg, is_parameter=followable))
    for arg in (args.vararg, args.kwarg):
        if arg is not None:  # a tuple or dict, never a document
            scope.bind(arg.arg, _Binding(arg))


def _bind_load_statement(node: ast.AST, scope: _Scope) -> None:
    """Starlark's `load("module", "a", b="c")` reads as a call in Python but binds `a` and `b`."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and scope.parent is None):
        return
    call = node.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "load"):
        return
    for arg in call.args[1:]:
        if (name := _string_literal(arg)) is not None:
            scope.bind(name, _Binding(node))
    for keyword in call.keywords:
        if keyword.arg is not None:
            scope.bind(keyword.arg, _Binding(node))


def _move_global_bindings_to_module(scopes: list[_Scope], module_scope: _Scope) -> None:
    # An assignment under `global X` rebinds the module's X: it no longer has a single binding.
    for scope in scopes:
        for name in scope.declared_global:
            module_scope.bindings.setdefault(name, []).extend(scope.bindings.pop(name, []))


def _source_order(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def _string_literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


# --- positions ---------------------------------------------------------------------------------------


class _Positions:
    """ast counts columns in UTF-8 bytes from 0; problems count characters from 1."""

    def __init__(self, source: str) -> None:
        self._lines = _LINE_BREAK.split(source)

    def of(self, node: ast.AST) -> tuple[int, int]:
        line: int = getattr(node, "lineno", 1)
        byte_offset: int = getattr(node, "col_offset", 0)
        text = self._lines[line - 1] if 0 < line <= len(self._lines) else ""
        prefix = text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore")
        return line, len(prefix) + 1


# --- tools.<name> ------------------------------------------------------------------------------------


def _undeclared_tools(
    program: _Program, declared_tools: set[str], positions: _Positions
) -> Iterator[ProgramProblem]:
    declared = sorted(declared_tools)
    declared_text = ", ".join(f"`{name}`" for name in declared) or "none"
    attributes = (node for node in ast.walk(program.module_scope.node) if isinstance(node, ast.Attribute))
    for node in sorted(attributes, key=_source_order):
        if not isinstance(node.value, ast.Name):
            continue
        if node.value.id != "tools" or not program.is_predeclared(node.value):
            continue  # a program that binds `tools` itself means its own value
        if node.attr in declared_tools:
            continue
        line, column = positions.of(node)
        yield ProgramProblem(
            line,
            column,
            f"`tools.{node.attr}` is not declared: the action's `tools` references declare {declared_text}; "
            f"add a reference to it in `tools`, or fix the name{_did_you_mean(node.attr, declared)}",
        )


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


# --- graphql() calls ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _GraphqlCall:
    """A call of the host's `graphql()` with its arguments by parameter name (absent: None)."""

    call: ast.Call
    scope: _Scope
    document: ast.expr | None
    variables: ast.expr | None
    operation_name: ast.expr | None
    check: ast.expr | None


def _graphql_calls(program: _Program) -> list[_GraphqlCall]:
    calls = []
    for node, scope in program.scope_of.items():
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "graphql"):
            continue
        if not program.is_predeclared(node.func):
            continue  # the program's own `graphql`
        arguments = _graphql_arguments(node)
        if arguments is not None:
            calls.append(_GraphqlCall(node, scope, **arguments))
    return sorted(calls, key=lambda c: _source_order(c.call))


def _graphql_arguments(call: ast.Call) -> dict[str, ast.expr | None] | None:
    """The arguments by parameter name; None when a `*args` or `**kwargs` hides what is passed."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    arguments: dict[str, ast.expr | None] = dict.fromkeys(_GRAPHQL_PARAMETERS)
    for parameter, value in zip(_GRAPHQL_PARAMETERS, call.args):
        arguments[parameter] = value
    for keyword in call.keywords:
        if keyword.arg in arguments and arguments[keyword.arg] is None:
            arguments[keyword.arg] = keyword.value
    return arguments


def _checked_when_called(call: _GraphqlCall) -> bool:
    # With any `check` but the literal True the program may want the errors back: judged at run time.
    return call.check is None or (isinstance(call.check, ast.Constant) and call.check.value is True)


# --- how a document reaches a call -------------------------------------------------------------------


@dataclass(frozen=True)
class _Origin:
    """Where a statically known document is written: a literal, or the literal of a module constant."""

    literal: ast.Constant
    constant_name: str | None = None  # set for a module constant
    constant_line: int = 0

    @property
    def text(self) -> str:
        return self.literal.value

    @property
    def line(self) -> int:
        return self.constant_line if self.constant_name else self.literal.lineno


@dataclass(frozen=True)
class _Parameter:
    """A parameter of one of the program's functions, not rebound in its body."""

    function: ast.FunctionDef | ast.AsyncFunctionDef
    name: str


@dataclass(frozen=True)
class _Hop:
    """A call of one of the program's functions passing the document in as `parameter`."""

    parameter: _Parameter
    call: ast.Call


@dataclass(frozen=True)
class _Route:
    """A document's way to a `graphql()` call: its origin and the functions it passes through, in order."""

    origin: _Origin
    hops: tuple[_Hop, ...]


def _what_expression_is(
    program: _Program, expression: ast.expr | None, scope: _Scope
) -> _Origin | _Parameter | None:
    """A statically known origin, a parameter to follow to its call sites, or None (run time)."""
    if isinstance(expression, ast.Constant):
        return _Origin(expression) if isinstance(expression.value, str) else None
    if not isinstance(expression, ast.Name):
        return None  # a conditional, a concatenation, an f-string, a subscript, a call: run time
    defining = scope.defining_scope(expression.id)
    if defining is None:
        return None
    if defining is program.module_scope:
        constant = program.module_constant(expression.id)
        if constant is None or not isinstance(constant.assigned_value, ast.Constant):
            return None
        return _Origin(constant.assigned_value, expression.id, getattr(constant.node, "lineno", 0))
    bindings = defining.bindings[expression.id]
    if len(bindings) == 1 and bindings[0].is_parameter and isinstance(defining.node, _FUNCTIONS):
        return _Parameter(defining.node, expression.id)
    return None  # a local variable, a loop variable, a lambda's parameter: run time


def _routes_to(
    program: _Program, call: _GraphqlCall, routes_by_parameter: dict[_Parameter, list[_Route]]
) -> list[_Route]:
    """Every statically known document that reaches `call`, once per origin (by its shortest way).

    What feeds a parameter does not depend on the call using it: `routes_by_parameter` remembers it, so
    a function with many `graphql()` calls and many call sites is walked once.
    """
    start = _what_expression_is(program, call.document, call.scope)
    if start is None:
        return []
    if isinstance(start, _Origin):
        return [_Route(start, ())]
    if start not in routes_by_parameter:
        routes_by_parameter[start] = _routes_into(program, start)
    return routes_by_parameter[start]


def _routes_into(program: _Program, start: _Parameter) -> list[_Route]:
    # Walk backwards from the parameter to the call sites that feed it. A parameter is visited once,
    # which is what ends recursive chains (`a` calls `b` calls `a`).
    toward_graphql: dict[_Parameter, tuple[_Hop, _Parameter] | None] = {start: None}
    routes: dict[_Origin, _Route] = {}
    queue: deque[_Parameter] = deque([start])
    while queue:
        parameter = queue.popleft()
        for site in _call_sites(program, parameter.function):
            argument = _argument_for(site, parameter)
            found = _what_expression_is(program, argument, program.scope_of[site])
            hop = _Hop(parameter, site)
            if isinstance(found, _Origin) and found not in routes:
                routes[found] = _Route(found, _hops_from(hop, parameter, toward_graphql))
            elif isinstance(found, _Parameter) and found not in toward_graphql:
                toward_graphql[found] = (hop, parameter)
                queue.append(found)
    return list(routes.values())


def _hops_from(
    first: _Hop, parameter: _Parameter, toward_graphql: dict[_Parameter, tuple[_Hop, _Parameter] | None]
) -> tuple[_Hop, ...]:
    hops = [first]
    step = toward_graphql[parameter]
    while step is not None:
        hop, parameter = step
        hops.append(hop)
        step = toward_graphql[parameter]
    return tuple(hops)


def _call_sites(program: _Program, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    """Calls of `function` by its name; none when the name is bound more than once (which def runs?)."""
    owner = program.scope_of[function]
    bindings = owner.bindings.get(function.name, [])
    if len(bindings) != 1 or bindings[0].node is not function:
        return []
    return program.calls_by_callee.get((id(owner), function.name), [])


def _argument_for(site: ast.Call, parameter: _Parameter) -> ast.expr | None:
    """The expression a call site passes for `parameter`; None when not passed or hidden by a splat."""
    arguments = parameter.function.args
    positional = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    if parameter.name in positional:
        index = positional.index(parameter.name)
        for position, argument in enumerate(site.args):
            if isinstance(argument, ast.Starred):
                return None  # `f(*xs)`: which element lands here is known at run time only
            if position == index:
                return argument
    if parameter.name not in [a.arg for a in arguments.posonlyargs]:
        for keyword in site.keywords:
            if keyword.arg == parameter.name:
                return keyword.value
    return None  # the default, or passed in a `**kwargs`: not followed


# --- validating a document at a call -----------------------------------------------------------------


@dataclass(frozen=True)
class _Operation:
    name: str | None
    required_variables: tuple[tuple[str, str], ...]  # (name, type as written), non-null without default


@dataclass(frozen=True)
class _DocumentVerdict:
    errors: tuple[str, ...]  # the syntax error, or every validation error, as graphql-core words them
    operations: tuple[_Operation, ...] | None  # None when the document does not parse


@lru_cache(maxsize=_DOCUMENT_CACHE_SIZE)
def _judge_document(text: str, schema: graphql.GraphQLSchema) -> _DocumentVerdict | None:
    """Parses and validates one document text; None when it is too deep for graphql-core to judge.

    Keyed by the schema object itself, not id(schema): the cache keeps the schema alive, so a
    collected schema's id can never be reused to read another schema's verdicts.
    """
    try:
        document = graphql.parse(text)
    except graphql.GraphQLSyntaxError as error:
        return _DocumentVerdict((_with_document_location(error),), None)
    except RecursionError:
        return None
    try:
        errors = tuple(e.message for e in graphql.validate(schema, document))
    except RecursionError:
        return None
    return _DocumentVerdict(errors, tuple(_operations(document)))


def _with_document_location(error: graphql.GraphQLError) -> str:
    # A syntax error's message alone ("Expected Name, found '}'") does not say where in the document.
    if not error.locations:
        return error.message
    location = error.locations[0]
    return f"{error.message} (document line {location.line}, column {location.column})"


def _operations(document: graphql.DocumentNode) -> Iterator[_Operation]:
    for definition in document.definitions:
        if isinstance(definition, graphql.OperationDefinitionNode):
            required = tuple(
                (variable.variable.name.value, graphql.print_ast(variable.type))
                for variable in definition.variable_definitions or ()
                if isinstance(variable.type, graphql.NonNullTypeNode) and variable.default_value is None
            )
            yield _Operation(definition.name.value if definition.name else None, required)


def _document_problems(
    program: _Program, schema: graphql.GraphQLSchema, positions: _Positions
) -> Iterator[ProgramProblem]:
    # Each (origin, call) pair comes once: `_routes_to` gives each origin once per call, and a message
    # repeated within one document (the same bad field twice) is dropped with the other duplicates.
    routes_by_parameter: dict[_Parameter, list[_Route]] = {}
    routes = (
        (call, route)
        for call in _graphql_calls(program)
        if _checked_when_called(call)
        for route in _routes_to(program, call, routes_by_parameter)
    )
    for call, route in itertools.islice(routes, _MAX_DOCUMENT_CHECKS):
        verdict = _judge_document(route.origin.text, schema)
        if verdict is None:
            continue
        line, column = positions.of(route.origin.literal)
        for message in _verdict_messages(program, verdict, call):
            yield ProgramProblem(line, column, f"{_describe_route(route, call)}: {message}")


def _verdict_messages(program: _Program, verdict: _DocumentVerdict, call: _GraphqlCall) -> list[str]:
    messages = list(verdict.errors)
    if verdict.operations is None:
        return messages
    operation, operation_problem = _chosen_operation(program, verdict.operations, call)
    if operation_problem:
        messages.append(operation_problem)
    if operation is not None:
        messages.extend(_missing_variables(operation, call.variables))
    return messages


def _chosen_operation(
    program: _Program, operations: tuple[_Operation, ...], call: _GraphqlCall
) -> tuple[_Operation | None, str | None]:
    """The operation the call runs (None when unknowable) and the problem in choosing it, if any.

    The problems are worded as graphql-core words them when the call runs.
    """
    if not operations:
        return None, "Must provide an operation."
    wanted = _operation_name(program, call)
    if wanted is _UNKNOWN:
        return (operations[0], None) if len(operations) == 1 else (None, None)
    if wanted is None:
        if len(operations) > 1:
            return None, "Must provide operation name if query contains multiple operations."
        return operations[0], None
    for operation in operations:
        if operation.name == wanted:
            return operation, None
    return None, f"Unknown operation named '{wanted}'."


def _operation_name(program: _Program, call: _GraphqlCall) -> str | None | object:
    """The literal operation name (None when absent or None), or _UNKNOWN when chosen at run time."""
    expression = call.operation_name
    if expression is None or (isinstance(expression, ast.Constant) and expression.value is None):
        return None
    found = _what_expression_is(program, expression, call.scope)
    return found.text if isinstance(found, _Origin) else _UNKNOWN


def _missing_variables(operation: _Operation, variables: ast.expr | None) -> list[str]:
    supplied = _supplied_variable_names(variables)
    if supplied is None:
        return []
    return [
        f"Variable '${name}' of required type '{type_text}' was not provided."
        for name, type_text in operation.required_variables
        if name not in supplied
    ]


def _supplied_variable_names(variables: ast.expr | None) -> set[str] | None:
    """The variable names a call passes; None when they are known only at run time."""
    if variables is None or (isinstance(variables, ast.Constant) and variables.value is None):
        return set()
    if not isinstance(variables, ast.Dict):
        return None
    names = {_string_literal(key) for key in variables.keys}  # a `**spread` has key None
    if None in names:
        return None
    return {name for name in names if name is not None}


def _describe_route(route: _Route, call: _GraphqlCall) -> str:
    """E.g. "the constant `DOC` (line 1) passed to `outer(d)` at line 12, then to `inner(x)` at line 7,
    reaches `graphql()` at line 3"; a call's line is left out when it is the literal's own line."""
    origin = route.origin
    if origin.constant_name:
        subject = f"the constant `{origin.constant_name}` (line {origin.line})"
    else:
        subject = f"the {'literal' if route.hops else 'document'} at line {origin.line}"
    own_line = None if origin.constant_name else origin.line
    if not route.hops:
        return f"{subject} passed to `graphql()`{_at_line(call.call.lineno, own_line)}"
    steps = []
    for index, hop in enumerate(route.hops):
        called = f"`{hop.parameter.function.name}({hop.parameter.name})`"
        steps.append(f"{'passed to' if index == 0 else 'then to'} {called}"
                     f"{_at_line(hop.call.lineno, own_line if index == 0 else None)}")
    # "passed to `f(d)` reaches", but "passed to `f(d)`, then to `g(x)`, reaches".
    separator = ", " if len(steps) > 1 else " "
    return f"{subject} {', '.join(steps)}{separator}reaches `graphql()` at line {call.call.lineno}"


def _at_line(line: int, same_as: int | None) -> str:
    return "" if line == same_as else f" at line {line}"
