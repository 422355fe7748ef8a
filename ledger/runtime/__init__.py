"""Running Starlark tool programs in sandbox executor processes (DESIGN sections 7 and 8).

Programs never run in the server process: an `ExecutorPool` keeps warm executor children, a
lease gives one thread one executor for one call tree, and `ExecutorLease.run` runs a program
there while answering its host calls (graphql, cel, tools.<name>) through a `Host`, re-entrantly:
a host method may run a nested tool's program on the same lease while the caller waits.

Modules: interface (Program, Host, CallFailure, RunOutcome), pool (ExecutorPool), lease (the
server side of a run), process (spawning and killing one child), protocol (the wire), executor
(the child's main loop), starlark_program (prelude, entry, loading, error text), limits (bounds
and the child's rlimits), failures (codes and wording).

Behaviour chosen where the contract left a choice:
- A failure: `fail()` and Starlark errors are `action_failure`; a Starlark error's message is its
  first error line plus `(line N)` of the program.
- Recursion past `max_callstack` frames is `action_resource_exhausted` (a bound, like memory).
- The step budget counts `check_cancelled` calls (one per ~1,000 loop iterations or function
  calls) and applies to each run separately, nested runs included; past it:
  `action_resource_exhausted`. The default (5,000,000) only stops runaway loops.
- Past the deadline a run fails with `action_response_timeout` at its next step or host call; an
  executor that does not answer by deadline + grace is killed, every run on it fails with
  `action_response_timeout`, a run asked for meanwhile fails fast, and the next top-level run on
  the lease gets a fresh executor. Death of an executor (memory: SIGABRT/SIGSEGV) likewise, with
  `action_resource_exhausted` and a hint naming the memory bound.
- Output, event, host call arguments and results are each bounded by `max_payload_bytes` as
  JSON; past it `action_resource_exhausted` names the size and the bound. The output and host
  call arguments must be JSON: dicts with string keys, lists, tuples, strings, ints (any size),
  finite floats, bools, None, nested at most 100 levels; anything else (a struct, a function, a
  NaN, a cycle) is `action_failure`. (Deeper values would crash `json.encode`, which recurses
  natively; a program calling `json.encode` itself on such a value loses its executor and gets
  `action_resource_exhausted`.)
- The program's top level runs once per executor and program key, with host calls refused (a
  host call there fails the run, and is a compile problem); its print() lines are dropped.
- A host method raising anything but `CallFailure` unwinds the program (the executor stays
  usable) and the exception propagates out of `run`.
- `cel(expression, variables=None, check=True)` also accepts `vars=` as the design writes it.
"""

from ledger.runtime.interface import CallFailure, Host, Program, RunOutcome
from ledger.runtime.lease import ExecutorLease
from ledger.runtime.limits import DEFAULT_STEP_BUDGET
from ledger.runtime.pool import ExecutorPool, ExecutorUnavailable, ExecutorWaitTimedOut

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "CallFailure",
    "ExecutorLease",
    "ExecutorPool",
    "ExecutorUnavailable",
    "ExecutorWaitTimedOut",
    "Host",
    "Program",
    "RunOutcome",
]
