"""`ledger publish PATH...`: tool definitions from TOML files, created or updated and published in one request.

A definition is one `<name>.toml` file: the `ActionInput` of the GraphQL API with the same field names,
plus the action's `id` and `src`, the path of its Starlark program relative to the file:

    id = "5e1d6a3c-..."              # the action id (a UUID you choose once)
    name = "transfer"
    description = "Moves money between two accounts"
    kind = "tool"
    src = "transfer.star"            # becomes config = {runtime = "starlark", src = <the file's text>}

    [tool]                           # the tool block: name, description, inputSchema, outputSchema,
    name = "transfer"                #   output.offload, responseTimeout (ms), session
    description = "..."
    [tool.inputSchema]
    type = "object"
    ...
    [[policies]]                     # effect, actions, resources, assertion
    [[tools]]                        # references: name, version, input
    [execution]                      # maxAttempts, backoffSeconds

An MCP server definition (DESIGN 12) is a file with `kind = "mcp_server"`: the `McpServerInput` of the
GraphQL API plus the server's `id`:

    id = "7a4c...-..."               # the server id (a UUID you choose once)
    kind = "mcp_server"
    name = "assistant"               # served at /mcp/assistant
    description = "..."
    instructions = "..."             # what the model reads when it connects (\"\"\" for several lines)
    enabled = true
    [[tools]]                        # references, in the order listed: name, version, input, confirm
    name = "transfer"
    [[tools]]
    name = "get_account_activity"
    [tools.input]                    # fixed input: the model neither sees nor sets these properties
    limit = 20
    [[policies]]                     # the server's layer of the chain: effect, actions, resources, assertion

The steps: load the files, order them so that referenced tools come first and MCP servers after every
tool, read the current state (one query), then send ONE mutation that creates each missing action or
updates it (an update equal to the latest version writes nothing) and publishes it unless it is ACTIVE,
then creates or updates each server (an update equal to the server's record writes nothing either). The
server runs the fields in document order in one transaction: all of it happens, or none of it.
"""

from __future__ import annotations

import os
import re
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol

from .errors import LedgerRequestError


class Querying(Protocol):
    """What publishing needs of a client: `ledger.client.LedgerClient` is one."""

    def query(self, document: str, variables: dict | None = None, **options: Any) -> dict: ...

    def response(self, document: str, variables: dict | None = None, **options: Any) -> dict: ...

SERVER_KIND = "mcp_server"
TOP_KEYS = {"id", "name", "description", "kind", "src", "config", "tool", "policies", "tools", "execution",
            "enabled"}
SERVER_KEYS = {"id", "kind", "name", "description", "instructions", "tools", "policies", "enabled"}
TABLE_KEYS = {
    "tool": {"name", "description", "inputSchema", "outputSchema", "output", "responseTimeout", "session"},
    "execution": {"maxAttempts", "backoffSeconds"},
}
LIST_KEYS = {
    "policies": {"effect", "actions", "resources", "assertion"},
    "tools": {"name", "version", "input", "confirm"},
}


class DefinitionError(Exception):
    """Definition files that cannot be read or ordered (nothing was sent); one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class Definition:
    file: Path            # the .toml file, as the user named it
    source: Path | None   # the .star file
    action_id: str        # the action's id, or the MCP server's
    name: str
    input: dict           # the ActionInput (or McpServerInput) sent to the server
    references: list[str]  # names of the referenced actions
    server: bool = False  # an MCP server definition (kind = "mcp_server")


@dataclass(frozen=True)
class Located:
    """One problem, where it is: a file, and a path in it (TOML) or a line and column (Starlark)."""

    file: str | None
    message: str
    key: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.file is None:
            return self.message
        if self.line is not None:
            return f"{self.file}:{self.line}:{self.column}: {self.message}"
        if self.key:
            return f"{self.file}: {self.key}: {self.message}"
        return f"{self.file}: {self.message}"


class PublishRejected(LedgerRequestError):
    """The server rejected the request; nothing was written. `located` maps each problem to its file."""

    def __init__(self, error: LedgerRequestError, located: list[Located], unchecked: list[str]) -> None:
        super().__init__(error.message, code=error.code, hint=error.hint, problems=error.problems,
                         retryable=error.retryable, path=error.path, errors=error.errors, status=error.status,
                         extensions=error.extensions)
        self.located = located
        # Files whose fields did not run: the server stops at the first failing field.
        self.unchecked = unchecked


@dataclass
class Change:
    name: str
    action_id: str
    file: str
    before: int | None     # the latest version before, None when the action was created
    version: int           # the latest version after
    published: bool        # this request published it
    status: str
    pending: str | None = None

    @property
    def created(self) -> bool:
        return self.before is None

    @property
    def new_version(self) -> bool:
        return self.before is None or self.version != self.before

    def describe(self) -> str:
        if self.before is None:
            text = f"created v{self.version}"
        elif self.version != self.before:
            text = f"v{self.before} -> v{self.version}"
        else:
            text = f"unchanged (v{self.version})"
        if self.published:
            text += ", published"
        elif self.status != "ACTIVE":
            text += f", {self.status.lower()}"
        if self.pending:
            text += f", pending {self.pending.lower()}"
        return f"{self.name}: {text}"


@dataclass
class ServerChange:
    """What publishing did to one MCP server."""

    name: str
    server_id: str
    file: str
    path: str              # where it is served: /mcp/<name>
    created: bool
    changed: bool          # created, or its record differed from the definition
    enabled: bool

    def describe(self) -> str:
        text = "created" if self.created else "updated" if self.changed else "unchanged"
        state = "" if self.enabled else ", disabled"
        return f"MCP server {self.name}: {text} ({self.path}{state})"


@dataclass(frozen=True)
class SchemaWarning:
    """A schema warning (DESIGN 16) of a written action, back in its file: the write succeeded."""

    file: str
    path: str
    client: str
    message: str

    def __str__(self) -> str:
        return f"warning: {self.file}: {self.path}: {self.client}: {self.message}"


@dataclass
class PublishResult:
    changes: list[Change] = field(default_factory=list)
    dry_run: bool = False
    servers: list[ServerChange] = field(default_factory=list)
    warnings: list[SchemaWarning] = field(default_factory=list)

    def server_summary(self) -> str | None:
        if not self.servers:
            return None
        created = sum(c.created for c in self.servers)
        updated = sum(c.changed and not c.created for c in self.servers)
        return (f"{len(self.servers)} MCP server(s): {created} created, {updated} updated, "
                f"{len(self.servers) - created - updated} unchanged")

    def summary(self) -> str:
        created = sum(c.created for c in self.changes)
        updated = sum(c.new_version and not c.created for c in self.changes)
        unchanged = len(self.changes) - created - updated
        return f"{len(self.changes)} action(s): {created} created, {updated} updated, {unchanged} unchanged"


# ---------------------------------------------------------------------------- loading


def definition_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The .toml files named, and those directly inside the directories named, each once."""
    files: list[Path] = []
    seen: set[Path] = set()
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix == ".toml" and p.is_file())
            if not found:
                problems.append(f"{path}: no *.toml definitions in this directory")
        elif path.is_file():
            found = [path]
        else:
            problems.append(f"{path}: no such file or directory")
            continue
        for file in found:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                files.append(file)
    if problems:
        raise DefinitionError(problems)
    if not files:
        raise DefinitionError(["no definition files given"])
    return files


def load_definition(file: Path) -> tuple[Definition | None, list[str]]:
    problems: list[str] = []

    def bad(message: str) -> tuple[None, list[str]]:
        problems.append(f"{file}: {message}")
        return None, problems

    try:
        with open(file, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        return bad(f"cannot read it: {exc.strerror or exc}")
    except tomllib.TOMLDecodeError as exc:
        return bad(f"not valid TOML: {exc}")
    except UnicodeDecodeError:
        return bad("not valid TOML: the file is not UTF-8")

    server = doc.get("kind") == SERVER_KIND
    keys = SERVER_KEYS if server else TOP_KEYS
    for key in sorted(set(doc) - keys):
        what = "an MCP server definition" if server else "a definition"
        problems.append(f"{file}: {key}: unknown key; {what} has {', '.join(sorted(keys))}")
    for key, allowed in TABLE_KEYS.items():
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            problems.append(f"{file}: {key}: must be a table ([{key}])")
            continue
        for extra in sorted(set(value) - allowed):
            problems.append(f"{file}: {key}.{extra}: unknown key; [{key}] has {', '.join(sorted(allowed))}")
    for key, allowed in LIST_KEYS.items():
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            problems.append(f"{file}: {key}: must be an array of tables ([[{key}]])")
            continue
        for index, item in enumerate(value):
            for extra in sorted(set(item) - allowed):
                problems.append(f"{file}: {key}[{index}].{extra}: unknown key; [[{key}]] has "
                                f"{', '.join(sorted(allowed))}")
    for where in _non_json(doc, ""):
        problems.append(f"{file}: {where}: a TOML date or time is not JSON; write it as a string")

    action_id = doc.get("id")
    try:
        action_id = str(uuid.UUID(action_id)) if isinstance(action_id, str) else None
    except ValueError:
        action_id = None
    if action_id is None:
        problems.append(f"{file}: id: the {'server' if server else 'action'} id must be a UUID string (choose "
                        "one once, e.g. with uuidgen)")
    if server:
        return _server_definition(file, doc, action_id, problems)
    for key in ("name", "kind"):
        if not isinstance(doc.get(key), str):
            problems.append(f"{file}: {key}: required (a string)")

    source: Path | None = None
    action_input = {k: v for k, v in doc.items() if k not in ("id", "src")}
    if "src" in doc:
        if "config" in doc:
            problems.append(f"{file}: src: give either src (a Starlark file) or config, not both")
        elif not isinstance(doc["src"], str) or not doc["src"]:
            problems.append(f"{file}: src: the path of the Starlark program, relative to this file")
        else:
            source = file.parent / doc["src"]
            try:
                text = source.read_text(encoding="utf-8")
            except FileNotFoundError:
                problems.append(f"{file}: src: {source} does not exist")
            except UnicodeDecodeError:
                problems.append(f"{source}: the program is not UTF-8")
            except OSError as exc:
                problems.append(f"{file}: src: cannot read {source}: {exc.strerror or exc}")
            else:
                action_input["config"] = {"runtime": "starlark", "src": text}
    elif doc.get("kind") == "tool" and "config" not in doc:
        problems.append(f"{file}: src: a tool needs its program: src = \"<name>.star\" (relative to this file)")

    if problems:
        return None, problems
    references = [ref["name"] for ref in doc.get("tools") or [] if isinstance(ref.get("name"), str)]
    return Definition(file=file, source=source, action_id=action_id, name=doc["name"], input=action_input,
                      references=references), []


def _server_definition(file: Path, doc: dict, server_id: str | None,
                       problems: list[str]) -> tuple[Definition | None, list[str]]:
    if not isinstance(doc.get("name"), str):
        problems.append(f"{file}: name: required (a string)")
    if problems:
        return None, problems
    server_input = {k: v for k, v in doc.items() if k not in ("id", "kind")}
    server_input.setdefault("tools", [])
    references = [ref["name"] for ref in server_input["tools"] if isinstance(ref.get("name"), str)]
    return Definition(file=file, source=None, action_id=server_id, name=doc["name"], input=server_input,
                      references=references, server=True), []


def _non_json(value: Any, path: str) -> Iterable[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _non_json(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_json(item, f"{path}[{index}]")
    elif not isinstance(value, (str, int, float, bool)):
        yield path


def load(paths: Iterable[str | os.PathLike]) -> list[Definition]:
    definitions: list[Definition] = []
    problems: list[str] = []
    for file in definition_files(paths):
        definition, found = load_definition(file)
        problems.extend(found)
        if definition is not None:
            definitions.append(definition)
    by_id: dict[str, Definition] = {}
    by_name: dict[tuple[bool, str], Definition] = {}  # actions and servers have names of their own
    for definition in definitions:
        if definition.action_id in by_id:
            problems.append(f"{definition.file}: id: {definition.action_id} is also the id in "
                            f"{by_id[definition.action_id].file}; every action and server has its own id")
        if (definition.server, definition.name) in by_name:
            problems.append(f"{definition.file}: name: {definition.name!r} is also the name in "
                            f"{by_name[(definition.server, definition.name)].file}")
        by_id.setdefault(definition.action_id, definition)
        by_name.setdefault((definition.server, definition.name), definition)
    if problems:
        raise DefinitionError(problems)
    return definitions


# ---------------------------------------------------------------------------- ordering


def dependency_order(definitions: list[Definition]) -> list[Definition]:
    """Referenced definitions before the ones referencing them (by registry name); otherwise the given
    order. References to actions not among the definitions are left to the server (they must exist).
    MCP servers come after every action: they list tools, and nothing lists a server."""
    servers = [d for d in definitions if d.server]
    definitions = [d for d in definitions if not d.server]
    by_name = {d.name: d for d in definitions}
    ordered: list[Definition] = []
    state: dict[str, str] = {}  # name -> "visiting" | "done"

    def visit(definition: Definition, trail: list[Definition]) -> None:
        mark = state.get(definition.name)
        if mark == "done":
            return
        if mark == "visiting":
            cycle = trail[trail.index(definition):] + [definition]
            raise DefinitionError([
                "the definitions reference each other in a cycle: "
                + " -> ".join(f"{d.name} ({d.file})" for d in cycle)
                + "; a tool cannot (indirectly) reference itself"])
        state[definition.name] = "visiting"
        for name in definition.references:
            if name in by_name:
                visit(by_name[name], trail + [definition])
        state[definition.name] = "done"
        ordered.append(definition)

    for definition in definitions:
        visit(definition, [])
    return ordered + servers


# ---------------------------------------------------------------------------- the requests

STATE_FIELDS = "actionId name status pending latestVersion"
RESULT_FIELDS = "actionId name version latestVersion status pending"
SERVER_FIELDS = ("id name description instructions enabled path tools { name actionVersion input confirm }"
                 " policies { effect actions resources assertion }")


def read_state_document(definitions: list[Definition]) -> tuple[str, dict]:
    params = ", ".join(f"$id{i}: UUID!" for i in range(len(definitions)))
    actions = " ".join(f"a{i}: action(id: $id{i}) {{ {STATE_FIELDS} }}"
                       for i, d in enumerate(definitions) if not d.server)
    servers = " ".join(f"a{i}: mcpServer(id: $id{i}) {{ {SERVER_FIELDS} }}"
                       for i, d in enumerate(definitions) if d.server)
    variables = {f"id{i}": d.action_id for i, d in enumerate(definitions)}
    blocks = (f"actions {{ {actions} }}" if actions else "") + (f" mcpServers {{ {servers} }}" if servers else "")
    return f"query PublishState({params}) {{ {blocks} }}", variables


@dataclass
class Step:
    definition: Definition
    before: dict | None   # the action's state before, None when it does not exist
    publish: bool


def plan(definitions: list[Definition], state: dict) -> list[Step]:
    steps = []
    for i, definition in enumerate(definitions):
        block = state.get("mcpServers" if definition.server else "actions") or {}
        before = block.get(f"a{i}")
        publish = not definition.server and (before is None or before["status"] != "ACTIVE")
        steps.append(Step(definition, before, publish=publish))
    return steps


def mutation_document(steps: list[Step]) -> tuple[str, dict]:
    params: list[str] = []
    actions: list[str] = []
    servers: list[str] = []
    variables: dict[str, Any] = {}
    for i, step in enumerate(steps):
        input_type = "McpServerInput" if step.definition.server else "ActionInput"
        params += [f"$id{i}: UUID!", f"$in{i}: {input_type}!"]
        variables[f"id{i}"] = step.definition.action_id
        variables[f"in{i}"] = step.definition.input
        if step.definition.server:
            write = "createMcpServer" if step.before is None else "updateMcpServer"
            servers.append(f"s{i}: {write}(id: $id{i}, input: $in{i}) {{ {SERVER_FIELDS} }}")
            continue
        write = "createAction" if step.before is None else "updateAction"
        actions.append(f"w{i}: {write}(id: $id{i}, input: $in{i}) {{ {RESULT_FIELDS} }}")
        if step.publish:
            actions.append(f"p{i}: publishAction(id: $id{i}) {{ {RESULT_FIELDS} }}")
    # The servers' block comes second: root fields run in document order, so the tools they list exist.
    blocks = [f"  {name} {{\n    " + "\n    ".join(fields) + "\n  }"
              for name, fields in (("actions", actions), ("mcpServers", servers)) if fields]
    return f"mutation Publish({', '.join(params)}) {{\n" + "\n".join(blocks) + "\n}", variables


def publish(client: Querying, paths: Iterable[str | os.PathLike], *, dry_run: bool = False) -> PublishResult:
    definitions = dependency_order(load(paths))
    document, variables = read_state_document(definitions)
    state = client.query(document, variables, idempotent=True)
    steps = plan(definitions, state)
    document, variables = mutation_document(steps)
    try:
        response = client.response(document, variables, dry_run=dry_run)
    except LedgerRequestError as exc:
        raise PublishRejected(exc, locate_errors(exc, steps), unchecked_files(exc, steps)) from exc
    answer = response["data"]
    data = answer.get("actions") or {}
    result = PublishResult(dry_run=dry_run, warnings=located_warnings(response["extensions"], steps))
    for i, step in enumerate(steps):
        if step.definition.server:
            after = answer["mcpServers"][f"s{i}"]
            result.servers.append(ServerChange(
                name=after["name"], server_id=after["id"], file=str(step.definition.file), path=after["path"],
                created=step.before is None, changed=step.before != after, enabled=after["enabled"]))
            continue
        after = data.get(f"p{i}") or data[f"w{i}"]
        result.changes.append(Change(
            name=after["name"], action_id=after["actionId"], file=str(step.definition.file),
            before=step.before["latestVersion"] if step.before else None, version=after["latestVersion"],
            published=step.publish, status=after["status"], pending=after.get("pending")))
    return result


# ---------------------------------------------------------------------------- errors, back to the files

_SOURCE_POSITION = re.compile(r"line (\d+), column (\d+): (.*)", re.S)
_ALIAS = re.compile(r"[wps](\d+)$")
_VARIABLE = re.compile(r"\$(?:in|id)(\d+)\b")
# graphql-core: "Variable '$in0' has invalid value at .tool.responseTimeout: Int cannot represent ..."
_VARIABLE_AT = re.compile(r"Variable '\$(?:in|id)\d+' (?:has|got) invalid value(?: at \.?(\S+?))?: (.*)", re.S)


def locate_errors(error: LedgerRequestError, steps: list[Step]) -> list[Located]:
    """Every problem of the server's answer, with the file (and the path or line in it) it comes from."""
    located: list[Located] = []
    for raw in error.errors or [{"message": error.message, "extensions": error.extensions}]:
        ext = raw.get("extensions") or {}
        code = ext.get("code") or "error"
        if code == "not_executed":
            continue  # a consequence of the first failure, not a problem of its own
        step = _step_of(raw, steps)
        message = raw.get("message") or ""
        if step is None:
            match = _VARIABLE.search(message)
            if match and int(match.group(1)) < len(steps):
                step = steps[int(match.group(1))]
                at = _VARIABLE_AT.search(message)
                key, detail = (at.group(1), at.group(2)) if at else (None, message)
                located.append(Located(str(step.definition.file), detail, key=key))
            else:
                located.append(Located(None, f"{code}: {message}"))
            continue
        problems = ext.get("problems") or []
        if not problems:
            located.append(Located(str(step.definition.file), f"{code}: {message}"))
        for problem in problems:
            located.append(_locate_problem(step.definition, str(problem.get("path") or ""),
                                           str(problem.get("message") or "")))
    return located


def located_warnings(extensions: dict, steps: list[Step]) -> list[SchemaWarning]:
    """The answer's `extensions.warnings`, each in the file of the action it is about (its `field` is the
    response path of the write, `actions.w<i>`)."""
    located = []
    for raw in extensions.get("warnings") or []:
        step = _step_of({"path": str(raw.get("field") or "").split(".")}, steps)
        file = str(step.definition.file) if step is not None else "(request)"
        located.append(SchemaWarning(file, str(raw.get("path") or ""), str(raw.get("client") or ""),
                                str(raw.get("message") or "")))
    return located


def unchecked_files(error: LedgerRequestError, steps: list[Step]) -> list[str]:
    """The files after the first failing one: their fields did not run (fields run in document order,
    and the request stops at the first failure)."""
    failed = [steps.index(step) for step in (_step_of(raw, steps) for raw in error.errors) if step is not None]
    if not failed:
        return []
    return [str(step.definition.file) for step in steps[min(failed) + 1:]]


def _step_of(raw: dict, steps: list[Step]) -> Step | None:
    path = raw.get("path") or []
    for part in reversed(path):
        match = _ALIAS.match(str(part))
        if match and int(match.group(1)) < len(steps):
            return steps[int(match.group(1))]
    return None


def _locate_problem(definition: Definition, path: str, message: str) -> Located:
    if path.startswith("config.src") and definition.source is not None:
        match = _SOURCE_POSITION.match(message)
        if match:
            return Located(str(definition.source), match.group(3), line=int(match.group(1)),
                           column=int(match.group(2)))
        return Located(str(definition.source), message)
    if path.startswith("config") and definition.source is not None:
        return Located(str(definition.file), message, key="src")
    return Located(str(definition.file), message, key=path or None)
