"""The JSON Schema dialects of model clients (DESIGN 16): what each accepts, the conversions the
adapters make, and the problems (`dialect_problems`) where a schema cannot be converted without
changing what it accepts. Pure functions of a schema, shared by the adapters and the schema warnings.

A conversion may widen what the model may send (dropping a `format` the client does not take, `oneOf`
as `anyOf`): the tool still validates its input and a refusal goes back to the model to correct. It may
not take away an input the tool accepts. Two conversions are taken as keeping it:
- an optional property becomes required and nullable, and the adapter removes the nulls again
  (`restore_optional`) before the arguments reach the tool;
- an object with declared `properties` and no `additionalProperties` gets `additionalProperties: false`:
  it only stops the model inventing undeclared keys. An explicit `additionalProperties` (a map) cannot be
  said in strict mode, and is reported.
"""

from __future__ import annotations

import copy
from typing import Any

OPENAI = "openai"
GEMINI = "gemini"
MCP = "mcp"

# OpenAI strict mode: the formats it takes; others are dropped (widening).
OPENAI_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})
# Keywords strict mode does not take and whose removal only widens the schema.
_DROPPABLE = frozenset({
    "minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties", "default", "examples",
    "$schema", "$id", "$comment", "readOnly", "writeOnly", "deprecated", "contentMediaType",
    "contentEncoding", "title",
})
# Keywords strict mode does not take and that cannot be dropped without changing what is accepted.
_UNSUPPORTED = ("allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                "patternProperties", "unevaluatedProperties", "unevaluatedItems", "prefixItems", "contains",
                "propertyNames", "dependencies", "additionalItems")
# OpenAI's limit on nested objects in a strict schema.
OPENAI_MAX_DEPTH = 10


def _problem(client: str, path: str, message: str) -> dict:
    return {"client": client, "path": path or "/", "message": message}


def _pointer(path: str, *parts: Any) -> str:
    for part in parts:
        path += "/" + str(part).replace("~", "~0").replace("/", "~1")
    return path


# ---------------------------------------------------------------------------------- OpenAI strict mode

def openai_strict(schema: Any) -> tuple[dict | None, list[dict]]:
    """`(the schema in strict mode, [])`, or `(None, problems)` when it cannot be converted."""
    problems: list[dict] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        problems.append(_problem(OPENAI, "", "strict mode needs an object schema at the root"))
        return None, problems
    converted = _strict(schema, "", problems, 1)
    return (None, problems) if problems else (converted, [])


def _strict(node: Any, path: str, problems: list[dict], depth: int) -> Any:
    if not isinstance(node, dict):
        problems.append(_problem(OPENAI, path, "strict mode needs a schema object here, not a boolean schema"))
        return node
    if not node:
        problems.append(_problem(OPENAI, path, "strict mode cannot say 'any value' (an empty schema)"))
        return node
    out: dict = {}
    for key, value in node.items():
        if key in _DROPPABLE:
            continue
        if key in _UNSUPPORTED:
            problems.append(_problem(OPENAI, _pointer(path, key), f"strict mode does not support {key!r}"))
            continue
        if key == "format" and value not in OPENAI_FORMATS:
            continue
        if key == "$ref" and not (isinstance(value, str) and value.startswith("#/")):
            problems.append(_problem(OPENAI, _pointer(path, key), "strict mode supports only local $refs (#/...)"))
            continue
        out[key] = value
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
    for keyword in ("anyOf",):
        if keyword in out:
            out[keyword] = [_strict(s, _pointer(path, keyword, i), problems, depth)
                            for i, s in enumerate(out[keyword])]
    for keyword in ("$defs", "definitions"):
        if isinstance(out.get(keyword), dict):
            out[keyword] = {k: _strict(s, _pointer(path, keyword, k), problems, depth)
                            for k, s in out[keyword].items()}
    types = out.get("type")
    type_set = set(types) if isinstance(types, list) else {types} if types else set()
    if not type_set and not any(k in out for k in ("anyOf", "enum", "const", "$ref")):
        problems.append(_problem(OPENAI, path, "strict mode needs a type here"))
    if "object" in type_set or "properties" in out:
        if depth > OPENAI_MAX_DEPTH:
            problems.append(_problem(OPENAI, path, f"strict mode allows at most {OPENAI_MAX_DEPTH} levels of nested objects"))
        properties = out.get("properties")
        extra = out.get("additionalProperties", None)
        if extra not in (None, False):
            problems.append(_problem(OPENAI, _pointer(path, "additionalProperties"),
                                     "strict mode cannot say an object with keys of its choosing "
                                     "(additionalProperties)"))
        elif not properties:
            problems.append(_problem(OPENAI, path, "strict mode cannot say an object without declared properties"))
        else:
            required = set(node.get("required") or ())
            out["properties"] = {}
            for name, sub in properties.items():
                converted = _strict(sub, _pointer(path, "properties", name), problems, depth + 1)
                out["properties"][name] = converted if name in required else _nullable(converted)
            out["required"] = list(properties)
            out["additionalProperties"] = False
    if "array" in type_set:
        if "items" not in out:
            problems.append(_problem(OPENAI, path, "strict mode needs the items of an array described (items)"))
        else:
            out["items"] = _strict(out["items"], _pointer(path, "items"), problems, depth + 1)
    return out


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
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        ref = schema["$ref"]
        if ref in seen:
            return schema
        target = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return schema
            target = target[part]
        return _resolve(target, root, seen | {ref})
    return schema


# ---------------------------------------------------------------------------------- Gemini

def _gemini(node: Any, path: str, root: Any, refs: tuple[str, ...], problems: list[dict]) -> None:
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref in refs:
            problems.append(_problem(GEMINI, _pointer(path, "$ref"),
                                     "Gemini does not support $ref, and this one is recursive, so it cannot be inlined"))
        else:
            target = _resolve(node, root)
            if target is node:
                problems.append(_problem(GEMINI, _pointer(path, "$ref"), "Gemini does not support $ref, and this one "
                                         "does not resolve in the schema, so it cannot be inlined"))
            else:
                _gemini(target, path, root, refs + (ref,), problems)
    if "const" in node and not isinstance(node["const"], str):
        problems.append(_problem(GEMINI, _pointer(path, "const"),
                                 "Gemini does not support const (only a string const can become an enum)"))
    types = node.get("type")
    if isinstance(types, list) and len([t for t in types if t != "null"]) > 1:
        problems.append(_problem(GEMINI, _pointer(path, "type"),
                                 "Gemini does not support a list of types (only one type, optionally nullable)"))
    # $defs are reached through the $refs that use them.
    for keyword in ("properties", "patternProperties", "dependentSchemas"):
        if isinstance(node.get(keyword), dict):
            for name, sub in node[keyword].items():
                _gemini(sub, _pointer(path, keyword, name), root, refs, problems)
    for keyword in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
        if isinstance(node.get(keyword), dict):
            _gemini(node[keyword], _pointer(path, keyword), root, refs, problems)
    for keyword in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(keyword), list):
            for i, sub in enumerate(node[keyword]):
                _gemini(sub, _pointer(path, keyword, i), root, refs, problems)


# ---------------------------------------------------------------------------------- every client

def dialect_problems(schema: Any) -> list[dict]:
    """`[{client, path, message}]`: where a tool's input schema cannot be converted into a client's
    dialect without changing what it accepts (OpenAI strict mode, Gemini, MCP). `path` is a JSON pointer
    into the schema."""
    problems: list[dict] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        problems.append(_problem(MCP, "", "the input schema's root must be an object (type: object)"))
    problems.extend(openai_strict(copy.deepcopy(schema))[1])
    _gemini(schema, "", schema, (), problems)
    return problems
