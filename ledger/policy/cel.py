"""CEL for policy assertions and for the native `cel` tool, on cel-expr-python (cel-cpp).

Two kinds of expression live here:

- *assertions*: boolean expressions over `principal`, `context` and `action`, compiled once per text
  and evaluated for every policy decision;
- *free expressions* for the `cel` tool and `{"$cel": ...}` fixed input, over caller-chosen variables,
  each declared `dyn` because CEL rejects undeclared names at compile time.

Both get standard CEL plus `uuid(string)`. "Cannot be evaluated" (a missing key, a type mismatch at run
time, a malformed uuid, the iteration budget) is kept distinct from `false`: the policy engine treats
the two differently.

Every expression is bounded (DESIGN section 17): its text at most 16 KiB when it is compiled, and
before each evaluation `cel_bounds` refuses one that could build a value over 1 MiB or do too much
work over the actual variables. cel-cpp holds the GIL and cannot be stopped once it evaluates.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import math
import re
import threading
import uuid as uuid_module
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from ledger.errors import LedgerError
from ledger.policy import cel_bounds
from ledger.policy.cel_bounds import MAX_EXPRESSION_BYTES, BoundExceeded, Plan, plan_of, read_paths

ASSERTION_VARIABLES = ("principal", "context", "action")
_ASSERTION_VARIABLE_SET = frozenset(ASSERTION_VARIABLES)

_ASSERTION_CACHE_SIZE = 4096
_EXPRESSION_CACHE_SIZE = 1024
_ENV_CACHE_SIZE = 256

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# Identifiers the CEL grammar keeps for itself: a variable with such a name could never be referenced.
_CEL_RESERVED_WORDS = frozenset(
    "false in null true as break const continue else for function if import let loop package "
    "namespace return var void while".split()
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HYPHENATED_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_COMPACT_UUID = re.compile(r"[0-9a-fA-F]{32}")


class CelError(LedgerError):
    code = "cel_error"


# --- uuid() -------------------------------------------------------------------------------------


def canonical_uuid(text: str) -> str:
    """The canonical lowercase hyphenated form of `text`; ValueError when it is not a UUID.

    Only the hyphenated and the 32-hex-digit forms are accepted: Python's `uuid.UUID` would also take
    braces, `urn:uuid:` and hyphens anywhere, which is more leniency than a policy should rely on.
    """
    if not (_HYPHENATED_UUID.fullmatch(text) or _COMPACT_UUID.fullmatch(text)):
        raise ValueError(f"uuid(): {text!r} is not a UUID")
    return str(uuid_module.UUID(text))


def _uuid_function() -> cel.FunctionDecl:
    # An exception raised by the implementation becomes a CEL error value ("cannot be evaluated").
    return cel.FunctionDecl(
        "uuid", [cel.Overload("uuid_string", cel.Type.STRING, [cel.Type.STRING], impl=canonical_uuid)]
    )


# --- environments --------------------------------------------------------------------------------

# Whether cel-cpp's compiler tolerates concurrent use is not documented; compiles are rare (cached),
# so they are serialised rather than trusted.
_compile_lock = threading.Lock()


@lru_cache(maxsize=_ENV_CACHE_SIZE)
def _env_for(names: frozenset[str]) -> cel.Env:
    with _compile_lock:
        return cel.NewEnv(variables={name: cel.Type.DYN for name in names}, functions=[_uuid_function()])


def _assertion_env() -> cel.Env:
    return _env_for(frozenset(ASSERTION_VARIABLES))


# --- messages ------------------------------------------------------------------------------------

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")
_ERROR_LOCATION = re.compile(r"ERROR: <input>:(\d+):(\d+): ")
_OPERATOR_NAME = re.compile(r"'_([^'\w]+)_'|'([!-])_'|'@in'")


def _operator_name(match: re.Match[str]) -> str:
    # cel-cpp names operators by their internal function ids ('_==_', '!_', '@in').
    if match.group(0) == "'@in'":
        return "'in'"
    return f"'{match.group(1) or match.group(2)}'"


def readable_compile_error(raw: str) -> str:
    """cel-cpp's status text, turned into "line L, column C: problem" plus the caret excerpt."""
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", raw.strip()))
    text = _ERROR_LOCATION.sub(lambda m: f"line {m.group(1)}, column {m.group(2)}: ", text)
    text = text.replace(" (in container '')", "")
    return _OPERATOR_NAME.sub(_operator_name, text)


def readable_evaluation_error(raw: str) -> str:
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", str(raw).strip()))
    return text.replace("Key not found in map : ", "no such key: ")


def _compile(env: cel.Env, text: str, what: str) -> tuple[cel.Expression, Plan]:
    if not text.strip():
        raise CelError(f"the {what} is empty", hint="write an expression, e.g. `x > 3`")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_EXPRESSION_BYTES:
        raise CelError(
            f"the {what} is {size:,} bytes long, over the limit of {MAX_EXPRESSION_BYTES:,} bytes (16 KiB)",
            hint="write a shorter expression: pass data as variables rather than as literals",
        )
    try:
        with _compile_lock:
            expression = env.compile(text)
            return expression, plan_of(expression.serialize())
    except RuntimeError as error:
        raise CelError(
            f"the {what} does not compile: {readable_compile_error(str(error))}",
            hint="fix the expression at the position shown; variables are dynamically typed, "
            "functions are standard CEL plus uuid(string)",
        ) from None


# --- values in and out ---------------------------------------------------------------------------


def cel_data(value: Any) -> Any:
    """`value` in the shapes cel-expr-python accepts.

    cel-expr-python converts a variable as a whole, so one unsupported value anywhere inside a
    document (a UUID, a Decimal, a datetime) would make *every* reference to that variable "cannot be
    evaluated". UUIDs become canonical strings, as the contract promises; Decimals become int when
    integral, else float; datetimes and dates become ISO 8601 text (usable with `timestamp()`);
    integers beyond int64 become decimal text rather than poisoning the variable.
    """
    kind = type(value)
    if kind is str or kind is bool or kind is float or value is None:
        return value
    if kind is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else str(value)
    if kind is dict:
        return {key: cel_data(item) for key, item in value.items()}
    if kind is list:
        return [cel_data(item) for item in value]
    return _cel_data_uncommon(value)


def _cel_data_uncommon(value: Any) -> Any:
    if isinstance(value, uuid_module.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return cel_data(value.value)
    if isinstance(value, int):
        return cel_data(int(value))
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return cel_data(int(value))
        return float(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, Mapping):
        return {cel_data(key): cel_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [cel_data(item) for item in value]
    return str(value)


def json_value(value: Any) -> Any:
    """A CEL result (`Value.plain_value()`) as JSON, following the protobuf JSON mapping.

    bytes -> base64, timestamp -> RFC 3339 in UTC, duration -> "1.5s", NaN/infinities -> "NaN",
    "Infinity", "-Infinity", a type -> its name, map keys -> strings.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime):
        return _rfc3339(value)
    if isinstance(value, dt.timedelta):
        return _duration_text(value)
    if isinstance(value, cel.Type):
        return value.name().lower()  # CEL spells type names in lower case
    if isinstance(value, Mapping):
        return {_json_key(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return str(value)


def _json_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return key if isinstance(key, str) else str(json_value(key))


def _rfc3339(moment: dt.datetime) -> str:
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds") + "Z"


def _duration_text(span: dt.timedelta) -> str:
    micros = (span.days * 86_400 + span.seconds) * 1_000_000 + span.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    fraction_text = f".{fraction:06d}".rstrip("0") if fraction else ""
    return f"{sign}{seconds}{fraction_text}s"


# --- assertions ----------------------------------------------------------------------------------


def assertion_activation(principal: Any, context: Any, action: Any) -> cel.Activation:
    """One activation per decision: cel-expr-python converts the data lazily and keeps the result,
    so every assertion evaluated in the same activation after the first is cheap."""
    return _assertion_env().Activation({"principal": principal, "context": context, "action": action})


class CompiledAssertion:
    """A policy assertion compiled once; evaluates to True, False or None (cannot be evaluated).

    `reads`: the paths of `principal`, `context` and `action` its verdict depends on, or None when that
    cannot be bounded exactly (`cel_bounds.read_paths`)."""

    __slots__ = ("text", "_expression", "_plan", "reads")

    def __init__(self, text: str, expression: cel.Expression, plan: Plan) -> None:
        self.text = text
        self._expression = expression
        self._plan = plan
        self.reads = read_paths(plan, _ASSERTION_VARIABLE_SET)

    def evaluate(self, principal: dict, context: dict, action: dict | None) -> bool | None:
        variables = {"principal": cel_data(principal), "context": cel_data(context), "action": cel_data(action)}
        return self.evaluate_in(assertion_activation(**variables), variables)

    def evaluate_in(self, activation: cel.Activation, variables: Mapping[str, Any]) -> bool | None:
        """`variables` are the activation's data (in cel_data shapes), for the bound on what it may build."""
        try:
            cel_bounds.check(self._plan, variables)
        except BoundExceeded:
            return None  # an assertion past the bounds cannot be evaluated
        try:
            result = self._expression.eval(activation).plain_value()
        except Exception:  # the iteration budget raises instead of yielding an error value
            return None
        # An error value's plain_value() is its message; a dyn expression may also yield a non-bool.
        if result is True or result is False:
            return result
        return None

    def __repr__(self) -> str:
        return f"CompiledAssertion({self.text!r})"


@lru_cache(maxsize=_ASSERTION_CACHE_SIZE)
def _compile_assertion_cached(text: str) -> CompiledAssertion | CelError:
    # Failures are cached too, so a bad text sent over and over does not recompile each time.
    try:
        expression, plan = _compile(_assertion_env(), text, "assertion")
    except CelError as error:
        return error
    result_type = expression.return_type()
    if not (result_type == cel.Type.BOOL or result_type == cel.Type.DYN):
        return CelError(
            f"the assertion must be a boolean expression (this one is of type {result_type.name().lower()})",
            hint="compare or test something, e.g. `context.document.currency == \"EUR\"`",
        )
    return CompiledAssertion(text, expression, plan)


def compile_assertion(text: str) -> CompiledAssertion:
    """Compile a policy assertion (cached); CelError with a readable message when it does not compile."""
    if not isinstance(text, str):
        raise CelError("an assertion must be a string", hint="write the assertion as CEL text")
    compiled = _compile_assertion_cached(text)
    if isinstance(compiled, CelError):
        raise CelError(compiled.message, hint=compiled.hint)
    return compiled


# --- free expressions (the `cel` tool) -----------------------------------------------------------


def _variable_names(names: Iterable[Any]) -> frozenset[str]:
    checked = frozenset(names)
    for name in checked:
        if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or name in _CEL_RESERVED_WORDS:
            raise CelError(
                f"{name!r} cannot be a CEL variable name",
                hint="use letters, digits and underscores, not starting with a digit, and not a CEL "
                "reserved word such as `in` or `null`",
            )
    return checked


@lru_cache(maxsize=_EXPRESSION_CACHE_SIZE)
def _compile_expression_cached(names: frozenset[str], text: str) -> tuple[cel.Expression, Plan] | CelError:
    try:
        return _compile(_env_for(names), text, "CEL expression")
    except CelError as error:
        return error


def _compiled_expression(text: str, names: frozenset[str]) -> tuple[cel.Expression, Plan]:
    if not isinstance(text, str):
        raise CelError("a CEL expression must be a string", hint="pass the expression as text")
    compiled = _compile_expression_cached(names, text)
    if isinstance(compiled, CelError):
        raise CelError(compiled.message, hint=compiled.hint)
    return compiled


def compile_expression_check(text: str, names: Iterable[str]) -> None:
    """Validate an expression over the variables `names` when it is written; CelError if it does not compile."""
    _compiled_expression(text, _variable_names(names))


def evaluate_expression(text: str, variables: Mapping[str, Any]) -> Any:
    """Evaluate `text` over `variables` (each declared dyn) and return the result as JSON."""
    if not isinstance(variables, Mapping):
        raise CelError("the variables of a CEL expression must be an object", hint="pass e.g. {\"x\": 5}")
    expression, plan = _compiled_expression(text, _variable_names(variables))
    data = {name: cel_data(value) for name, value in variables.items()}
    try:
        cel_bounds.check(plan, data)
    except BoundExceeded as exceeded:
        raise CelError(exceeded.message, hint=exceeded.hint) from None
    try:
        value = expression.eval(data=data)
    except RuntimeError as error:  # the iteration budget raises instead of yielding an error value
        message = readable_evaluation_error(str(error))
        raise CelError(
            f"the CEL expression could not be evaluated: {message}",
            hint="iterate over smaller lists" if "budget" in message.lower() else None,
        ) from None
    if value.type() == cel.Type.ERROR:
        raise CelError(
            f"the CEL expression could not be evaluated: {readable_evaluation_error(value.plain_value())}",
            hint="an expression cannot be evaluated when it reads a missing key (guard with "
            "has(x.key)), mixes types, or gives a function a bad argument",
        )
    return json_value(value.plain_value())


# --- conditions (a trigger's, over `event`) -------------------------------------------------------


class CompiledCondition:
    """A boolean expression over named variables, compiled once: a trigger's condition over `event`.

    Like an assertion it is three-valued: True, False, or None when it cannot be evaluated (a missing key,
    a type mismatch, a bound passed, a result that is not a boolean), with the reason kept for the log."""

    __slots__ = ("text", "_expression", "_plan")

    def __init__(self, text: str, expression: cel.Expression, plan: Plan) -> None:
        self.text = text
        self._expression = expression
        self._plan = plan

    def evaluate(self, variables: Mapping[str, Any]) -> tuple[bool | None, str | None]:
        """(verdict, why it could not be evaluated); `variables` already in cel_data shapes."""
        try:
            cel_bounds.check(self._plan, variables)
        except BoundExceeded as exceeded:
            return None, exceeded.message
        try:
            value = self._expression.eval(data=dict(variables))
        except RuntimeError as error:  # the iteration budget raises instead of yielding an error value
            return None, readable_evaluation_error(str(error))
        if value.type() == cel.Type.ERROR:
            return None, readable_evaluation_error(value.plain_value())
        result = value.plain_value()
        if result is True or result is False:
            return result, None
        return None, f"the condition gave {json_value(result)!r}, not a boolean"


def compile_condition(text: str, names: Iterable[str]) -> CompiledCondition:
    """Compile a boolean expression over the variables `names` (cached by text); CelError when it does not
    compile or is of a type other than bool (dyn is allowed: its value is checked when evaluated)."""
    expression, plan = _compiled_expression(text, _variable_names(names))
    result_type = expression.return_type()
    if not (result_type == cel.Type.BOOL or result_type == cel.Type.DYN):
        raise CelError(
            f"the condition must be a boolean expression (this one is of type {result_type.name().lower()})",
            hint="compare or test something, e.g. `event.record.amount > 100000`",
        )
    return CompiledCondition(text, expression, plan)
