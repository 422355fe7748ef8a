"""Validation of an action definition when it is written: every problem, each with its path.

`validate_definition` returns the normalized definition (what a version stores, and what a no-op
update is compared with) or raises `ActionDefinitionInvalid` listing every problem at once.
"""

from __future__ import annotations

import keyword
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import LedgerError
from ..policy.cel import CelError, compile_expression_check
from ..policy.statements import parse_policies
from .model_config import check_model_tool_config
from .natives import AGENT_NATIVES, NATIVE_KINDS, NATIVE_TOOLS, RESERVED_NAMES, SERVER_NATIVES
from .agent_config import check_agent_config
from .schemas import schema_problems

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_SOURCE_BYTES = 64 * 1024
MAX_RESPONSE_TIMEOUT_MS = 300_000
DEFAULT_RESPONSE_TIMEOUT_MS = 30_000
MAX_ATTEMPTS_LIMIT = 100
KINDS_WITH_TOOL_BLOCK = {"tool", "agent", "model"} | set(NATIVE_KINDS)
# A tool block is required: a tool has nothing else to be called by; a model tool is its schemas.
KINDS_NEEDING_TOOL_BLOCK = {"tool": "a tool action needs a tool block (name, description, inputSchema)",
                            "model": "a model action needs a tool block (name, description, inputSchema, "
                                     "outputSchema): the model is asked for an answer of the outputSchema's shape"}
KINDS_WITH_TOOLS = {"tool", "agent"}
# What a `confirm` reference may point to (DESIGN 14).
CONFIRMABLE_KINDS = {"tool", "agent", "model"}
SUPPORTED_KINDS = ("tool", "graphql", "cel", "agent", "model")
KINDS_WITH_SESSIONS = {"tool", "agent"}
OFFLOAD_MODES = ("AUTO", "NEVER")
AGENT_LISTABLE_NATIVES = frozenset(NATIVE_KINDS)
DEFAULT_EXECUTION = {"maxAttempts": 3, "backoffSeconds": 1.0}


class DefinitionInvalid(LedgerError):
    """A definition written with problems: one error listing every problem and its path."""

    what = "definition"

    def __init__(self, problems: list[dict]) -> None:
        count = len(problems)
        summary = "; ".join(f"{p['path']}: {p['message']}" for p in problems[:5])
        more = f" (and {count - 5} more)" if count > 5 else ""
        super().__init__(
            f"the {self.what} has {count} problem{'s' if count != 1 else ''}: {summary}{more}",
            hint="fix every problem listed in extensions.problems, then write the definition again",
            extensions={"problems": problems},
        )


class ActionDefinitionInvalid(DefinitionInvalid):
    code = "action_definition_invalid"
    what = "action definition"


@dataclass
class Problems:
    items: list[dict] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.items.append({"path": path, "message": message})

    def __bool__(self) -> bool:
        return bool(self.items)


@dataclass(frozen=True)
class ReferenceTarget:
    """What validation needs to know about a referenced action at one version."""

    action_id: uuid.UUID
    name: str
    status: str
    pending: str | None
    version: int | None  # the version the reference resolves to now (pinned or latest)
    definition: dict | None  # that version's normalized definition, None when the version does not exist
    enabled: bool


# Looks up a referenced action by registry name and optional pinned version.
ReferenceLookup = Callable[[str, "int | None"], "ReferenceTarget | None"]
# Follows a reference to the references of the version it resolves to (for cycle detection).
ReferenceWalker = Callable[[uuid.UUID, "int | None"], "list[dict]"]
# Compiles a Starlark program; returns [{line, column, message}].
Compiler = Callable[[str, tuple], "list[dict]"]
# Static analysis of a program's graphql() documents and tools.<name> uses.
Analyzer = Callable[[str, set], "list[Any]"]


def validate_definition(
    action_id: uuid.UUID,
    doc: dict,
    *,
    lookup: ReferenceLookup,
    walk: ReferenceWalker,
    compile_program: Compiler,
    analyze_program: Analyzer | None,
    current_name: str | None = None,
) -> dict:
    """`current_name`: the name the action has now (an update), which it may keep even when it has
    since become a reserved native name (DESIGN 11: such an action keeps working)."""
    problems = Problems()
    name = doc.get("name")
    kind = doc.get("kind")
    check_name(name, problems, keeps=current_name)
    if kind not in SUPPORTED_KINDS:
        problems.add("kind", f"unknown kind {kind!r}; use one of {', '.join(SUPPORTED_KINDS)}")
    description = doc.get("description")
    if description is not None and not isinstance(description, str):
        problems.add("description", "must be a string")

    tool = _check_tool_block(kind, doc.get("tool"), problems)
    config = _check_config(kind, doc.get("config"), problems)
    statements, policy_problems = parse_policies(doc.get("policies") or [], "policies")
    for p in policy_problems:
        problems.add(p["path"], p["message"])
    execution = _check_execution(doc.get("execution"), problems)
    enabled = doc.get("enabled")
    enabled = True if enabled is None else bool(enabled)

    references = doc.get("tools") or []
    if references and kind not in KINDS_WITH_TOOLS:
        problems.add("tools", f"a {kind} action cannot reference tools; only tool and agent actions can")
        references = []
    # An agent may call graphql and cel only when it lists them (DESIGN 13); a program calls them as
    # graphql() and cel() without a reference.
    normalized_refs, tool_names = check_references(references, lookup, problems, origin=action_id, walk=walk,
                                                   listable_natives=AGENT_LISTABLE_NATIVES if kind == "agent"
                                                   else frozenset(),
                                                   confirm_allowed=kind == "agent")

    if kind == "tool" and config is not None and not any(p["path"].startswith("config") for p in problems.items):
        source = config["src"]
        for p in compile_program(source, tuple(sorted(tool_names))):
            problems.add("config.src", f"line {p['line']}, column {p['column']}: {p['message']}")
        if analyze_program is not None and not any(p["path"] == "config.src" for p in problems.items):
            for p in analyze_program(source, set(tool_names)):
                problems.add("config.src", f"line {p.line}, column {p.column}: {p.message}")

    if problems:
        raise ActionDefinitionInvalid(problems.items)
    return {
        "name": name,
        "description": description,
        "kind": kind,
        "config": config,
        "tool": tool,
        "policies": [s.to_json() for s in statements],
        "tools": normalized_refs,
        "execution": execution,
        "enabled": enabled,
    }


def check_name(name: Any, problems: Problems, *, keeps: str | None = None) -> None:
    """The registry name rule, shared by actions and MCP servers (`keeps`: a name already held)."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        problems.add("name", f"{name!r} is not a valid name: use 1 to 64 lower-case letters, digits and "
                             "underscores, starting with a letter (e.g. `settle_invoice`)")
    elif name in RESERVED_NAMES and name != keeps:
        problems.add("name", f"{name!r} is reserved for the native {name} tool; choose another name")


def _check_tool_block(kind: Any, block: Any, problems: Problems) -> dict | None:
    if block is None:
        if kind in KINDS_NEEDING_TOOL_BLOCK:
            problems.add("tool", KINDS_NEEDING_TOOL_BLOCK[kind])
        if kind in NATIVE_KINDS:
            spec = NATIVE_TOOLS[kind]
            return {"name": kind, "description": spec["description"], "inputSchema": spec["inputSchema"],
                    "outputSchema": spec["outputSchema"], "output": {"offload": "AUTO"}, "responseTimeout": None,
                    "session": False}
        return None
    if kind not in KINDS_WITH_TOOL_BLOCK:
        problems.add("tool", f"a {kind} action takes no tool block")
        return None
    name = block.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        problems.add("tool.name", f"{name!r} is not a valid tool name: lower-case letters, digits and underscores, "
                                  "starting with a letter, at most 64")
    if not isinstance(block.get("description"), str) or not block["description"].strip():
        problems.add("tool.description", "describe what the tool does: callers and agents read it")
    if kind in NATIVE_KINDS:
        # A native-kind action takes the native tool's schemas; its own block only names and describes it.
        input_schema = NATIVE_TOOLS[kind]["inputSchema"]
        output_schema = NATIVE_TOOLS[kind]["outputSchema"]
    else:
        input_schema = block.get("inputSchema")
        output_schema = block.get("outputSchema")
        _check_input_schema(input_schema, problems)
        if output_schema is None and kind == "model":
            problems.add("tool.outputSchema", "a model action needs an outputSchema: the shape of the answer the "
                                              "model is asked for, and held to")
        elif output_schema is not None:
            _add_schema_problems("tool.outputSchema", schema_problems(output_schema), problems)
    output = block.get("output") or {}
    offload = output.get("offload") if isinstance(output, dict) else None
    offload = "AUTO" if offload is None else offload
    if offload not in OFFLOAD_MODES:
        problems.add("tool.output.offload", f"{offload!r} is not an offload mode; use AUTO or NEVER")
    timeout = block.get("responseTimeout")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)
                                or not 1 <= timeout <= MAX_RESPONSE_TIMEOUT_MS):
        problems.add("tool.responseTimeout", f"must be 1 to {MAX_RESPONSE_TIMEOUT_MS} milliseconds (300 s)")
    session = bool(block.get("session"))
    if session and kind not in KINDS_WITH_SESSIONS:
        problems.add("tool.session", "only a tool or an agent action can have sessions")
    return {
        "name": name, "description": block.get("description"), "inputSchema": input_schema,
        "outputSchema": output_schema, "output": {"offload": offload}, "responseTimeout": timeout,
        "session": session,
    }


def _add_schema_problems(path: str, found: list[tuple[str, str]], problems: Problems) -> None:
    for where, message in found:
        problems.add(f"{path}.{where}" if where else path, f"not a valid JSON Schema: {message}")


def _check_input_schema(schema: Any, problems: Problems) -> None:
    path = "tool.inputSchema"
    found = schema_problems(schema)
    _add_schema_problems(path, found, problems)
    if found:
        return
    if not isinstance(schema, dict) or schema.get("type") != "object":
        problems.add(path, 'the input schema\'s root must be an object schema ({"type": "object", ...}): '
                           "a tool's input is passed as keyword-like named fields")
        return
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        return
    for prop in properties:
        if not prop.isidentifier():
            problems.add(f"{path}.properties.{prop}",
                         f"{prop!r} is not an identifier: top-level input names are letters, digits and "
                         "underscores, not starting with a digit")
        elif keyword.iskeyword(prop):
            problems.add(f"{path}.properties.{prop}",
                         f"{prop!r} is a Python keyword and cannot be a top-level input name; rename it "
                         f"(e.g. `{prop}_`); nested property names are free")


def _check_config(kind: Any, config: Any, problems: Problems) -> dict | None:
    if kind == "tool":
        if not isinstance(config, dict):
            problems.add("config", 'a tool action needs config {runtime: "starlark", src: "..."}')
            return None
        extra = sorted(set(config) - {"runtime", "src"})
        if extra:
            problems.add("config", f"unknown config field(s) {', '.join(extra)}; a tool's config is exactly "
                                   "{runtime, src}")
        if config.get("runtime") != "starlark":
            problems.add("config.runtime", f"{config.get('runtime')!r} is not a runtime; use \"starlark\"")
        src = config.get("src")
        if not isinstance(src, str) or not src.strip():
            problems.add("config.src", "the program source is missing: it defines `def run(event): ...`")
        elif len(src.encode()) > MAX_SOURCE_BYTES:
            problems.add("config.src", f"the program is {len(src.encode())} bytes; the limit is 64 KiB")
        elif "\x00" in src:
            # It may compile (in a comment or a string), but PostgreSQL cannot store it.
            before = src[:src.index("\x00")]
            line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
            problems.add("config.src", f"line {line}, column {column}: a NUL character (\\u0000) cannot be stored;"
                         " write it as an escape (\"\\x00\") in a string, or remove it")
        if any(p["path"].startswith("config") for p in problems.items):
            return None
        return {"runtime": "starlark", "src": src}
    if kind == "agent":
        return check_agent_config(config, problems.add)
    if kind == "model":
        return check_model_tool_config(config, problems.add)
    if kind in NATIVE_KINDS:
        if config is None:
            return {"version": 1}
        if config != {"version": 1}:
            problems.add("config", f'a {kind} action\'s config is {{"version": 1}} (or omitted)')
            return None
        return {"version": 1}
    return config


def _check_execution(settings: Any, problems: Problems) -> dict:
    merged = dict(DEFAULT_EXECUTION)
    if settings is None:
        return merged
    attempts = settings.get("maxAttempts")
    if attempts is not None:
        if not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
            problems.add("execution.maxAttempts", f"must be 1 to {MAX_ATTEMPTS_LIMIT}")
        else:
            merged["maxAttempts"] = attempts
    backoff = settings.get("backoffSeconds")
    if backoff is not None:
        if not isinstance(backoff, (int, float)) or backoff != backoff or not 0 <= backoff <= 300:
            problems.add("execution.backoffSeconds", "must be 0 to 300 seconds")
        else:
            merged["backoffSeconds"] = float(backoff)
    return merged


def check_references(references: Any, lookup: ReferenceLookup, problems: Problems, *,
                     origin: uuid.UUID | None = None, walk: ReferenceWalker | None = None,
                     listable_natives: frozenset[str] = frozenset(),
                     confirm_allowed: bool = False) -> tuple[list[dict], list[str]]:
    """An action's or an MCP server's `tools`: the stored references and the tool names they give.

    `origin` and `walk` find references that lead back to the action being written (a server is no
    tool, so nothing leads back to it). `listable_natives` are the natives the writer may list (an MCP
    server's); an action lists none, it calls graphql() and cel() in its program. `confirm_allowed`: the
    writer is an MCP server or an agent, whose calls a person may be asked to confirm (DESIGN 14).
    """
    normalized: list[dict] = []
    tool_names: dict[str, int] = {}
    seen_actions: dict[uuid.UUID, int] = {}
    if not isinstance(references, list):
        problems.add("tools", "tools is a list of references {name, version, input, confirm}")
        return normalized, []
    for index, ref in enumerate(references):
        path = f"tools[{index}]"
        if not isinstance(ref, dict):
            problems.add(path, "a reference is an object {name, version, input, confirm}")
            continue
        name = ref.get("name")
        version = ref.get("version")
        if name in RESERVED_NAMES and name not in listable_natives:
            problems.add(f"{path}.name", _native_refused(name))
            continue
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            problems.add(f"{path}.version", "a version is a positive integer (omit it to follow the latest)")
            continue
        confirm = ref.get("confirm")
        if confirm is not None and not isinstance(confirm, bool):
            problems.add(f"{path}.confirm", "confirm is true or false")
            continue
        target = _native_target(name, version) if name in listable_natives else lookup(name, version)
        if target is None:
            problems.add(f"{path}.name", f"no action named {name!r} in this tenant; create it first (it may "
                                         "be written earlier in the same request)")
            continue
        if target.action_id in seen_actions:
            problems.add(path, f"{name!r} is already referenced by tools[{seen_actions[target.action_id]}]; "
                               "reference each action once")
            continue
        seen_actions[target.action_id] = index
        if target.status == "DELETED" or target.pending == "DELETE":
            problems.add(f"{path}.name", f"{name!r} is deleted")
            continue
        if target.status == "DISABLED" or target.pending == "DISABLE":
            problems.add(f"{path}.name", f"{name!r} is disabled; enable it or remove the reference")
            continue
        if target.definition is None:
            problems.add(f"{path}.version", f"{name!r} has no version {version}")
            continue
        if not target.enabled:
            problems.add(f"{path}.version", f"{name!r} version {target.version} is written disabled and cannot "
                                            "be called; pin an enabled version")
            continue
        block = target.definition.get("tool")
        if not block:
            problems.add(f"{path}.name", f"{name!r} is a {target.definition.get('kind')} action without a tool "
                                         "block; it cannot be called as a tool")
            continue
        if confirm:
            problem = _confirm_problem(name, target, block, confirm_allowed)
            if problem:
                problems.add(f"{path}.confirm", problem)
                continue
        tool_name = block["name"]
        if tool_name in tool_names:
            problems.add(path, f"two references give the tool name {tool_name!r} (tools[{tool_names[tool_name]}] "
                               f"and tools[{index}]); each tool name must be unique among the references")
            continue
        if origin is not None and walk is not None and (
                target.action_id == origin or _leads_back(origin, target.action_id, version, walk)):
            problems.add(path, f"referencing {name!r} makes a cycle: it leads back to this action")
            continue
        fixed = ref.get("input")
        if fixed is not None and not isinstance(fixed, dict):
            problems.add(f"{path}.input", "fixed input is an object of field values")
            continue
        for key, value in (fixed or {}).items():
            if isinstance(value, dict) and set(value) == {"$cel"}:
                try:
                    compile_expression_check(value["$cel"], ("session", "event"))
                except CelError as exc:
                    problems.add(f"{path}.input.{key}", exc.message)
        tool_names[tool_name] = index
        normalized.append({"name": name, "actionId": str(target.action_id), "actionVersion": version,
                           "input": ref.get("input"), "confirm": bool(confirm)})
    return normalized, list(tool_names)


def _confirm_problem(name: str, target: "ReferenceTarget", block: dict, confirm_allowed: bool) -> str | None:
    """Why `confirm: true` cannot be on this reference (DESIGN 14), or None."""
    if not confirm_allowed:
        return ("confirm asks a person to confirm a model's call: only an agent's or an MCP server's tools take "
                "it; remove it here")
    kind = target.definition.get("kind")
    if name in NATIVE_TOOLS or kind not in CONFIRMABLE_KINDS:
        return f"confirm applies to a tool, an agent or a model tool; {name!r} is {kind!r}"
    if block.get("session"):
        return (f"{name!r} keeps sessions, and a confirmed call runs as a start, which a session tool cannot; "
                "reference a version without sessions, or remove confirm")
    return None


def _native_refused(name: str) -> str:
    if name in SERVER_NATIVES:
        return (f"{name!r} acts for an MCP server's caller: only an MCP server can list it (createMcpServer); "
                "remove it from this action's tools")
    if name == "read_result":
        return ("'read_result' is given to every agent that has a tool with output.offload AUTO; remove the "
                "reference")
    if name in AGENT_NATIVES:
        return f"{name!r} is an agent turn's own record of a model request; remove the reference"
    return f"{name!r} is native: call `{name}()` in the program instead of referencing it"


def _native_target(name: str, version: int | None) -> ReferenceTarget:
    spec = NATIVE_TOOLS[name]
    definition = None
    if version in (None, 1):
        definition = {"kind": name, "tool": {"name": name}}
    return ReferenceTarget(action_id=spec["id"], name=name, status="ACTIVE", pending=None, version=1,
                           definition=definition, enabled=True)


def _leads_back(origin: uuid.UUID, start: uuid.UUID, version: int | None, walk: ReferenceWalker) -> bool:
    seen: set[tuple[uuid.UUID, int | None]] = set()
    stack = [(start, version)]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for ref in walk(*current):
            target = uuid.UUID(str(ref["actionId"]))
            if target == origin:
                return True
            stack.append((target, ref.get("actionVersion")))
    return False
