"""Failure codes of a run and the wording of the failures the runtime itself detects.

Shared by the server side and the executor child, so the same failure reads the same wherever it
is noticed. Codes are those of DESIGN section 7 (`invocation.error.code`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

ACTION_FAILURE = "action_failure"
ACTION_RESPONSE_TIMEOUT = "action_response_timeout"
ACTION_RESOURCE_EXHAUSTED = "action_resource_exhausted"

# The design's ceiling for responseTimeout, quoted in hints.
MAX_RESPONSE_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Failure:
    code: str
    message: str
    hint: str | None = None

    def as_wire(self) -> dict:
        return {"code": self.code, "message": self.message, "hint": self.hint}

    @classmethod
    def from_wire(cls, fields: dict) -> Failure:
        return cls(code=fields["code"], message=fields["message"], hint=fields.get("hint"))


def format_bytes(size: int) -> str:
    """1073741824 -> '1 GiB'; 16777216 -> '16 MiB'; sizes that are not whole units keep a decimal."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"


def response_timeout() -> Failure:
    return Failure(
        ACTION_RESPONSE_TIMEOUT,
        "the program did not finish within its responseTimeout",
        f"make the program do less work, or raise the action's responseTimeout "
        f"(at most {MAX_RESPONSE_TIMEOUT_SECONDS} s)",
    )


def executor_stopped_after_timeout() -> Failure:
    return Failure(
        ACTION_RESPONSE_TIMEOUT,
        "the program exceeded its responseTimeout and did not stop (a single operation ran too long), "
        "so its executor was stopped",
        "avoid huge single operations such as multiplying a string or list by a large number",
    )


def step_budget_exhausted(step_budget: int) -> Failure:
    return Failure(
        ACTION_RESOURCE_EXHAUSTED,
        f"the program exceeded its step budget of {step_budget:,} steps "
        f"(a step is about 1,000 loop iterations or function calls)",
        "make the program do less work: loop over fewer items or call fewer functions",
    )


def callstack_overflow(max_callstack: int) -> Failure:
    return Failure(
        ACTION_RESOURCE_EXHAUSTED,
        f"the program's call stack exceeded {max_callstack} frames (recursion too deep)",
        "Starlark programs should not recurse deeply; rewrite the recursion as a loop",
    )


# starlark-rust collects garbage only between a module's top-level statements, never inside a
# function such as run(): every value a call creates stays until it returns. Measured here under 1 GiB:
# about 10.5 million big-integer additions (~85 bytes each), 16.5 million list appends, or a string
# grown by `s += "x"` some 45,000 times (each step copies it).
_KEEPS_EVERY_VALUE = (
    "Starlark keeps every value a call creates until the call returns, so a long loop that builds "
    "values (even small ones: integers beyond 32 bits, strings, list items) exhausts memory as surely "
    "as one huge string or list: do fewer iterations per call or split the work across calls"
)


def out_of_memory(memory_limit_bytes: int) -> Failure:
    return Failure(
        ACTION_RESOURCE_EXHAUSTED,
        f"the program ran out of memory: its heap grew past its bound of {format_bytes(memory_limit_bytes)}",
        f"the program exceeded its memory bound of {format_bytes(memory_limit_bytes)}. {_KEEPS_EVERY_VALUE}",
    )


def payload_too_large(what: str, size: int, limit: int, *, at_least: bool = False) -> Failure:
    qualifier = "at least " if at_least else ""
    return Failure(
        ACTION_RESOURCE_EXHAUSTED,
        f"{what} is {qualifier}{size:,} bytes as JSON, over the limit of {limit:,} bytes ({format_bytes(limit)})",
        "pass smaller values: fetch or return only the fields and items you need",
    )


def nesting_too_deep(max_frames: int) -> Failure:
    return Failure(
        ACTION_RESOURCE_EXHAUSTED,
        f"programs were nested more than {max_frames} levels deep in one executor",
        None,
    )


def executor_died(returncode: int | None, memory_limit_bytes: int) -> Failure:
    """The executor process ended while running a program: classify by how it ended."""
    if returncode is not None and returncode < 0:
        signal_number = -returncode
        if signal_number == signal.SIGABRT:
            # Rust aborts the process when an allocation fails under RLIMIT_AS.
            return out_of_memory(memory_limit_bytes)
        if signal_number == signal.SIGXCPU:
            return Failure(
                ACTION_RESOURCE_EXHAUSTED,
                "the program used more CPU time than its bound",
                "make the program do less work",
            )
        if signal_number == signal.SIGSEGV:
            return Failure(
                ACTION_RESOURCE_EXHAUSTED,
                "the program's executor crashed (SIGSEGV): it ran out of memory or nested calls too deeply",
                f"keep within the memory bound of {format_bytes(memory_limit_bytes)} and nest fewer calls",
            )
        name = signal.Signals(signal_number).name if signal_number in signal.valid_signals() else str(signal_number)
        cause = f"was stopped by {name}"
    else:
        cause = f"exited with status {returncode}"
    hint = (
        f"the program may have exceeded its memory bound of {format_bytes(memory_limit_bytes)}. "
        + _KEEPS_EVERY_VALUE
    )
    return Failure(ACTION_RESOURCE_EXHAUSTED, f"the program's executor {cause} while running it", hint)
