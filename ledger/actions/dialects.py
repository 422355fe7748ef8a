"""Schema warnings (DESIGN 16): where a provider adapter cannot put a tool's schema into a model client's
dialect without changing what it accepts. A warning never fails a write: the ledger validates every input
and output against the full schema anyway, so a keyword an adapter drops is still enforced, but the model
is no longer told about it and will make mistakes that cost a round.

Only what no adapter can convert is reported:
- OpenAI strict mode (`strict: true` on a function or a `json_schema` response format). It needs
  `additionalProperties: false` and every property in `required`; an adapter adds the first to an object
  that lists its properties, and turns an optional property into a required union with null (dropping the
  nulls from the answer), so neither is a warning. It cannot close an object that is open on purpose (a
  map, or one without properties), and it must drop the keywords outside strict mode's subset. That subset
  is OpenAI's "Supported schemas" (platform.openai.com/docs/guides/structured-outputs#supported-schemas):
  strings take `pattern` and `format` of date-time, time, date, duration, email, hostname, ipv4, ipv6 and
  uuid; numbers `multipleOf`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`; arrays
  `minItems` and `maxItems`; `anyOf` (not at the root), `enum`, `const`, `$defs` and `$ref`, recursion
  included. The guide lists as unsupported, among others, `patternProperties`, `unevaluatedProperties`,
  `propertyNames`, `minProperties`, `maxProperties`, `minLength`, `maxLength`, `unevaluatedItems`,
  `contains`, `minContains`, `maxContains`, `uniqueItems`, and the composition keywords `allOf`, `oneOf`
  ("'oneOf' is not permitted" is its API's answer), `not`, `if`/`then`/`else`, `dependentRequired` and
  `dependentSchemas`.
- Gemini's function declarations: no `$ref`/`$defs` (an adapter inlines a reference that is not recursive,
  so only a recursive one is reported), no `const`, and no type lists (`["string", "null"]` converts to
  `nullable: true`, so only a list of several non-null types is reported).
- MCP and every other client: the input schema's root is an object, which a write already requires; an
  output schema that is not an object is wrapped by the MCP adapter. Neither can warn.
"""

from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import unquote

OPENAI = "openai"
GEMINI = "gemini"

OPENAI_FORMATS = ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")
OPENAI_UNSUPPORTED = (
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "dependencies",
    "minLength", "maxLength",
    "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems", "prefixItems", "additionalItems",
    "allOf", "oneOf", "not", "if", "then", "else",
)
# Keywords whose value is one subschema, a list of them, or a map of names to them (every dialect the
# ledger accepts: draft 2020-12, 2019-09 and 7).
_ONE = ("additionalProperties", "propertyNames", "contains", "if", "then", "else", "not", "unevaluatedItems",
        "unevaluatedProperties", "additionalItems", "contentSchema", "items")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_DEFINITIONS = ("$defs", "definitions")
# The schemas of a tool block a model is given: the input always; the output of an agent or a model
# tool, which is asked of the model as structured output.
_OUTPUT_KINDS = ("agent", "model")


def dialect_warnings(tool_block: dict | None, kind: str | None = None) -> list[dict]:
    """[{path, client, message}] for the tool block's schemas, paths as in a write's problems
    (`tool.inputSchema.properties.when.format`)."""
    if not isinstance(tool_block, dict):
        return []
    found: list[dict] = []
    schemas = [("tool.inputSchema", tool_block.get("inputSchema"))]
    if kind in _OUTPUT_KINDS:
        schemas.append(("tool.outputSchema", tool_block.get("outputSchema")))
    for prefix, schema in schemas:
        if isinstance(schema, dict):
            found += [{"path": _join(prefix, path), "client": client, "message": message}
                      for path, client, message in schema_warnings(schema)]
    return found


def schema_warnings(schema: dict) -> list[tuple[str, str, str]]:
    """(path inside the schema, client, message) of everything an adapter cannot convert."""
    nodes = list(_walk(schema))
    return [(path, OPENAI, message) for path, message in _openai(schema, nodes)] + \
           [(path, GEMINI, message) for path, message in _gemini(schema, nodes)]


# ---------------------------------------------------------------------------- OpenAI strict mode


def _openai(root: dict, nodes: list[tuple[tuple, str, dict]]) -> Iterator[tuple[str, str]]:
    if "anyOf" in root:
        yield "anyOf", ("OpenAI strict mode takes no anyOf at the root of a schema; make the root one object "
                        "and put the alternatives in a property")
    for _, path, node in nodes:
        for word in OPENAI_UNSUPPORTED:
            if word in node:
                yield _join(path, word), (f"OpenAI strict mode does not support `{word}`; its adapter drops it, "
                                          "so the model is not told this rule (the ledger still enforces it)")
        if isinstance(node.get("items"), list):
            yield _join(path, "items"), ("OpenAI strict mode takes no tuple (a list of `items` schemas); its "
                                         "adapter cannot keep each position's schema")
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt not in OPENAI_FORMATS:
            yield _join(path, "format"), (f"OpenAI strict mode does not support the format {fmt!r} (only "
                                          f"{', '.join(OPENAI_FORMATS)}); its adapter drops it, so the model is "
                                          "not told this rule (the ledger still enforces it)")
        if _is_object(node):
            extra = node.get("additionalProperties")
            if extra is not None and extra is not False:
                yield _join(path, "additionalProperties"), (
                    "OpenAI strict mode needs additionalProperties: false; its adapter must close this object, "
                    "so the model can send no key beyond `properties` (list the keys it may use)")
            elif extra is None and not node.get("properties") and "patternProperties" not in node:
                yield path, ("OpenAI strict mode closes every object, and this one lists no properties: the "
                             "model could only send {} here (list its properties)")


def _is_object(node: dict) -> bool:
    declared = node.get("type")
    return declared == "object" or (isinstance(declared, list) and "object" in declared) or "properties" in node


# ---------------------------------------------------------------------------- Gemini


def _gemini(root: dict, nodes: list[tuple[tuple, str, dict]]) -> Iterator[tuple[str, str]]:
    recursive = _recursive_references(root, nodes)
    for tokens, path, node in nodes:
        if "const" in node:
            yield _join(path, "const"), ("Gemini accepts no `const`; its adapter drops it, so the model is not "
                                         "told this rule (an `enum` of one string says the same to every client)")
        declared = node.get("type")
        if isinstance(declared, list) and len([t for t in declared if t != "null"]) > 1:
            yield _join(path, "type"), ("Gemini accepts no list of types; its adapter cannot say "
                                        f"{' or '.join(map(str, declared))} in one property (give it one type)")
        if tokens in recursive:
            yield _join(path, "$ref"), (f"Gemini accepts no `$ref`, and {node['$ref']!r} is recursive, so its "
                                        "adapter cannot inline it; give the nested levels a schema of their own")
        elif isinstance(node.get("$ref"), str) and _target(node["$ref"]) is None:
            yield _join(path, "$ref"), (f"Gemini accepts no `$ref`, and its adapter inlines only a reference "
                                        f"inside the schema (\"#/...\"), not {node['$ref']!r}")


def _recursive_references(root: dict, nodes: list[tuple[tuple, str, dict]]) -> set[tuple]:
    """The locations of the `$ref`s whose inlining never ends and that the model would see (reachable
    from outside `$defs`): inlining the reference at L copies its target T, and with it every reference
    inside T, so L leads to each reference located under T; a reference on a cycle is recursive."""
    refs = {tokens: _target(node["$ref"]) for tokens, _, node in nodes if isinstance(node.get("$ref"), str)}
    refs = {tokens: target for tokens, target in refs.items() if target is not None}
    leads_to = {loc: [other for other in refs if other[:len(target)] == target] for loc, target in refs.items()}
    live = [loc for loc in refs if not _in_definitions(loc)]
    reached: set[tuple] = set()
    stack = list(live)
    while stack:
        loc = stack.pop()
        if loc not in reached:
            reached.add(loc)
            stack.extend(leads_to[loc])
    return {loc for loc in reached if _on_cycle(loc, leads_to)}


def _in_definitions(tokens: tuple) -> bool:
    """A location under `$defs` or `definitions` as a keyword (not under a property of that name)."""
    skip = False  # the token after a map or list keyword is a name or an index, not a keyword
    for token in tokens:
        if skip:
            skip = False
        elif token in _DEFINITIONS:
            return True
        else:
            skip = token in _MAPS or token in _LISTS
    return False


def _on_cycle(start: tuple, leads_to: dict[tuple, list[tuple]]) -> bool:
    seen: set[tuple] = set()
    stack = list(leads_to[start])
    while stack:
        loc = stack.pop()
        if loc == start:
            return True
        if loc not in seen:
            seen.add(loc)
            stack.extend(leads_to[loc])
    return False


def _target(reference: str) -> tuple | None:
    """The location a reference inside the schema names ("#", "#/$defs/node"), None for any other."""
    if reference == "#":
        return ()
    if not reference.startswith("#/"):
        return None
    return tuple(unquote(token).replace("~1", "/").replace("~0", "~") for token in reference[2:].split("/"))


# ---------------------------------------------------------------------------- walking a schema


def _walk(schema: dict) -> Iterator[tuple[tuple, str, dict]]:
    """(JSON pointer tokens, dotted path, subschema) of the schema and every subschema in it, in document
    order."""
    stack: list[tuple[tuple, str, Any]] = [((), "", schema)]
    while stack:
        tokens, path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield tokens, path, node
        children: list[tuple[tuple, str, Any]] = []
        for word, value in node.items():
            if word in _MAPS and isinstance(value, dict):
                children += [((*tokens, word, name), _join(path, f"{word}.{name}"), child)
                             for name, child in value.items()]
            elif word in _LISTS and isinstance(value, list):
                children += [((*tokens, word, str(i)), f"{_join(path, word)}[{i}]", child)
                             for i, child in enumerate(value)]
            elif word in _ONE and isinstance(value, dict):
                children.append(((*tokens, word), _join(path, word), value))
        stack.extend(reversed(children))


def _join(path: str, word: str) -> str:
    return f"{path}.{word}" if path else word
