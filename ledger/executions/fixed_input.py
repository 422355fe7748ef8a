"""A reference's fixed input: the values a tool is always called with, whatever the program supplied."""

from __future__ import annotations

from typing import Any

from ..policy.cel import CelError, evaluate_expression
from .failures import CallFailed


def merge_fixed_input(supplied: Any, fixed: Any, session: dict | None, event: dict) -> Any:
    """The reference's fixed values replace what the program supplied; `{"$cel": expr}` values are
    evaluated once per call over `session` and `event`."""
    if not fixed:
        return supplied
    if not isinstance(fixed, dict):
        return fixed
    resolved: dict = {}
    for key, value in fixed.items():
        if isinstance(value, dict) and set(value) == {"$cel"}:
            try:
                resolved[key] = evaluate_expression(value["$cel"], {"session": session, "event": event})
            except CelError as exc:
                raise CallFailed("action_input_invalid", f"the fixed input {key!r} could not be evaluated: {exc.message}",
                                 "fix the $cel expression of the reference's fixed input") from exc
        else:
            resolved[key] = value
    base = supplied if isinstance(supplied, dict) else {}
    return {**base, **resolved}
