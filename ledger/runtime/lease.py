"""The server side of runs: one lease drives one executor for one top-level call tree.

`ExecutorLease.run` sends a program to the executor and then serves it: each host call the
program makes arrives here, is answered by the `Host` (on this thread, inside the caller's
transaction), and the answer goes back. A host method may call `run` again on the same lease
for a nested tool: that run's messages interleave on the same wire, strictly nested, because the
executor evaluates the nested program inside the waiting host call.

When the executor is lost (killed at deadline + grace, or dead of its own accord) every run still
on this lease's stack fails with the same failure. Afterwards:
- a `run` issued while frames of the lost executor are still on the stack (a host method calling
  another nested tool after one was lost) fails fast with that failure: its caller is failing too;
- once the stack has unwound, the next top-level `run` transparently gets a fresh executor.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from ledger.runtime import failures
from ledger.runtime.failures import Failure
from ledger.runtime.interface import CallFailure, Host, Program, RunOutcome
from ledger.runtime.process import ExecutorProcess
from ledger.runtime.protocol import (
    MAX_ENVELOPE_BYTES,
    ChannelClosed,
    FrameTooLarge,
    Message,
    NotJSON,
    ReceiveTimeout,
    encode_payload,
)

if TYPE_CHECKING:
    from ledger.runtime.pool import ExecutorPool

# Sent to a program whose host call raised an exception other than CallFailure: the program
# unwinds (Starlark cannot catch it), its executor stays usable, the exception propagates.
_ABORT = Failure("aborted", "the host call raised an exception; the run is abandoned")


class _ExecutorLost(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class ExecutorLease:
    """Exclusive use of one executor by one thread, for one top-level call tree (and its nested runs).

    Use as a context manager (or call `release()`); not thread-safe, by design: the call tree
    runs on the thread that holds the database transaction.
    """

    def __init__(self, pool: ExecutorPool, process: ExecutorProcess, tenant: Hashable | None = None) -> None:
        self._pool = pool
        self._tenant = tenant  # a replacement executor is leased for the same tenant
        self._process: ExecutorProcess | None = process
        # The pool asked whether `process` lives as it leased it: the first top-level run asks no more.
        self._just_leased = True
        self._settings = pool.settings
        self._grace = pool.grace_seconds
        self._depth = 0
        self._broken: Failure | None = None
        self._released = False

    @property
    def executor_pid(self) -> int | None:
        """The process id of the executor currently held (None after it was lost), for logs and tests."""
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> ExecutorLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._process is not None:
            process, self._process = self._process, None
            if self._depth:
                process.kill()  # released mid-run (an exception unwound through run): state unknown
            self._pool._release(process)

    # --- runs ---------------------------------------------------------------------------------

    def run(self, program: Program, event: dict, host: Host, deadline: float) -> RunOutcome:
        """Run `program`'s run(event) and serve its host calls until it finishes.

        `deadline` is an absolute time.monotonic() value. Returns the outcome; raises only what a
        host method raised (other than CallFailure), or ExecutorUnavailable when no executor can
        be had for a top-level run.
        """
        if self._released:
            raise RuntimeError("run() on a released executor lease")
        if self._broken is not None:
            if self._depth:
                return _outcome(self._broken)
            self._broken = None
        if time.monotonic() >= deadline:
            return _outcome(failures.response_timeout())
        try:
            event_payload = encode_payload(event)
        except NotJSON as error:
            raise ValueError(f"the event is not JSON: {error}") from None
        if len(event_payload) > self._settings.max_payload_bytes:
            return _outcome(failures.payload_too_large("the event", len(event_payload), self._settings.max_payload_bytes))
        if self._depth == 0:
            self._ensure_fresh_process(deadline)
        process = self._process
        assert process is not None
        self._depth += 1
        try:
            self._send(process, _run_envelope(program, deadline), event_payload)
            return self._serve(process, program, host, deadline)
        except _ExecutorLost as lost:
            return _outcome(lost.failure)
        finally:
            self._depth -= 1

    def _serve(self, process: ExecutorProcess, program: Program, host: Host, deadline: float) -> RunOutcome:
        # The loop of every host call: the channel's receive and send called here, their failures handled as
        # `_receive` and `_send` handle them (one Python call each a message instead of three).
        channel = process.channel
        receive_deadline = deadline + self._grace
        bound = self._settings.max_payload_bytes + MAX_ENVELOPE_BYTES
        while True:
            try:
                message = channel.receive(receive_deadline, bound)
            except (ReceiveTimeout, ChannelClosed, FrameTooLarge) as error:
                self._lose_receiving(process, error)
            kind = message.envelope["t"]
            if kind == "call":
                head, payload = self._answer(process, message, host, deadline)
                if self._process is not process:
                    # A nested run lost the executor while this frame waited: it is gone too.
                    assert self._broken is not None
                    return _outcome(self._broken)
                try:
                    channel.send_encoded(head, payload)
                except ChannelClosed:
                    self._lose_dead(process)
            elif kind == "done":
                if message.envelope.get("retire"):
                    process.retiring = True
                return _outcome_of(message)
            elif kind == "need_source":
                self._send(process, {"t": "source", "source": program.source, **program.wire()})
            else:
                self._lose(process, Failure(failures.ACTION_RESOURCE_EXHAUSTED, f"the executor sent an unexpected {kind!r}"))

    def _answer(
        self, process: ExecutorProcess, message: Message, host: Host, deadline: float
    ) -> tuple[bytes, bytes | None]:
        function = message.envelope["fn"]
        if time.monotonic() >= deadline:
            return _failure_reply(failures.response_timeout())
        arguments = _call_arguments(function, message)
        if arguments is None:
            return _failure_reply(_MALFORMED_CALL)
        try:
            if function == "graphql":  # most calls: without `_dispatch`'s frame
                value = host.graphql(arguments[0], arguments[1], arguments[2], arguments[3])
            else:
                value = _dispatch(host, function, arguments)
        except CallFailure as failure:
            return _failure_reply(Failure(failure.code, failure.message, failure.hint))
        except BaseException:
            if self._process is process:
                self._abort(process, deadline)
            raise
        if self._process is not process:
            return _failure_reply(_ABORT)  # not sent: the caller sees the lost executor
        if time.monotonic() >= deadline:
            return _failure_reply(failures.response_timeout())
        try:
            payload = encode_payload(value)
        except NotJSON as error:
            self._abort(process, deadline)
            raise TypeError(f"the host's {function} returned a value that is not JSON: {error}") from None
        if len(payload) > self._settings.max_payload_bytes:
            label = f"tools.{arguments[0]}()" if function == "tool" else f"{function}()"
            return _failure_reply(
                failures.payload_too_large(f"the result of {label}", len(payload), self._settings.max_payload_bytes)
            )
        return _REPLY_OK, payload

    def _abort(self, process: ExecutorProcess, deadline: float) -> None:
        """Unwind the waiting program without a result, keeping the executor if it cooperates."""
        try:
            self._send(process, *_failure_reply(_ABORT))
            message = self._receive(process, max(deadline, time.monotonic()) + self._grace)
            if message.kind != "done":
                self._lose(process, _ABORT)
        except _ExecutorLost:
            pass

    # --- compile ------------------------------------------------------------------------------

    def compile(self, source: str, tool_names: tuple[str, ...], timeout: float, *,
                program: Program | None = None) -> list[dict]:
        """The problems of `source` (or of `program`: a code-mode one), each with its line and column."""
        if self._released:
            raise RuntimeError("compile() on a released executor lease")
        if self._depth:
            raise RuntimeError("compile() inside a run")
        deadline = time.monotonic() + timeout
        self._broken = None
        self._ensure_fresh_process(deadline)
        process = self._process
        assert process is not None
        try:
            wire = program.wire() if program is not None else {"tools": list(tool_names)}
            self._send(process, {"t": "compile", "source": source, **wire, "deadline": deadline})
            message = self._receive(process, deadline + self._grace)
            if message.kind != "problems":
                self._lose(process, Failure(failures.ACTION_FAILURE, f"the executor sent an unexpected {message.kind!r}"))
        except _ExecutorLost as lost:
            self._broken = None
            failure = lost.failure
            if failure.code == failures.ACTION_RESPONSE_TIMEOUT:
                failure = Failure(failure.code, "evaluating the program's top level took too long and was stopped")
            return [{"line": 1, "column": 1, "message": failure.message}]
        if message.envelope.get("retire"):
            process.retiring = True
        return list(message.envelope["problems"])

    # --- the executor ---------------------------------------------------------------------------

    def _ensure_fresh_process(self, deadline: float) -> None:
        process = self._process
        if self._just_leased:
            self._just_leased = False
            if process is not None:
                return
        if process is not None and process.is_alive() and not process.retiring:
            return
        if process is not None:
            self._process = None
            self._pool._release(process)
        self._process = self._pool._acquire(max(deadline - time.monotonic(), 0.0), self._tenant)

    def _send(self, process: ExecutorProcess, envelope: dict[str, Any] | bytes, payload: bytes | None = None) -> None:
        try:
            process.send(envelope, payload)
        except ChannelClosed:
            self._lose_dead(process)

    def _receive(self, process: ExecutorProcess, deadline: float) -> Message:
        try:
            return process.receive(deadline)
        except (ReceiveTimeout, ChannelClosed, FrameTooLarge) as error:
            self._lose_receiving(process, error)

    def _lose_receiving(self, process: ExecutorProcess, error: Exception) -> NoReturn:
        if isinstance(error, ReceiveTimeout):
            self._lose(process, failures.executor_stopped_after_timeout())
        if isinstance(error, ChannelClosed):
            self._lose_dead(process)
        self._lose(
            process,
            Failure(failures.ACTION_RESOURCE_EXHAUSTED, f"the executor sent a message over the size bound ({error})"),
        )

    def _lose_dead(self, process: ExecutorProcess) -> NoReturn:
        status = process.exit_status()
        self._lose(process, failures.executor_died(status, self._settings.memory_limit_bytes))

    def _lose(self, process: ExecutorProcess, failure: Failure) -> NoReturn:
        """Kill and drop the executor; every frame on it fails with `failure`."""
        process.kill()
        if self._process is process:
            self._process = None
            self._broken = failure
            self._pool._discard(process)
        raise _ExecutorLost(self._broken or failure)


# The prelude always sends well-formed calls, but a program can reach `__host` itself: whatever
# arrives is checked here, so a Host only ever sees the types its protocol promises.
_MALFORMED_CALL = Failure(
    failures.ACTION_FAILURE, "the program made a malformed host call", "call graphql(), cel() and tools.<name>() only"
)
_ARGUMENT_TYPES: dict[str, tuple[tuple[type, ...] | None, ...]] = {
    "graphql": ((str,), (dict, type(None)), (str, type(None)), (bool,)),
    "cel": ((str,), (dict, type(None)), (bool,)),
    "tool": ((str,), None, (bool,)),  # None: any JSON value
}


def _call_arguments(function: str, message: Message) -> list | None:
    if function == "graphql":
        arguments = _plain_graphql_arguments(message.payload)
        if arguments is not None:
            return arguments
    return _checked_arguments(function, message)


def _checked_arguments(function: str, message: Message) -> list | None:
    """The call's arguments, decoded exactly and checked against `_ARGUMENT_TYPES`; None when malformed."""
    expected = _ARGUMENT_TYPES.get(function)
    try:
        arguments = message.value()
    except ValueError:
        return None
    if expected is None or not isinstance(arguments, list) or len(arguments) != len(expected):
        return None
    if not all(types is None or isinstance(argument, types) for argument, types in zip(arguments, expected)):
        return None
    return arguments


def _plain_graphql_arguments(payload: bytes | None) -> list | None:
    """A graphql() call's arguments as `_call_arguments` checks them, when orjson reads them as a document,
    variables that are None or a dict of strings, integers, booleans and None (what a program's variables
    usually are), an operation name or None, and a bool: then no float can be anywhere, so orjson's value is
    `decode_payload`'s, and its types are the ones `_ARGUMENT_TYPES` accepts. None: the general path decides
    (and reads the payload again), for anything else."""
    if payload is None:
        return None
    try:
        arguments = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if type(arguments) is not list or len(arguments) != 4:
        return None
    document, variables, operation_name, check = arguments
    if type(document) is not str or type(check) is not bool or (
            operation_name is not None and type(operation_name) is not str):
        return None
    if variables is not None and (type(variables) is not dict
                                  or not _FLAT_VALUES.issuperset(map(type, variables.values()))):
        return None
    return arguments


_FLAT_VALUES = frozenset({str, int, bool, type(None)})  # values that hold no float


def _dispatch(host: Host, function: str, arguments: list) -> Any:
    if function == "graphql":
        document, variables, operation_name, check = arguments
        return host.graphql(document, variables, operation_name, check)
    if function == "cel":
        expression, variables, check = arguments
        return host.cel(expression, variables, check)
    name, tool_input, check = arguments
    return host.call_tool(name, tool_input, check)


# The envelope of every successful reply, encoded once (a tree of 1,000 reads sends it 1,000 times).
_REPLY_OK = orjson.dumps({"t": "reply", "ok": True})


def _failure_reply(failure: Failure) -> tuple[bytes, None]:
    return orjson.dumps({"t": "reply", "ok": False, "failure": failure.as_wire()}), None


def _cache_key(program: Program) -> str:
    # The source's hash guards the executors' caches against a key reused for different code.
    return repr((program.key, hash(program.source), program.tool_names, program.code_mode, program.natives))


# A run's envelope up to its deadline, `{"t":"run","key":...,"deadline":`, by program key: the bytes
# `orjson.dumps` writes for the whole dict, its key computed and encoded once per program (a queued no-op
# execution builds the rest of its run in about the time the key took). Kept beside what `_cache_key` reads
# of the program, so that a program whose key is reused for other code gets its own.
_RUN_HEADS: dict[Hashable, tuple[int, tuple[str, ...], bool, tuple[str, ...], bytes]] = {}
_RUN_HEADS_KEPT = 1024


def _run_envelope(program: Program, deadline: float) -> bytes:
    source_hash = hash(program.source)
    try:
        kept = _RUN_HEADS.get(program.key)
    except TypeError:  # a key that cannot be hashed: encoded each time
        return orjson.dumps({"t": "run", "key": _cache_key(program), "deadline": deadline})
    if (kept is None or kept[0] != source_hash or kept[1] != program.tool_names or kept[2] != program.code_mode
            or kept[3] != program.natives):
        if len(_RUN_HEADS) >= _RUN_HEADS_KEPT:
            _RUN_HEADS.clear()
        head = orjson.dumps({"t": "run", "key": _cache_key(program)})[:-1] + b',"deadline":'
        kept = _RUN_HEADS[program.key] = (source_hash, program.tool_names, program.code_mode, program.natives, head)
    return kept[4] + orjson.dumps(deadline) + b"}"


def _outcome(failure: Failure, logs: list[str] | None = None) -> RunOutcome:
    return RunOutcome.failure(failure.code, failure.message, failure.hint, logs)


def _outcome_of(message: Message) -> RunOutcome:
    envelope = message.envelope
    if envelope["ok"]:
        try:
            output = message.value()
        except ValueError:  # only if the program replaced the entry's json.encode with its own
            return _outcome(Failure(failures.ACTION_FAILURE, "run() must return JSON values"), envelope["logs"])
        return RunOutcome(ok=True, output=output, logs=envelope["logs"])
    return _outcome(Failure.from_wire(envelope["failure"]), envelope["logs"])
