"""The sandbox executor: a child process that evaluates Starlark programs for the server.

Started as `python -m ledger.runtime.executor SETTINGS_JSON PARENT_PID` with the wire on stdin
and stdout. It serves one request at a time and re-enters itself: while a program waits for a
host call's reply, the server may send another `run` (a nested tool), which is evaluated right
there, inside the waiting host call, before the reply comes. Host callables always act for the
innermost run, the top of `Executor.frames`.

Everything a program can do to the process (exhaust memory, loop, recurse) ends here: the server
sees a failure code or a dead child, never a hurt server.
"""

from __future__ import annotations

import functools
import json
import json.encoder
import os
import resource
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NoReturn

import orjson
import starlark as sl

from ledger.json_floats import holds_float
from ledger.runtime import failures, limits
from ledger.runtime.failures import ACTION_FAILURE, ACTION_RESOURCE_EXHAUSTED, Failure
from ledger.runtime.limits import ExecutorSettings
from ledger.runtime.protocol import Channel, ChannelClosed, Message, decode_payload
from ledger.runtime.starlark_program import (
    ALL_NATIVES,
    HOST_CALL_NAMES,
    MAX_JSON_DEPTH,
    Problem,
    ProgramProblem,
    StarlarkLoader,
    describe_error,
)

# The envelopes of the host calls the prelude makes, encoded once (a tree of 1,000 reads sends 1,000).
_CALL_ENVELOPES = {function: orjson.dumps({"t": "call", "fn": function}) for function in ("graphql", "cel", "tool")}
# The envelope of a run that succeeded without a print() line, encoded once: nested (None) or top-level,
# with its `retire`. Most runs end so; any other done is encoded as it is built.
_DONE_OK_ENVELOPES = {
    None: orjson.dumps({"t": "done", "logs": [], "ok": True}),
    False: orjson.dumps({"t": "done", "logs": [], "ok": True, "retire": False}),
    True: orjson.dumps({"t": "done", "logs": [], "ok": True, "retire": True}),
}


class RecordedFailure(Exception):
    """Raised inside a host callable after the failure was recorded on the frame.

    starlark-pyo3 turns it into a StarlarkError carrying only its text, so the structured failure
    travels on the frame, not on the exception.
    """


@dataclass(slots=True)
class LogBuffer:
    max_lines: int
    max_bytes: int
    lines: list[str] = field(default_factory=list)
    used_bytes: int = 0
    dropped: int = 0

    def add(self, line: str) -> None:
        if self.dropped or len(self.lines) >= self.max_lines:
            self.dropped += 1
            return
        size = len(line.encode("utf-8", "surrogatepass"))
        if self.used_bytes + size > self.max_bytes:
            room = self.max_bytes - self.used_bytes
            self.lines.append(line.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore") + "…")
            self.used_bytes = self.max_bytes
            self.dropped += 1
            return
        self.lines.append(line)
        self.used_bytes += size

    def finish(self) -> list[str]:
        if not self.dropped:
            return self.lines
        return self.lines + [
            f"[logs truncated: {self.dropped} line(s) not kept; a run keeps at most "
            f"{self.max_lines:,} lines and {failures.format_bytes(self.max_bytes)}]"
        ]


@dataclass(slots=True)
class Frame:
    """One run (or one compile) in progress in this executor."""

    deadline: float
    step_budget: int | None
    logs: LogBuffer
    loading: bool = False
    steps: int = 0
    stopped_by: Failure | None = None
    failure: Failure | None = None

    def check_cancelled(self) -> bool:
        # Called once per ~1,000 loop iterations or calls, so it must stay this cheap.
        self.steps += 1
        if self.step_budget is not None and self.steps > self.step_budget:
            self.stopped_by = failures.step_budget_exhausted(self.step_budget)
            return True
        if time.monotonic() > self.deadline:
            self.stopped_by = failures.response_timeout()
            return True
        return False


@dataclass(frozen=True)
class LoadFailure:
    """A program that cannot run, kept in the cache so it is not evaluated again."""

    failure: Failure


class ProgramCache:
    """Loaded programs by key, least recently used first out, bounded by count and source size."""

    def __init__(self, max_entries: int, max_source_bytes: int) -> None:
        self._entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._max_entries = max_entries
        self._max_source_bytes = max_source_bytes
        self._source_bytes = 0

    def get(self, key: str) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: str, loaded: Any, source_bytes: int) -> None:
        self._entries[key] = (loaded, source_bytes)
        self._source_bytes += source_bytes
        while len(self._entries) > self._max_entries or (
            self._source_bytes > self._max_source_bytes and len(self._entries) > 1
        ):
            _, (_, size) = self._entries.popitem(last=False)
            self._source_bytes -= size


class Executor:
    def __init__(self, channel: Channel, settings: ExecutorSettings) -> None:
        self.channel = channel
        self.settings = settings
        self.frames: list[Frame] = []
        self.programs = ProgramCache(settings.program_cache_entries, settings.program_cache_source_bytes)
        self.loader = StarlarkLoader(
            {
                **{name: functools.partial(self._host_call, function) for function, name in HOST_CALL_NAMES.items()},
                "__print": self._print,
                "__fail": self._fail,
                "__not_json": self._not_json,
                "__too_large": self._too_large,
            },
            settings.max_payload_bytes,
        )
        # Set when this process should not serve another call tree (after a Rust panic or a
        # MemoryError, or when its address space grew large); reported with the top-level done.
        self.retire = False
        self._peak_rss_checked = 0
        self._backstop = limits.CpuBackstop()
        self._max_payload_bytes = settings.max_payload_bytes
        # One set of options for every evaluation: its check goes to the innermost frame, the only one
        # evaluating (an outer run waits inside a host call), so no run builds its own.
        self._options = sl.EvalOptions(check_cancelled=self._check_cancelled, max_callstack_size=settings.max_callstack)

    def _check_cancelled(self) -> bool:
        return self.frames[-1].check_cancelled()

    # --- serving ----------------------------------------------------------------------------

    def serve(self) -> None:
        self.channel.send({"t": "ready", "pid": os.getpid()})
        while True:
            message = self.channel.receive()
            if message.kind == "run":
                self._serve_run(message)
            elif message.kind == "compile":
                self._serve_compile(message)
            else:
                raise RuntimeError(f"unexpected message {message.kind!r} while idle")

    def _await_reply(self, message: Message) -> Message:
        """The reply to a host call, `message` the first message after the call: nested runs that arrive before
        the reply are served."""
        while True:
            kind = message.envelope["t"]
            if kind == "reply":
                return message
            if kind == "run":
                self._serve_run(message)
            else:
                raise RuntimeError(f"unexpected message {kind!r} while waiting for a reply")
            message = self.channel.receive()

    def _serve_run(self, message: Message) -> None:
        envelope = message.envelope
        top_level = not self.frames
        if top_level:
            self._arm_cpu_backstop(envelope["deadline"])
        frame = Frame(
            deadline=envelope["deadline"],
            step_budget=self.settings.step_budget,
            logs=LogBuffer(self.settings.max_log_lines, self.settings.max_log_bytes),
        )
        if len(self.frames) >= self.settings.max_nested_runs:
            self._send_done(frame, failure=failures.nesting_too_deep(self.settings.max_nested_runs), top_level=False)
            return
        self.frames.append(frame)
        try:
            output, failure = self._run(frame, envelope["key"], message)
        finally:
            self.frames.pop()
        self._send_done(frame, failure=failure, output=output, top_level=top_level)

    def _send_done(self, frame: Frame, *, failure: Failure | None, output: Any = None, top_level: bool) -> None:
        if top_level:
            self._consider_retiring()
        logs = frame.logs.finish()
        if failure is None and not logs:
            self.channel.send_encoded(_DONE_OK_ENVELOPES[self.retire if top_level else None], output)
            return
        envelope: dict[str, Any] = {"t": "done", "logs": logs, "ok": failure is None}
        if failure is not None:
            envelope["failure"] = failure.as_wire()
        if top_level:
            envelope["retire"] = self.retire
        self.channel.send(envelope, output)

    def _serve_compile(self, message: Message) -> None:
        envelope = message.envelope
        self._arm_cpu_backstop(envelope["deadline"])
        frame = Frame(deadline=envelope["deadline"], step_budget=self.settings.step_budget, logs=LogBuffer(0, 0))
        self.frames.append(frame)
        try:
            loaded = self._load(frame, envelope["source"], envelope)
        finally:
            self.frames.pop()
        problems = []
        if isinstance(loaded, _Problematic):
            problem = loaded.problem
            if frame.stopped_by is not None:
                problem = Problem(
                    "evaluating the program's top level took too long; move work into run()", problem.line, problem.column
                )
            problems.append(problem.as_dict())
        self._consider_retiring()
        self.channel.send({"t": "problems", "problems": problems, "retire": self.retire})

    # --- running ----------------------------------------------------------------------------

    def _run(self, frame: Frame, key: str, message: Message) -> tuple[Any, Failure | None]:
        """Returns (encoded output payload, None) or (None, failure)."""
        program = self.programs.get(key)
        if program is None:
            self.channel.send({"t": "need_source"})
            source_message = self.channel.receive()
            if source_message.kind != "source":
                raise RuntimeError(f"expected the program's source, got {source_message.kind!r}")
            source = source_message.envelope["source"]
            loaded = self._load(frame, source, source_message.envelope)
            if isinstance(loaded, _Problematic):
                if loaded.deterministic:
                    self.programs.put(key, LoadFailure(loaded.failure), len(source))
                return None, loaded.failure
            program = loaded
            self.programs.put(key, program, len(source))
        if isinstance(program, LoadFailure):
            return None, program.failure
        event = message.value()
        try:
            # ledger__entry returns the output as JSON text (see starlark_program).
            text = program.call_with(self._options, "ledger__entry", event).value
            payload = text.encode()
        except sl.StarlarkError as error:
            return None, self._failure_of(frame, error)
        except MemoryError:
            self.retire = True
            return None, failures.out_of_memory(self.settings.memory_limit_bytes)
        except BaseException as error:
            return None, self._failure_of_panic(error)
        if len(payload) > self.settings.max_payload_bytes:
            return None, failures.payload_too_large("the output", len(payload), self.settings.max_payload_bytes)
        return payload, None

    def _load(self, frame: Frame, source: str, wire: dict) -> Any:
        """A frozen module, or a _Problematic saying why the program cannot run (`wire`: the envelope
        that brought the source, with its tool names and mode)."""
        tool_names = tuple(wire["tools"])
        mode = {"code_mode": bool(wire.get("code")), "natives": tuple(wire.get("natives", ALL_NATIVES))}
        frame.loading = True
        try:
            return self.loader.load(source, tool_names, self._options, **mode)
        except ProgramProblem as problem:
            return _Problematic(problem.problem, Failure(ACTION_FAILURE, _located(problem.problem)), True)
        except sl.StarlarkError as error:
            failure = self._failure_of(frame, error)
            problem = describe_error(str(error))
            if frame.failure is not None or frame.stopped_by is not None:
                # A fail() or a refused host call at load: its own message, at the program's line.
                problem = Problem(failure.message, problem.line, problem.column)
            deterministic = frame.stopped_by is None
            return _Problematic(problem, failure, deterministic)
        except MemoryError:
            self.retire = True
            failure = failures.out_of_memory(self.settings.memory_limit_bytes)
            return _Problematic(Problem(failure.message), failure, False)
        except BaseException as error:
            failure = self._failure_of_panic(error)
            return _Problematic(Problem(failure.message), failure, False)
        finally:
            frame.loading = False

    def _failure_of(self, frame: Frame, error: Exception) -> Failure:
        if frame.failure is not None:
            return frame.failure
        if frame.stopped_by is not None:
            return frame.stopped_by
        text = str(error)
        if "call stack overflow" in text:
            return failures.callstack_overflow(self.settings.max_callstack)
        return Failure(ACTION_FAILURE, _located(describe_error(text)))

    def _failure_of_panic(self, error: BaseException) -> Failure:
        # A Rust panic surfaces as pyo3's PanicException, a BaseException: out of memory in a
        # Starlark heap is the one seen here. The process state is suspect afterwards: retire.
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise error
        self.retire = True
        if "memory" in str(error):
            return failures.out_of_memory(self.settings.memory_limit_bytes)
        return Failure(ACTION_RESOURCE_EXHAUSTED, f"the program stopped the Starlark interpreter: {error}")

    # --- host callables (called by Starlark; act for the innermost frame) -----------------------

    def _host_call(self, function: str, arguments_json: str) -> Any:
        frame = self.frames[-1]
        if frame.loading:
            self._record(frame, Failure(
                ACTION_FAILURE, f"{_call_name(function, arguments_json)} cannot be called while the program loads; call it inside run()"
            ))
        payload = arguments_json.encode()
        if len(payload) > self._max_payload_bytes:
            label = "the call to " + _call_name(function, arguments_json)
            self._record(frame, failures.payload_too_large(label, len(payload), self.settings.max_payload_bytes))
        channel = self.channel
        channel.send_encoded(_CALL_ENVELOPES[function], payload)
        reply = channel.receive()
        envelope = reply.envelope
        if envelope["t"] != "reply":  # a nested run first (a tool the host runs for this call)
            reply = self._await_reply(reply)
            envelope = reply.envelope
        if envelope["ok"]:
            return _result_for_starlark(reply.payload)
        self._record(frame, Failure.from_wire(envelope["failure"]))

    def _print(self, line: str) -> None:
        frame = self.frames[-1]
        if not frame.loading:  # a top level runs once per cached program: its prints would come and go
            frame.logs.add(line)

    def _fail(self, message: str, hint: Any) -> NoReturn:
        frame = self.frames[-1]
        self._record(frame, Failure(ACTION_FAILURE, message, None if hint is None else str(hint)))

    def _not_json(self, label: str, what: str) -> NoReturn:
        frame = self.frames[-1]
        if label == "the output":
            message = f"run() must return JSON values; the output contains {what}"
        else:
            message = f"{label} must pass JSON values; it contains {what}"
        hint = "use only dicts with string keys, lists, strings, numbers, booleans and None"
        self._record(frame, Failure(ACTION_FAILURE, message, hint))

    def _too_large(self, what: str, characters: int) -> NoReturn:
        # Counted in characters (or values) by Starlark: the UTF-8 size is at least that.
        frame = self.frames[-1]
        self._record(frame, failures.payload_too_large(what, characters, self.settings.max_payload_bytes, at_least=True))

    @staticmethod
    def _record(frame: Frame, failure: Failure) -> NoReturn:
        if frame.failure is None:
            frame.failure = failure
        raise RecordedFailure(failure.message)

    # --- process upkeep -----------------------------------------------------------------------

    def _arm_cpu_backstop(self, deadline: float) -> None:
        remaining = max(deadline - time.monotonic(), 0.0)
        self._backstop.arm(remaining + limits.CPU_BACKSTOP_SLACK_SECONDS)

    def _consider_retiring(self) -> None:
        # Reading /proc costs ~8 µs; the peak RSS (one cheap syscall) only grows when a run
        # allocated more than any before it, which is when the address space may have grown too.
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if peak_rss <= self._peak_rss_checked:
            return
        self._peak_rss_checked = peak_rss
        if limits.address_space_bytes() > self.settings.memory_limit_bytes * limits.RETIRE_ADDRESS_SPACE_SHARE:
            self.retire = True


@dataclass(frozen=True)
class _Problematic:
    """Why a program cannot run: as a compile problem and as a run failure; `deterministic` when
    loading it again would fail the same way (so the failure may be cached)."""

    problem: Problem
    failure: Failure
    deterministic: bool


def _result_for_starlark(payload: bytes | None) -> Any:
    """A host call's result as the prelude takes it: a dict's or a list's JSON text (a str) when Starlark's
    `json.decode` reads it as the exact value, a string's always (so a str is never taken for the value itself),
    else the value: a dict or list of n values costs starlark-pyo3 ~7k instructions a value, its text ~22k in all.

    json.decode differs from an exact read in two ways: it sorts every object's keys (a GraphQL answer keeps
    its selection's order), it refuses values nested 128 levels deep, and it may round a float otherwise (an integer beyond 64 bits it reads as a
    float; orjson reads those as floats too, so a value orjson read without a float has none)."""
    if payload is None:
        return None
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return decode_payload(payload)
    kind = type(value)
    if kind is str:
        return payload.decode()
    if kind is not dict and kind is not list:
        # A lone number, bool or None converts more cheaply than its text and a decode would.
        return decode_payload(payload) if kind is float else value
    # json.decode refuses 128 levels of nesting: a text of fewer than 256 bytes, or with fewer brackets than
    # that anywhere (strings' own included), is surely shallower.
    alike = len(payload) < 256 or payload.count(b"{") + payload.count(b"[") < MAX_JSON_DEPTH
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            if alike and len(item) > 1:
                keys = list(item)
                alike = keys == sorted(keys)
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is float:
            return decode_payload(payload)
    return payload.decode() if alike else value


def _call_name(function: str, arguments_json: str) -> str:
    """What a program called, as its errors name it: `graphql()`, `cel()`, `tools.<name>()`."""
    if function != "tool":
        return f"{function}()"
    try:
        name = orjson.loads(arguments_json)[0]
    except (orjson.JSONDecodeError, IndexError, KeyError, TypeError):
        name = None
    return f"tools.{name}()" if isinstance(name, str) else "a tool"


def _located(problem: Problem) -> str:
    return f"{problem.message} (line {problem.line})" if problem.line is not None else problem.message


# starlark-pyo3 converts every scalar crossing between Python and Starlark on its own: Python to Starlark, a
# string, a float or None through `json.dumps(value)`; Starlark to Python, its JSON text through
# `json.loads(text)` (containers it walks itself), each looked up on the json module at every conversion. Those
# two calls are mostly the json module's Python (~85 opcodes and two regular-expression matches a `loads`, ~40
# opcodes a `dumps`), one of each a host call and one a leaf of the event, so this process (the executor child
# alone: `main`) replaces them with functions that answer exactly what they answer, the same text, the same
# value, the same exception, doing the common cases in C and handing anything else to the originals.
_JSON_DUMPS = json.dumps
_JSON_LOADS = json.loads
_ENCODE_STRING = json.encoder.encode_basestring_ascii  # what json.dumps writes for a str (ensure_ascii)
_INFINITE = (float("inf"), float("-inf"))


def _json_dumps(obj: Any, *args: Any, **kwargs: Any) -> str:
    """`json.dumps`: a str, None or a finite float as `json.dumps(obj)` writes it (its default encoder's own
    string escaper; `float.__repr__`, as its float encoder), anything else (or any option) by `json.dumps`."""
    if not args and not kwargs:
        kind = type(obj)
        if kind is str:
            return _ENCODE_STRING(obj)
        if obj is None:
            return "null"
        if kind is float and obj == obj and obj not in _INFINITE:
            return float.__repr__(obj)
    return _JSON_DUMPS(obj, *args, **kwargs)


def _json_loads(s: Any, *args: Any, **kwargs: Any) -> Any:
    """`json.loads`: a str orjson reads without a float is orjson's value, which is then the standard library's
    (orjson reads a number beyond 64 bits as a float, and refuses NaN, Infinity, lone surrogates and deep
    nesting); anything else by `json.loads`, so its answer or its exception is the standard library's."""
    if not args and not kwargs and type(s) is str:
        try:
            value = orjson.loads(s)
        except orjson.JSONDecodeError:
            return _JSON_LOADS(s)
        if not holds_float(value):
            return value
    return _JSON_LOADS(s, *args, **kwargs)


def _convert_scalars_in_c() -> None:
    json.dumps = _json_dumps
    json.loads = _json_loads


def _take_over_stdio() -> Channel:
    """Move the wire off fds 0 and 1 so a stray write to stdout cannot corrupt it."""
    read_fd = os.dup(0)
    write_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    return Channel(read_fd, write_fd)


def main(argv: list[str]) -> None:
    settings = ExecutorSettings.from_dict(json.loads(argv[1]))
    limits.die_with_parent(int(argv[2]))
    channel = _take_over_stdio()
    # After the imports (they are not the program's to pay for), before any program.
    limits.apply_memory_limit(settings.memory_limit_bytes)
    _convert_scalars_in_c()
    executor = Executor(channel, settings)
    try:
        executor.serve()
    except ChannelClosed:
        pass  # the server closed the wire: nothing more to do
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
