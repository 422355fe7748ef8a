"""The tools a tool version references, resolved for one execution, and the names its program may call."""

from __future__ import annotations

import keyword
import re
import uuid

from ..actions.registry import load_action
from ..scope import Scope
from .failures import CallFailed


def resolve_tools(scope: Scope, record: dict) -> tuple[dict[str, dict], list[dict]]:
    """The version each reference resolves to for this execution, by tool name."""
    by_name: dict[str, dict] = {}
    resolved: list[dict] = []
    origin: dict[str, str] = {}
    for ref in record.get("tools") or []:
        target = load_action(scope, uuid.UUID(str(ref["actionId"])), ref.get("actionVersion"))
        if target is None:
            raise CallFailed("action_failure", f"the reference to {ref['name']!r} no longer resolves",
                             "pin an existing version, or write the tool again")
        tool_name = (target.get("tool") or {}).get("name") or target["name"]
        if tool_name in by_name:
            raise CallFailed("action_failure",
                             f"references {origin[tool_name]!r} and {ref['name']!r} both resolve to tool name "
                             f"{tool_name!r}",
                             "pin one of them to a version with another tool name, or rename one tool")
        origin[tool_name] = ref["name"]
        by_name[tool_name] = {**target, "reference": ref}
        resolved.append({"name": tool_name, "actionId": str(target["action_id"]), "actionVersion": target["version"]})
    return by_name, resolved


_TOOL_USE = re.compile(r"\btools\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_STARLARK_ONLY_KEYWORDS = frozenset({"load"})


def program_tool_names(source: str, resolved: dict[str, dict]) -> tuple[str, ...]:
    """The names `tools.<name>` offers the program: the resolved tools, and every other name the source uses.

    An unresolved name reaches the host, which refuses it with `tool_not_declared` (e.g. a reference
    whose latest version renamed its tool), instead of a Starlark attribute error.
    """
    used = {name for name in _TOOL_USE.findall(source)
            if not keyword.iskeyword(name) and name not in _STARLARK_ONLY_KEYWORDS}
    return tuple(sorted(used | set(resolved)))


# A program reaches the database only through the host calls that run statements, graphql() and
# tools.<name>() (cel(), print() and fail() run none), and it can make them only by naming them or the
# prelude's internals (`__host`, `__send`, ...: runtime/starlark_program.py): Starlark has no eval and no
# way to look a global up by a computed name. So a source naming none of them never makes a statement.
