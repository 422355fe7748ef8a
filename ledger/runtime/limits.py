"""The bounds an executor runs under, and the OS limits the executor child applies to itself.

Measured here (starlark-pyo3 2026.1): `check_cancelled` fires once per 1,000 loop iterations or
function calls (a comprehension over 100,000 items: 100 calls; a single `'y' * n`: none), between
~30,000 and ~220,000 times a second depending on the loop body. A *step* is one such call.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import resource
import signal
from dataclasses import dataclass

# 5,000,000 steps is about 5 billion loop iterations or calls: 20 s to several minutes of pure
# Starlark. No sane ledger tool comes close; a runaway loop is cut even under a 300 s timeout.
DEFAULT_STEP_BUDGET = 5_000_000

# Retire an executor whose address space grew past this share of its memory bound, so that the
# next program does not start with the previous one's fragmentation counted against it.
RETIRE_ADDRESS_SPACE_SHARE = 0.5

# Slack granted to the CPU backstop beyond a run's deadline: the server kills the executor at
# deadline + grace, so the backstop only fires when the server is not watching (wedged or gone).
CPU_BACKSTOP_SLACK_SECONDS = 10

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ExecutorSettings:
    """What every executor of a pool is bound by; sent to the child on its command line."""

    memory_limit_bytes: int = 1 << 30
    max_payload_bytes: int = 16 << 20
    max_callstack: int = 200
    step_budget: int | None = DEFAULT_STEP_BUDGET
    max_log_lines: int = 1000
    max_log_bytes: int = 64 << 10
    # Bounds the loaded-program cache of one executor by count and by total source size.
    program_cache_entries: int = 128
    program_cache_source_bytes: int = 32 << 20
    # Runs nested in one executor (tool levels, plus native calls that run tools): the design
    # allows 9 tool levels; this is a backstop for the native stack, not the design's limit.
    max_nested_runs: int = 32

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, fields: dict) -> ExecutorSettings:
        return cls(**fields)


# --- applied by the executor child to itself -------------------------------------------------


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent goes away.

    PR_SET_PDEATHSIG fires when the *thread* that spawned us exits, which is why the pool spawns
    every executor from one long-lived thread. If the parent is already gone, leave at once.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(0)


def apply_memory_limit(memory_limit_bytes: int) -> None:
    """Bound the address space: an allocation past it aborts the child, never the server."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    # An abort would otherwise write a core file of up to the memory bound.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class CpuBackstop:
    """The process's CPU-time limit (RLIMIT_CPU), armed so that this process may use at most `seconds` more
    CPU time before the kernel sends SIGXCPU.

    Re-armed at the start of every top-level run (from the run's deadline), so a long-lived warm executor
    never accumulates its way into the limit while idle programs come and go. The hard limit is read once
    (nothing here raises it, and only a privileged process could), and the soft limit is set only when it
    changes: runs of one timeout arm the same whole second most of the time (one system call each saved).
    """

    def __init__(self) -> None:
        self._soft, self._hard = resource.getrlimit(resource.RLIMIT_CPU)

    def arm(self, seconds: float) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds)
        if self._hard != resource.RLIM_INFINITY and soft > self._hard:
            soft = self._hard
        if soft != self._soft:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, self._hard))
            self._soft = soft


def address_space_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
