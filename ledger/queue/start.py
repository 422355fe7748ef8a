"""startAction and cancelExecution: the queue is not built yet, so both are refused with
`not_implemented` rather than accepting work that no worker would run.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import LedgerError


def _not_yet() -> LedgerError:
    return LedgerError("starting actions on the queue is not supported yet", code="not_implemented",
                       hint="call the tool synchronously with invokeAction")


def start_action(scope: Any, action_id: uuid.UUID, execution_id: uuid.UUID, version: int | None, input: Any,
                 run_at: Any) -> dict:
    raise _not_yet()


def cancel_execution(scope: Any, execution_id: uuid.UUID) -> dict:
    raise _not_yet()
