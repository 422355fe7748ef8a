"""Policy statements: `{effect, actions, resources, assertion}`, parsed with every problem reported.

Resource patterns are dot-separated segments of `[A-Za-z0-9_]`. A `*` segment matches exactly one
segment, except as the last segment, where it matches one or more remaining segments:
`financial.Account.*` matches `financial.Account.document` and `financial.Account.indexes.by_name`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ledger.policy.cel import CelError, CompiledAssertion, compile_assertion

OPERATIONS = ("SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE")
EFFECTS = ("ALLOW", "DENY")

_STATEMENT_FIELDS = ("effect", "actions", "resources", "assertion")
_SEGMENT = re.compile(r"[A-Za-z0-9_]+")
_PATTERN_CACHE_SIZE = 4096
_MATCH_CACHE_SIZE = 65536


# --- resource patterns ---------------------------------------------------------------------------


def resource_pattern_problem(pattern: Any) -> str | None:
    """Why `pattern` is not a valid resource pattern, or None when it is."""
    if not isinstance(pattern, str):
        return "a resource pattern must be a string"
    if not pattern:
        return "the resource pattern is empty"
    for position, segment in enumerate(pattern.split("."), start=1):
        if segment == "*" or _SEGMENT.fullmatch(segment):
            continue
        if not segment:
            return f"{pattern!r} has an empty segment (segments are separated by single dots)"
        if "*" in segment:
            return f"{pattern!r}: `*` must be a whole segment (segment {position} is {segment!r})"
        return f"{pattern!r}: segment {position} ({segment!r}) may only contain letters, digits and `_`"
    return None


@lru_cache(maxsize=_PATTERN_CACHE_SIZE)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    problem = resource_pattern_problem(pattern)
    if problem is not None:
        raise ValueError(problem)
    segments = pattern.split(".")
    parts = [r"[^.]+" if segment == "*" else re.escape(segment) for segment in segments]
    if segments[-1] == "*":
        parts[-1] = r"[^.]+(?:\.[^.]+)*"  # a trailing star takes one or more remaining segments
    return re.compile(r"\.".join(parts))


@lru_cache(maxsize=_MATCH_CACHE_SIZE)
def resource_matches(pattern: str, resource: str) -> bool:
    """Whether `resource` matches `pattern`; ValueError for an invalid pattern."""
    return _pattern_regex(pattern).fullmatch(resource) is not None


# --- statements ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    assertion: str | None = None
    # Compiled on construction so a bad assertion can never reach a decision.
    compiled: CompiledAssertion | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "resources", tuple(self.resources))
        if self.effect not in EFFECTS:
            raise ValueError(f"unknown effect {self.effect!r}")
        unknown = [operation for operation in self.actions if operation not in OPERATIONS]
        if unknown:
            raise ValueError(f"unknown operations {unknown!r}")
        for pattern in self.resources:
            _pattern_regex(pattern)
        if self.assertion is not None:
            object.__setattr__(self, "compiled", compile_assertion(self.assertion))

    def matches(self, operation: str, resource: str) -> bool:
        return operation in self.actions and any(resource_matches(p, resource) for p in self.resources)

    def to_json(self) -> dict[str, Any]:
        return {
            "effect": self.effect,
            "actions": list(self.actions),
            "resources": list(self.resources),
            "assertion": self.assertion,
        }


def _plain(value: Any) -> Any:
    # GraphQL layers may hand over enum members rather than their names.
    return value.value if isinstance(value, enum.Enum) else value


def _parse_statement(raw: Any, path: str, problems: list[dict[str, str]]) -> Statement | None:
    def problem(where: str, message: str) -> None:
        problems.append({"path": where, "message": message})

    if not isinstance(raw, Mapping):
        problem(path, "a statement must be an object with effect, actions, resources and assertion")
        return None
    found_before = len(problems)

    for key in raw:
        if key not in _STATEMENT_FIELDS:
            problem(f"{path}.{key}", f"unknown field {key!r}; a statement has {', '.join(_STATEMENT_FIELDS)}")

    effect = _plain(raw.get("effect"))
    if effect not in EFFECTS:
        problem(f"{path}.effect", f"unknown effect {effect!r}; expected ALLOW or DENY")

    actions = raw.get("actions")
    operations: list[str] = []
    if not isinstance(actions, (list, tuple)) or not actions:
        problem(f"{path}.actions", f"a statement needs at least one operation of {', '.join(OPERATIONS)}")
    else:
        for index, action in enumerate(actions):
            operation = _plain(action)
            if operation not in OPERATIONS:
                problem(f"{path}.actions[{index}]", f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}")
            elif operation not in operations:
                operations.append(operation)

    resources = raw.get("resources")
    if not isinstance(resources, (list, tuple)) or not resources:
        problem(f"{path}.resources", "a statement needs at least one resource pattern, e.g. `financial.Account.*`")
        resources = ()
    for index, pattern in enumerate(resources):
        pattern_problem = resource_pattern_problem(pattern)
        if pattern_problem is not None:
            problem(f"{path}.resources[{index}]", pattern_problem)

    assertion = raw.get("assertion")
    if assertion is not None:
        if not isinstance(assertion, str):
            problem(f"{path}.assertion", "the assertion must be a CEL expression as a string, or null")
        elif not assertion.strip():
            problem(f"{path}.assertion", "the assertion is empty; leave it out (null) for a statement that always applies")
        else:
            try:
                compile_assertion(assertion)
            except CelError as error:
                problem(f"{path}.assertion", error.message)

    if len(problems) > found_before:
        return None
    return Statement(effect, tuple(operations), tuple(dict.fromkeys(resources)), assertion)


def parse_policies(
    raw: list[dict] | None, path: str = "policies"
) -> tuple[tuple[Statement, ...], list[dict[str, str]]]:
    """Statements from their JSON form, and every problem found as `{"path", "message"}`.

    The statements are only the valid ones; a writer should reject the whole list when any problem
    is reported, so that statement positions (`policies[i]`) stay meaningful.
    """
    if raw is None:
        return (), []
    if not isinstance(raw, (list, tuple)):
        return (), [{"path": path, "message": "policies must be a list of statements"}]
    problems: list[dict[str, str]] = []
    statements = []
    for index, item in enumerate(raw):
        statement = _parse_statement(item, f"{path}[{index}]", problems)
        if statement is not None:
            statements.append(statement)
    return tuple(statements), problems
