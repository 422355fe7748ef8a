"""The JSON Schema dialects of model clients (DESIGN 16): the one place that decides how a tool's schema
is put into a client's dialect. Each converter returns the schema an adapter sends *and* every change it
made that alters what the schema accepts, with its location in the schema as written. The schema
warnings of a write (ledger/actions/dialects.py) are exactly those changes, so the adapters and the
warnings cannot disagree.

Conversions that keep what the schema accepts are made silently:
- OpenAI strict mode: an optional property becomes required and nullable, and the adapter removes the
  nulls again (`restore_optional`) before the arguments reach the tool; an object that lists its
  properties and says nothing of others gets `additionalProperties: false` (it only stops the model
  inventing undeclared keys); annotations (`title`, `default`, `examples`, ...) are dropped.
- Gemini: a `$ref` that is not recursive is inlined, `$defs` go, a string `const` becomes an `enum` of
  one, and a type list of one type and null becomes that type with `nullable: true`.

Every other change is reported. A keyword whose removal only widens the schema (`maxLength`, an
unsupported `format`, `oneOf` sent as `anyOf`) is dropped: the ledger still validates every input and
output against the full schema, but the model is not told the rule. What strict mode cannot say at all
(an open map, `allOf`, a tuple, ...) makes the OpenAI adapter send the whole schema as it is without
strict mode: the model sees every rule but is no longer held to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

OPENAI = "openai"
GEMINI = "gemini"
MCP = "mcp"


@dataclass(frozen=True)
class Change:
    """One way a converter changed what a schema accepts. `at`: the JSON pointer tokens, into the schema
    as written, of the keyword (or the subschema) concerned; () is the root."""

    client: str
    at: tuple[str, ...]
    message: str

    @property
    def pointer(self) -> str:
        return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in self.at)


@dataclass(frozen=True)
class Conversion:
    client: str
    # What the adapter sends.
    schema: Any
    # OpenAI: whether it is sent in strict mode (the model is held to it). Always True for Gemini.
    strict: bool
    # Empty: the schema reaches the client accepting exactly what it accepts as written.
    changes: tuple[Change, ...]


# Keywords that describe and do not constrain: dropping them changes nothing a schema accepts.
ANNOTATIONS = frozenset({
    "title", "default", "examples", "$schema", "$id", "$comment", "$anchor", "readOnly", "writeOnly",
    "deprecated", "contentMediaType", "contentEncoding", "contentSchema",
})

# ---------------------------------------------------------------------------------- OpenAI strict mode
# Its subset is OpenAI's "Supported schemas" (platform.openai.com/docs/guides/structured-outputs#supported-schemas):
# strings take `pattern` and the formats below; numbers `multipleOf`, `minimum`, `maximum`,
# `exclusiveMinimum`, `exclusiveMaximum`; arrays `minItems`, `maxItems`; `anyOf` (not at the root),
# `enum`, `const`, `$defs` and `$ref`, recursion included.

OPENAI_FORMATS = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")
# Outside the subset, and dropping them only widens the schema.
OPENAI_DROPPED = ("minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties")
# Outside the subset, and no conversion keeps what they say: the adapter falls back to non-strict.
OPENAI_UNSUPPORTED = ("allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                      "dependencies", "patternProperties", "unevaluatedProperties", "unevaluatedItems",
                      "prefixItems", "contains", "minContains", "maxContains", "propertyNames", "additionalItems")
# OpenAI's limit on nested objects in a strict schema.
OPENAI_MAX_DEPTH = 10

_DROPPED = "its adapter drops it, so the model is not told this rule (the ledger still enforces it)"
_NOT_STRICT = ("so its adapter sends this schema without strict mode: the model sees it whole but is not "
               "held to it (the ledger still enforces it)")


class _Found:
    def __init__(self) -> None:
        self.unconvertible: list[Change] = []
        self.dropped: list[Change] = []

    def cannot(self, at: tuple[str, ...], reason: str) -> None:
        self.unconvertible.append(Change(OPENAI, at, f"OpenAI strict mode {reason}; {_NOT_STRICT}"))

    def drop(self, at: tuple[str, ...], message: str) -> None:
        self.dropped.append(Change(OPENAI, at, message))


def to_openai(schema: Any) -> Conversion:
    """The schema in OpenAI strict mode with what that drops, or, where strict mode cannot say it, the
    schema as it is (`strict` False) with the reasons."""
    found = _Found()
    if not isinstance(schema, dict) or schema.get("type") != "object":
        found.cannot((), "needs an object schema (type: object) at the root")
    else:
        for word in ("anyOf", "oneOf"):
            if word in schema:
                found.cannot((word,), f"takes no {word} at the root of a schema; make the root one object and "
                                      "put the alternatives in a property")
        converted = _strict(schema, (), found, 1)
    if found.unconvertible:
        return Conversion(OPENAI, schema, False, tuple(found.unconvertible))
    return Conversion(OPENAI, converted, True, tuple(found.dropped))


def _is_local_ref(value: Any) -> bool:
    return isinstance(value, str) and (value == "#" or value.startswith("#/"))


def _strict(node: Any, at: tuple[str, ...], found: _Found, depth: int) -> Any:
    if not isinstance(node, dict):
        found.cannot(at, "needs a schema object here, not a boolean schema")
        return node
    if not node:
        found.cannot(at, "cannot say 'any value' (an empty schema) here; give it a type")
        return node
    blocked = len(found.unconvertible)
    out: dict = {}
    for key, value in node.items():
        if key in ANNOTATIONS:
            continue
        if key in OPENAI_DROPPED:
            found.drop(at + (key,), f"OpenAI strict mode does not support `{key}`; {_DROPPED}")
            continue
        if key in OPENAI_UNSUPPORTED:
            found.cannot(at + (key,), f"does not support `{key}`")
            continue
        if key == "format" and value not in OPENAI_FORMATS:
            found.drop(at + (key,), f"OpenAI strict mode does not support the format {value!r} (only "
                                    f"{', '.join(OPENAI_FORMATS)}); {_DROPPED}")
            continue
        if key == "$ref" and not _is_local_ref(value):
            found.cannot(at + (key,), f"supports only $refs inside the schema (\"#/...\"), not {value!r}")
            continue
        if key == "items" and isinstance(value, list):
            found.cannot(at + (key,), "takes no tuple (a list of `items` schemas)")
            continue
        if key == "oneOf":
            found.drop(at + (key,), "OpenAI strict mode does not support `oneOf`; its adapter sends it as `anyOf`, "
                                    "so the model is not told that exactly one alternative must match (the ledger "
                                    "still enforces it)")
        out[key] = value
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
        alternatives_at = at + ("oneOf",)
    else:
        alternatives_at = at + ("anyOf",)
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_strict(s, alternatives_at + (str(i),), found, depth) for i, s in enumerate(out["anyOf"])]
    for keyword in ("$defs", "definitions"):
        if isinstance(out.get(keyword), dict):
            out[keyword] = {k: _strict(s, at + (keyword, k), found, depth) for k, s in out[keyword].items()}
    types = out.get("type")
    type_set = set(types) if isinstance(types, list) else {types} if types else set()
    if not type_set and not any(k in out for k in ("anyOf", "enum", "const", "$ref")) \
            and len(found.unconvertible) == blocked:
        found.cannot(at, "needs a type here")
    if "object" in type_set or "properties" in out:
        _strict_object(node, out, at, found, depth)
    if "array" in type_set:
        if "items" not in out:
            if "items" not in node:  # a tuple was reported above
                found.cannot(at, "needs the items of an array described (items)")
        else:
            out["items"] = _strict(out["items"], at + ("items",), found, depth + 1)
    return out


def _strict_object(node: dict, out: dict, at: tuple[str, ...], found: _Found, depth: int) -> None:
    if depth > OPENAI_MAX_DEPTH:
        found.cannot(at, f"allows at most {OPENAI_MAX_DEPTH} levels of nested objects")
    properties = out.get("properties")
    extra = out.get("additionalProperties", None)
    if extra is not None and extra is not False:
        found.cannot(at + ("additionalProperties",), "cannot say an object with keys of its choosing "
                                                     "(additionalProperties); list the keys it may use")
        return
    if not properties:
        if extra is False:  # an object that can only be {}: closed already, nothing to convert
            out.update(properties={}, required=[], additionalProperties=False)
        elif "patternProperties" not in node:  # reported as unsupported above
            found.cannot(at, "closes every object, and this one lists no properties (list its properties)")
        return
    if not isinstance(properties, dict):
        return
    required = set(node.get("required") or ())
    out["properties"] = {}
    for name, sub in properties.items():
        converted = _strict(sub, at + ("properties", name), found, depth + 1)
        out["properties"][name] = converted if name in required else _nullable(converted)
    out["required"] = list(properties)
    out["additionalProperties"] = False


def _accepts_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return schema is True
    types = schema.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return "enum" not in schema or None in schema["enum"]
    return any(_accepts_null(s) for s in schema.get("anyOf", ()))


def _nullable(schema: Any) -> Any:
    if not isinstance(schema, dict) or _accepts_null(schema):
        return schema
    types = schema.get("type")
    if types is not None and "$ref" not in schema and "anyOf" not in schema:
        out = dict(schema)
        out["type"] = (list(types) if isinstance(types, list) else [types]) + ["null"]
        if "enum" in out:
            out["enum"] = list(out["enum"]) + [None]
        if "const" in out:
            return {"anyOf": [schema, {"type": "null"}]}
        return out
    return {"anyOf": [schema, {"type": "null"}]}


def restore_optional(value: Any, schema: Any, root: Any = None) -> Any:
    """The model's arguments as the tool's schema says them: a null that strict mode made the model send
    for an optional property (one that does not itself accept null) is removed again."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        required = set(schema.get("required") or ())
        out = {}
        for key, item in value.items():
            sub = schema["properties"].get(key)
            if item is None and key not in required and sub is not None and not _accepts_null(_resolve(sub, root)):
                continue
            out[key] = restore_optional(item, sub, root) if sub is not None else item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [restore_optional(item, schema["items"], root) for item in value]
    return value


def _resolve(schema: Any, root: Any, seen: frozenset = frozenset()) -> Any:
    if isinstance(schema, dict) and _is_local_ref(schema.get("$ref")):
        ref = schema["$ref"]
        if ref in seen:
            return schema
        target = _lookup(root, _target(ref))
        if target is _MISSING:
            return schema
        return _resolve(target, root, seen | {ref})
    return schema


_MISSING = object()


def _target(reference: str) -> tuple[str, ...] | None:
    """The location a reference inside the schema names ("#", "#/$defs/node"), None for any other."""
    if reference == "#":
        return ()
    if not isinstance(reference, str) or not reference.startswith("#/"):
        return None
    return tuple(unquote(token).replace("~1", "/").replace("~0", "~") for token in reference[2:].split("/"))


def _lookup(root: Any, at: tuple[str, ...] | None) -> Any:
    if at is None:
        return _MISSING
    node = root
    for token in at:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _MISSING
    return node


# ---------------------------------------------------------------------------------- Gemini
# Function declarations and response schemas: no `$ref`/`$defs`, no `const`, no type lists (DESIGN 16).

# Keywords whose value is one subschema, a list of them, or a map of names to them.
_ONE = ("additionalProperties", "propertyNames", "contains", "if", "then", "else", "not", "unevaluatedItems",
        "unevaluatedProperties", "additionalItems", "items")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAPS = ("properties", "patternProperties", "dependentSchemas")
_DEFINITIONS = ("$defs", "definitions")


def to_gemini(schema: Any) -> Conversion:
    """The schema with every `$ref` that can be inlined inlined, and the changes Gemini's dialect forces."""
    changes: dict[tuple[tuple[str, ...], str], Change] = {}
    converted = _gemini(schema, (), schema, frozenset({()}), changes)
    return Conversion(GEMINI, converted, True, tuple(changes.values()))


def _gemini_change(changes: dict, at: tuple[str, ...], message: str) -> None:
    # A definition inlined at several places is one change, where it is written.
    changes.setdefault((at, message), Change(GEMINI, at, message))


def _gemini(node: Any, at: tuple[str, ...], root: Any, open_: frozenset, changes: dict) -> Any:
    """`node` (at `at` in the schema as written) converted; `open_`: the locations being converted now,
    around this one, through references included (a reference to one of them never ends)."""
    if not isinstance(node, dict):
        return node
    out: dict = {}
    ref = node.get("$ref")
    if isinstance(ref, str):
        target_at = _target(ref)
        target = _lookup(root, target_at)
        if target is _MISSING:
            _gemini_change(changes, at + ("$ref",), f"Gemini accepts no `$ref`, and its adapter inlines only a "
                                                    f"reference inside the schema (\"#/...\"), not {ref!r}")
        elif target_at in open_:
            _gemini_change(changes, at + ("$ref",), f"Gemini accepts no `$ref`, and {ref!r} is recursive, so its "
                                                    "adapter cannot inline it; give the nested levels a schema "
                                                    "of their own")
            if isinstance(target, dict) and isinstance(target.get("type"), str):
                out["type"] = target["type"]  # the nested level is any value of that type
        else:
            inlined = _gemini(target, target_at, root, open_ | {target_at}, changes)
            if isinstance(inlined, dict):
                out.update(inlined)
    for key, value in node.items():
        if key == "$ref" or key in _DEFINITIONS:
            continue
        child_at = at + (key,)
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: _gemini(sub, child_at + (name,), root, open_ | {child_at + (name,)}, changes)
                        for name, sub in value.items()}
        elif key in _LISTS and isinstance(value, list):
            out[key] = [_gemini(sub, child_at + (str(i),), root, open_ | {child_at + (str(i),)}, changes)
                        for i, sub in enumerate(value)]
        elif key in _ONE and isinstance(value, dict):
            out[key] = _gemini(value, child_at, root, open_ | {child_at}, changes)
        else:
            out[key] = value
    if "const" in out:
        const = out.pop("const")
        if isinstance(const, str):
            out["enum"] = [const]
            out.setdefault("type", "string")
        else:
            _gemini_change(changes, at + ("const",), "Gemini accepts no `const`; its adapter drops it, so the model "
                                                     "is not told this rule (an `enum` of one string says the same "
                                                     "to every client)")
    types = out.get("type")
    if isinstance(types, list):
        others = [t for t in types if t != "null"]
        if len(others) == 1:
            out["type"] = others[0]
            if "null" in types:
                out["nullable"] = True
        elif len(others) > 1:
            del out["type"]
            _gemini_change(changes, at + ("type",), "Gemini accepts no list of types; its adapter cannot say "
                                                    f"{' or '.join(map(str, types))} in one property (give it "
                                                    "one type)")
    return out


# ---------------------------------------------------------------------------------- every client

CONVERTERS = {OPENAI: to_openai, GEMINI: to_gemini}


def dialect_changes(schema: Any) -> list[Change]:
    """Every client's changes to `schema` (a tool's input or a structured output), client by client."""
    return [change for convert in CONVERTERS.values() for change in convert(schema).changes]


def dialect_problems(schema: Any) -> list[dict]:
    """`[{client, path, message}]` for a tool's *input* schema, `path` a JSON pointer ("/" for the root):
    every client's changes, and MCP's rule that the input schema's root is an object."""
    problems: list[dict] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        problems.append({"client": MCP, "path": "/", "message": "the input schema's root must be an object (type: object)"})
    problems += [{"client": c.client, "path": c.pointer or "/", "message": c.message} for c in dialect_changes(schema)]
    return problems
