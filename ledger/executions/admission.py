"""Whether a call may be made: the one home of the call limits and of what makes a version callable.

A nested call is admitted by `admit` whichever way it is made (`tools.x()` from a program, or an
invokeAction sent through `graphql()`): it must not re-enter a version already running, go deeper than
MAX_TOOL_DEPTH tool levels, or take the tree past MAX_CALLS_BENEATH calls. A refusal is `CallRefused`,
a `LedgerError`: through `graphql()` it is that document's GraphQL error; the program host turns it
into the `CallFailure` that fails the calling program (`ToolHost._next_child`, the one place).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from ..actions import natives
from ..actions.registry import ACTION, as_document, load_action
from ..errors import LedgerError, NotFound
from ..scope import Scope

if TYPE_CHECKING:
    from .tree import CallTree

# Tool levels below the first call (the first call is at depth 0).
MAX_TOOL_DEPTH = 8
# Calls made by one top-level call and everything beneath it, native calls included.
MAX_CALLS_BENEATH = 1024


class CallRefused(LedgerError):
    """A nested call the running call tree cannot take."""

    code = "action_call_limit_exceeded"


class ActionNotCallable(LedgerError):
    code = "action_not_callable"


def admit(tree: "CallTree", record: dict, name: str) -> None:
    """Admit a nested call of `record` (called `name` by its caller), counting it, or raise CallRefused.

    The new call runs beneath every program on the tree's stack, so its depth is the stack's height.
    """
    if (record["action_id"], record["version"]) in tree.stack:
        raise CallRefused(f"{name!r} v{record['version']} is already on the call stack; a call never re-enters it",
                          hint="restructure the tools so that none calls back into its caller")
    if len(tree.stack) > MAX_TOOL_DEPTH:
        raise CallRefused(f"calling {name!r} would go deeper than {MAX_TOOL_DEPTH} tool levels",
                          hint="flatten the call tree")
    count_call(tree)


def count_call(tree: "CallTree") -> None:
    """Count one more call beneath the top-level call (a native call is counted but adds no level)."""
    tree.calls_beneath += 1
    if tree.calls_beneath > MAX_CALLS_BENEATH:
        raise CallRefused(f"more than {MAX_CALLS_BENEATH} calls beneath one call",
                          hint="batch the work into fewer calls, or split it across several top-level calls")


def refused_version(record: dict) -> tuple[str, str] | None:
    """Why this version takes no calls now, as (message, hint); None when it does."""
    name = record["name"]
    if record["status"] != "ACTIVE":
        hint = {"UNPUBLISHED": "publish it with publishAction first", "DISABLED": "enable it with enableAction",
                "DELETED": "deleted actions cannot be called"}[record["status"]]
        return f"action {name!r} is {record['status']}", hint
    if record["pending"]:
        return (f"action {name!r} has a pending {record['pending'].lower()}",
                "it stops taking calls while started executions drain")
    if not record["enabled"]:
        return (f"version {record['version']} of {name!r} was written disabled",
                "call another version, or write an enabled one")
    return None


def callable_record(scope: Scope, action_id: uuid.UUID, version: int | None, record: dict | None = None) -> dict:
    """The version to run, or `action_not_callable` saying why not (`record`: it, already loaded); an
    action that does not exist in the caller's tenant is `not_found`."""
    if record is None:
        record = load_action(scope, action_id, version)
    if record is None:
        latest = load_action(scope, action_id)
        if latest is None:
            raise NotFound(f"no action {action_id}", hint="check the id; actions(where: {name}) finds it")
        raise ActionNotCallable(f"action {latest['name']!r} has no version {version}",
                                hint=f"call a version from 1 to {latest['latest_version']}, or omit actionVersion")
    refused = refused_version(record)
    if refused is not None:
        raise ActionNotCallable(refused[0], hint=refused[1])
    if not record.get("tool"):
        raise ActionNotCallable(f"action {record['name']!r} has no tool block", hint="only tools can be called")
    return record


def invocable_record(scope: Scope, action_id: uuid.UUID, version: int | None, *,
                     acting_for_caller: bool = False, loaded: dict | None = None) -> dict:
    """The version a direct call (invokeAction, startAction) runs: the caller needs SELECT and INVOKE on
    it when it exists in the tenant, and then it must be callable. `loaded`: that version's record, when
    the caller has already read it in this transaction."""
    record = loaded if loaded is not None else load_action(scope, action_id, version)
    if record is not None:
        scope.require("SELECT", ACTION, as_document(record))
        scope.require("INVOKE", ACTION, as_document(record))
        name = record["name"]
        if record["native"] and name in natives.AGENT_NATIVES:
            # An agent's turn or a model tool runs them itself (DESIGN 11, 13), never a caller.
            raise ActionNotCallable(f"the native {name!r} acts for an agent or a model tool and cannot be invoked "
                                    "or started directly",
                                    hint="call a model tool or an agent instead: each of its model requests is "
                                         "recorded as a model_call child, and each read_result as its own")
        if record["native"] and name in natives.ACTS_FOR_CALLER and not acting_for_caller:
            # Run directly, a native that acts for an MCP server's caller (`invoke`, `program`, ...) would act
            # for nobody: it runs only as a server's call.
            raise ActionNotCallable(f"the native {name!r} acts for an MCP server's caller and cannot be invoked "
                                    "or started directly",
                                    hint=f"list {name!r} in an MCP server (createMcpServer) and call it through "
                                         "the server's /mcp/<name> endpoint")
    return callable_record(scope, action_id, version, record)
