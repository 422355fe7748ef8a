"""A bound on what a CEL expression can build and how much work it can do, computed before it runs.

cel-cpp evaluates while holding the GIL and cannot be interrupted; inside one evaluation it keeps every
intermediate value in an arena until the end. Measured here (cel-expr-python 0.1.3): `(s+s)` nested to
256 leaves over a 1 MB string took a server to 2 GB; `l.map(x, x + 1)` over 5,000 items took 0.7 s
and 425 MB, because each step copies the accumulated list; `s.contains(t)` is a naive search (1 MB by
20 KB: 0.33 s). Its only limit is a budget of 10,000 comprehension iterations per evaluation.

So every evaluation the ledger runs in its server first walks the checked expression (from
`Expression.serialize()`, a `cel.expr.CheckedExpr`) over the sizes of the actual variables, and
refuses it when some value it could build exceeds `MAX_VALUE_BYTES` or its work could exceed
`MAX_WORK_UNITS`. The walk over-approximates: a refused expression might have stayed small (a branch
not taken, a filter that drops items), an accepted one cannot grow past the bounds.

Sizes: a string or bytes value counts its UTF-8 bytes, a list its items, a map its keys and values,
each value 8 bytes more. Work: one unit per byte a value built copies; 1/16 per byte a comparison,
`in` or `size` reads; a substring search costs (text bytes x needle bytes) / 16; a regex match its
text plus 16 per pattern byte. Comprehensions multiply by their iteration count, at most 10,000.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

MAX_EXPRESSION_BYTES = 16 << 10
MAX_VALUE_BYTES = 1 << 20
# Measured here: about 3 x 10^8 units a second (a map over 1,400 ints, the worst accepted, ~50 ms and
# tens of MB of arena). The evaluation holds the GIL, so this is how long it can hold the server.
MAX_WORK_UNITS = 16 << 20

# cel-cpp's comprehension budget for one evaluation (measured: 9,999 iterations pass, 10,000 fail).
_ITERATION_BUDGET = 10_000
_WORD = 8
_READ_DIVISOR = 16
_SEARCH_DIVISOR = 16
_PATTERN_FACTOR = 16
# An expression with fewer calls than this, none of which builds a value or searches, with no
# comprehension and only constant list and map literals, does work linear in its (bounded) inputs:
# it is not walked at each evaluation.
_FLAT_CALLS = 32

# Functions whose result is a scalar (or a small fixed-size value) and which only read their arguments.
_READING = frozenset({
    "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in", "size", "startsWith", "endsWith",
})
_SCALAR = _READING | frozenset({
    "_&&_", "_||_", "!_", "@not_strictly_false",
    "_-_", "_*_", "_/_", "_%_", "-_", "int", "uint", "double", "bool", "timestamp", "duration", "type",
    "getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfYear", "getDayOfWeek", "getHours",
    "getMinutes", "getSeconds", "getMilliseconds", "uuid",
})
_SEARCHING = frozenset({"contains", "matches"})
_PASSING = frozenset({"dyn", "_?_:_", "_[_]"})


class BoundExceeded(Exception):
    """The expression could build a value or do work past the bounds; `str()` says which."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


# --- the checked expression, from its protobuf wire form ------------------------------------


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(buf: bytes) -> list[tuple[int, Any]]:
    out = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 2:
            length, i = _varint(buf, i)
            value, i = buf[i:i + length], i + length
        else:
            raise ValueError(f"unexpected wire type {wire}")
        out.append((number, value))
    return out


def _constant(buf: bytes) -> tuple:
    for number, value in _fields(buf):
        if number in (6, 7):  # string_value, bytes_value
            text = value.decode("utf-8", "replace") if number == 6 else None
            return ("const", _WORD + len(value), False, text)
        if number == 3:  # int64_value: two's complement in a varint
            return ("const", _WORD, True, value - (1 << 64) if value >= 1 << 63 else value)
        if number == 5:
            return ("const", _WORD, True, struct.unpack("<d", value)[0])
    return ("const", _WORD, True, None)


def _expr(buf: bytes) -> tuple:
    for number, value in _fields(buf):
        if number == 3:
            return _constant(value)
        if number == 4:
            return ("ident", dict(_fields(value)).get(1, b"").decode())
        if number == 5:
            fields = _fields(value)
            operand = next((_expr(v) for n, v in fields if n == 1), ("const", _WORD, True, None))
            name = next((v.decode() for n, v in fields if n == 2), "")
            test_only = any(n == 3 and v for n, v in fields)
            return ("select", operand, name, test_only)
        if number == 6:
            fields = _fields(value)
            target = next((_expr(v) for n, v in fields if n == 1), None)
            function = next((v.decode() for n, v in fields if n == 2), "")
            args = tuple(_expr(v) for n, v in fields if n == 3)
            return ("call", function, ((target,) if target is not None else ()) + args)
        if number == 7:
            return ("list", tuple(_expr(v) for n, v in _fields(value) if n == 1))
        if number == 8:
            entries = []
            for n, entry in _fields(value):
                if n == 2:
                    parts = _fields(entry)
                    key = next((_expr(v) for k, v in parts if k == 3), ("const", _WORD, True, None))
                    item = next((_expr(v) for k, v in parts if k == 4), ("const", _WORD, True, None))
                    entries.append((key, item))
            return ("map", tuple(entries))
        if number == 9:
            parts: dict[int, Any] = {}
            for n, v in _fields(value):
                parts[n] = v
            none = ("const", _WORD, True, None)
            return ("comp", parts.get(1, b"").decode(), _expr(parts[2]) if 2 in parts else none,
                    parts.get(3, b"").decode(), _expr(parts[4]) if 4 in parts else none,
                    _expr(parts[5]) if 5 in parts else none, _expr(parts[6]) if 6 in parts else none,
                    _expr(parts[7]) if 7 in parts else none, parts.get(8, b"").decode())
    return ("const", _WORD, True, None)


@dataclass(frozen=True)
class Plan:
    """A checked expression's tree, and whether its evaluations need bounding."""

    tree: tuple
    flat: bool


def plan_of(serialized: bytes) -> Plan:
    any_fields = dict(_fields(serialized))
    checked = dict(_fields(any_fields.get(2, b"")))
    tree = _expr(checked.get(4, b""))
    return Plan(tree, _is_flat(tree))


def _is_flat(tree: tuple) -> bool:
    calls = 0
    pending = [tree]
    while pending:
        node = pending.pop()
        kind = node[0]
        if kind == "comp":
            return False
        if kind == "list":
            if any(element[0] != "const" for element in node[1]):
                return False
        elif kind == "map":
            if any(key[0] != "const" or value[0] != "const" for key, value in node[1]):
                return False
        if kind == "select":
            pending.append(node[1])
        elif kind == "call":
            if node[1] not in _SCALAR and node[1] not in _PASSING:
                return False
            calls += 1
            if calls >= _FLAT_CALLS:
                return False
            pending.extend(node[2])
    return True


# --- shapes: upper bounds of values ------------------------------------------------------------


class Shape:
    """An upper bound of a value: its size, its number of items, the bound of each item."""

    __slots__ = ("size", "count", "scalar", "_item")

    def __init__(self, size: int, count: int = 0, scalar: bool = False, item: "Shape | None" = None) -> None:
        self.size = size
        self.count = count
        self.scalar = scalar
        self._item = item

    def item(self) -> "Shape":
        if self._item is not None:
            return self._item
        # No finer knowledge: any part of a value is at most the value.
        return Shape(max(self.size - _WORD, _WORD), self.size // _WORD)

    def field(self, name: Any) -> "Shape":
        return self.item()


_SCALAR_SHAPE = Shape(_WORD, scalar=True)


class DataShape(Shape):
    """The exact shape of an actual variable's value, measured only where the expression looks."""

    __slots__ = ("_value", "_measured")

    def __init__(self, value: Any) -> None:
        self._value = value
        self._measured = False

    def __getattr__(self, name: str) -> Any:
        # size, count, scalar and _item are measured on first use.
        if name in ("size", "count", "scalar", "_item") and not self._measured:
            self._measured = True
            size, count, scalar, item = _measure(self._value)
            Shape.__init__(self, size, count, scalar, item)
            return getattr(self, name)
        raise AttributeError(name)

    def field(self, name: Any) -> Shape:
        value = self._value
        if isinstance(value, dict):
            if name in value:
                return DataShape(value[name])
            return _SCALAR_SHAPE  # a missing key cannot be evaluated: nothing is built from it
        if isinstance(value, list) and isinstance(name, int) and not isinstance(name, bool):
            return DataShape(value[name]) if -len(value) <= name < len(value) else _SCALAR_SHAPE
        return self.item()


def _text_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _measure(value: Any) -> tuple[int, int, bool, Shape | None]:
    """(size, item count, scalar, join of the items' shapes) of an actual value."""
    if isinstance(value, str):
        return _WORD + _text_size(value), 0, False, None
    if isinstance(value, (bytes, bytearray)):
        return _WORD + len(value), 0, False, None
    if isinstance(value, dict):
        parts = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        return _WORD, 0, True, None
    size = _WORD
    shapes = []
    for part in parts:
        kind = type(part)
        if kind is int or kind is float or kind is bool or part is None:
            shape = _SCALAR_SHAPE
        elif kind is str:
            shape = Shape(_WORD + _text_size(part))
        else:
            shape = DataShape(part)
        size += shape.size
        shapes.append(shape)
    return size, len(value), False, (_Joined(tuple(shapes)) if shapes else None)


def _join(a: Shape | None, b: Shape | None) -> Shape | None:
    if a is None:
        return b
    if b is None:
        return a
    return _Joined((a, b))


class _Joined(Shape):
    """At least as large as each of its parts; its items' bound is worked out only when asked for."""

    __slots__ = ("_parts", "_fields")

    def __init__(self, parts: tuple[Shape, ...]) -> None:
        super().__init__(max(part.size for part in parts), max(part.count for part in parts),
                         all(part.scalar for part in parts))
        self._parts = tuple({id(part): part for part in parts}.values())  # the same shape once
        self._fields: dict[Any, Shape] = {}

    def item(self) -> Shape:
        if self._item is None:
            self._item = _join_all(part.item() for part in self._parts if part.count) or _SCALAR_SHAPE
        return self._item

    def field(self, name: Any) -> Shape:
        # The items of a list of documents: the named field of any of them.
        if name not in self._fields:
            self._fields[name] = _join_all(part.field(name) for part in self._parts if not part.scalar) or _SCALAR_SHAPE
        return self._fields[name]


# --- the walk ----------------------------------------------------------------------------------


def _too_large(size: int) -> BoundExceeded:
    return BoundExceeded(
        f"the CEL expression could not be evaluated: it could build a value of up to {size:,} bytes, "
        f"over the limit of {MAX_VALUE_BYTES:,} bytes (1 MiB)",
        "CEL values are bounded at 1 MiB (a string's bytes, a list's or map's items with their sizes): "
        "concatenate fewer or smaller strings or lists",
    )


def _too_much_work(units: int) -> BoundExceeded:
    return BoundExceeded(
        f"the CEL expression could not be evaluated: it could do too much work over these variables "
        f"(a bound of {units:,} units, over the limit of {MAX_WORK_UNITS:,}: values built, compared and "
        "searched, times iterations)",
        "iterate over fewer or smaller items, build smaller values inside comprehensions, or search "
        "shorter strings",
    )


class _Walk:
    def __init__(self) -> None:
        self.work = 0

    def spend(self, units: int) -> None:
        self.work += units
        if self.work > MAX_WORK_UNITS:
            raise _too_much_work(self.work)

    def built(self, shape: Shape) -> Shape:
        if shape.size > MAX_VALUE_BYTES:
            raise _too_large(shape.size)
        self.spend(shape.size)
        return shape

    def shape(self, node: tuple, scope: dict[str, Shape]) -> Shape:
        kind = node[0]
        if kind == "const":
            return Shape(node[1], scalar=node[2])
        if kind == "ident":
            return scope.get(node[1], _SCALAR_SHAPE)  # else a type name such as `int`
        if kind == "select":
            operand = self.shape(node[1], scope)
            return _SCALAR_SHAPE if node[3] else operand.field(node[2])
        if kind == "call":
            return self._call(node[1], node[2], scope)
        if kind == "list":
            items = [self.shape(element, scope) for element in node[1]]
            return self.built(_collection(items, len(items)))
        if kind == "map":
            parts = []
            for key, value in node[1]:
                parts.append(self.shape(key, scope))
                parts.append(self.shape(value, scope))
            return self.built(_collection(parts, len(node[1])))
        return self._comprehension(node, scope)

    def _call(self, function: str, args: tuple, scope: dict[str, Shape]) -> Shape:
        if function == "_[_]" and len(args) == 2:
            operand = self.shape(args[0], scope)
            self.shape(args[1], scope)
            key = args[1]
            if key[0] == "const" and key[3] is not None and not isinstance(key[3], float):
                return operand.field(key[3])
            return operand.item()
        shapes = [self.shape(arg, scope) for arg in args]
        if function == "_?_:_" and len(shapes) == 3:
            return _join(shapes[1], shapes[2]) or _SCALAR_SHAPE
        if function == "dyn" and len(shapes) == 1:
            return shapes[0]
        if function in _READING:
            self.spend(sum(shape.size for shape in shapes) // _READ_DIVISOR)
        if function in _SCALAR:
            return _SCALAR_SHAPE if function != "uuid" else Shape(_WORD + 36)
        if function == "contains" and len(shapes) == 2:
            self.spend(shapes[0].size * shapes[1].size // _SEARCH_DIVISOR + shapes[0].size)
            return _SCALAR_SHAPE
        if function == "matches" and len(shapes) == 2:
            self.spend(shapes[0].size + _PATTERN_FACTOR * shapes[1].size)
            return _SCALAR_SHAPE
        if function == "_+_" and len(shapes) == 2 and shapes[0].scalar and shapes[1].scalar:
            return _SCALAR_SHAPE
        if function in ("string", "bytes") and len(shapes) == 1:
            source = shapes[0]
            return self.built(Shape(_WORD + 32 if source.scalar else source.size + _WORD))
        # `_+_` of strings, bytes or lists builds the sum of its arguments; anything not known to be
        # smaller (no standard function builds more), at most that sum and a little.
        slack = 0 if function == "_+_" else 64
        return self.built(
            Shape(sum(shape.size for shape in shapes) + slack, sum(shape.count for shape in shapes), False,
                  _join_all(shape.item() for shape in shapes if shape.count))
        )

    def _comprehension(self, node: tuple, scope: dict[str, Shape]) -> Shape:
        _, iter_var, range_node, accu_var, init_node, condition, step, result, iter_var2 = node
        iterated = self.shape(range_node, scope)
        initial = self.shape(init_node, scope)
        iterations = min(iterated.count, _ITERATION_BUDGET)
        if iterations == 0:
            return self.shape(result, {**scope, accu_var: initial})
        inner = dict(scope)
        inner[iter_var] = iterated.item()
        if iter_var2:
            inner[iter_var2] = iterated.item()
        # One step from the initial accumulator gives the growth per iteration; every macro's step
        # grows the accumulator by an amount that does not depend on it (checked below).
        probe = _Walk()
        first = probe.shape(step, {**inner, accu_var: initial})
        grow_size = max(first.size - initial.size, 0)
        grow_count = max(first.count - initial.count, 0)
        final = Shape(initial.size + iterations * grow_size, initial.count + iterations * grow_count,
                      initial.scalar and first.scalar,
                      _join_all(shape.item() for shape in (initial, first) if shape.count))
        if not final.scalar and final.size > MAX_VALUE_BYTES:
            raise _too_large(final.size)
        probe.shape(condition, {**inner, accu_var: initial})
        at_last = _Walk()
        last = at_last.shape(step, {**inner, accu_var: final})
        at_last.shape(condition, {**inner, accu_var: final})
        if last.size > final.size + grow_size or last.count > final.count + grow_count:
            raise BoundExceeded(
                "the CEL expression could not be evaluated: a comprehension grows faster than can be bounded",
                "use the standard macros (all, exists, exists_one, map, filter)",
            )
        # A step's work grows linearly with the accumulator (a list step copies it: cel-cpp's map and
        # filter are quadratic), so the iterations' total is at most the mean of the first and the last.
        self.spend(iterations * (probe.work + at_last.work + 1) // 2 + iterations)
        return self.shape(result, {**scope, accu_var: final})


def _collection(parts: list[Shape], count: int) -> Shape:
    return Shape(_WORD + sum(part.size for part in parts), count, False, _join_all(parts))


def _join_all(shapes: Any) -> Shape | None:
    joined: Shape | None = None
    for shape in shapes:
        joined = _join(joined, shape)
    return joined


def check(plan: Plan, variables: dict[str, Any]) -> None:
    """Raise BoundExceeded when evaluating the plan over `variables` could exceed the bounds."""
    if plan.flat:
        return
    try:
        _Walk().shape(plan.tree, {name: DataShape(value) for name, value in variables.items()})
    except RecursionError:
        raise BoundExceeded(
            "the CEL expression could not be evaluated: its variables are nested too deeply to bound it",
            "pass flatter values",
        ) from None


# --- what an expression reads ------------------------------------------------------------------


def read_paths(plan: Plan, variables: frozenset[str]) -> frozenset[tuple[str, ...]] | None:
    """The paths an expression reads: each a variable and the field names selected below it
    (`context.document.amount` is `("context", "document", "amount")`), or None when its reads cannot be
    bounded so (a comprehension, a search, or any other call that makes the expression not flat; an
    identifier that could name a variable by a qualified name).

    Over variables that convert to CEL, the expression's verdict is a function of the values at these
    paths (a path that is not there counts as one value: selecting it is an error wherever it breaks off),
    since a flat expression's bound check does nothing and its evaluation reads nothing else. A value read
    whole (compared as an object, its size taken, `has()` of a field of it) is the path to that value.
    A path that another one extends is left out: the shorter one covers it.
    """
    if not plan.flat:
        return None
    found: set[tuple[str, ...]] = set()
    if not _reads(plan.tree, variables, found):
        return None
    return frozenset(path for path in found
                     if not any(other != path and path[:len(other)] == other for other in found))


def _reads(node: tuple, variables: frozenset[str], found: set[tuple[str, ...]]) -> bool:
    path = _path(node, variables)
    if path is not None:
        found.add(path)
        return True
    kind = node[0]
    if kind == "const":
        return True
    if kind == "ident":
        # A type name such as `int`; a dotted name could be a variable's field the checker resolved.
        return "." not in node[1]
    if kind == "select":
        if node[3]:  # has(x.f): true, false or an error as x is a map with f, one without, or not a map
            operand = _path(node[1], variables)
            if operand is not None:
                found.add(operand)
                return True
        return _reads(node[1], variables, found)
    if kind == "call":
        return all(_reads(arg, variables, found) for arg in node[2])
    if kind == "list":
        return all(_reads(element, variables, found) for element in node[1])
    if kind == "map":
        return all(_reads(key, variables, found) and _reads(value, variables, found) for key, value in node[1])
    return False  # a comprehension


def _path(node: tuple, variables: frozenset[str]) -> tuple[str, ...] | None:
    """The path `node` selects (`v.a.b`, `v["a"].b`), or None when it is not a chain of fields of a variable."""
    kind = node[0]
    if kind == "ident":
        return (node[1],) if node[1] in variables else None
    if kind == "select" and not node[3]:
        operand = _path(node[1], variables)
        return None if operand is None else (*operand, node[2])
    if kind == "call" and node[1] == "_[_]" and len(node[2]) == 2:
        key = node[2][1]
        if key[0] == "const" and not key[2] and isinstance(key[3], str):  # a string constant
            operand = _path(node[2][0], variables)
            return None if operand is None else (*operand, key[3])
    return None
