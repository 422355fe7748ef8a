"""Structured logs: one JSON object per line, carrying the call a line concerns.

While a call runs, `bind_call` puts its `executionId`, `rootExecutionId`, `tenant` and `action` in a
context variable, and every line logged meanwhile (on that thread, or a thread started with its context)
carries them. A line may also name them explicitly with `extra={...}`; both are merged, explicit first.

`ledger serve` and `ledger worker` log JSON lines, other commands text lines for a person at a terminal;
`LEDGER_LOG_FORMAT=json` or `text` says which for every command.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import os
from typing import Any

CALL_FIELDS = ("executionId", "rootExecutionId", "tenant", "action")

_call: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ledger_call", default=None)

# The attributes every LogRecord has: anything else on a record came from `extra=` and is logged.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName", "color_message"}


def bind_call(*, execution_id: Any = None, root_execution_id: Any = None, tenant: Any = None,
              action: Any = None) -> contextvars.Token:
    """Make the lines logged from here on (until `unbind_call(token)`) name this call."""
    fields = {"executionId": execution_id, "rootExecutionId": root_execution_id, "tenant": tenant,
              "action": action}
    outer = _call.get() or {}
    # Kept as given (UUIDs, mostly) and turned into text only when a line is written: a call binds on every
    # run, and most runs log nothing.
    return _call.set({**outer, **{k: v for k, v in fields.items() if v is not None}})


def update_call(**fields: Any) -> None:
    """Add fields (e.g. the action, once it is known) to the call bound now."""
    names = {"execution_id": "executionId", "root_execution_id": "rootExecutionId", "tenant": "tenant",
             "action": "action"}
    if _call.get() is None:
        return  # no call is bound: nothing to add to
    current = dict(_call.get())
    current.update({names[k]: v for k, v in fields.items() if v is not None})
    _call.set(current)


def unbind_call(token: contextvars.Token) -> None:
    _call.reset(token)


def current_call() -> dict:
    return _call_text()


def _call_text() -> dict[str, str]:
    """The call bound now, its fields as text."""
    return {key: str(value) for key, value in (_call.get() or {}).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "message", <the call's fields>, <extra fields>, "exception"}."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = _plain(value)
        for key, value in _call_text().items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """Plain text, with the call's fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {**_call_text(),
                  **{k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}}
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line


def formatter_class(json_default: bool = True) -> str:
    chosen = os.environ.get("LEDGER_LOG_FORMAT", "").strip().lower()
    as_json = chosen == "json" or (chosen != "text" and json_default)
    return f"{__name__}.{'JsonFormatter' if as_json else 'TextFormatter'}"


def logging_config(level: str = "INFO", json_default: bool = True) -> dict:
    """A dictConfig for the process: every logger (ours, uvicorn's, libraries') writes lines of the
    chosen format to stderr. Given to uvicorn too, so that each of its worker processes logs alike."""
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"ledger": {"()": formatter_class(json_default)}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "ledger",
                                "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            # uvicorn's own loggers carry handlers of their own in its default config: replace them.
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
    }


def configure(level: str = "INFO", json_default: bool = True) -> None:
    import logging.config

    logging.config.dictConfig(logging_config(level, json_default))
    logging.captureWarnings(True)
