"""Under a backlog the worker refills slots that free close together with one claim (each claim is a
commit), waits for that at most `claim_gather` seconds, and claims at once when nothing is waiting behind
it. The worker here is the real one, its claim a stand-in that hands out bare jobs and records what it was
asked for, its attempts stand-ins that end when the test says."""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from ledger.queue import worker as worker_module
from ledger.queue.worker import Worker

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


class _Queue:
    """The claim's stand-in: `backlog` rows queued; records each claim's batch."""

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.batches: list[int] = []
        self.claimed = threading.Condition()

    def claim(self, conn, worker, batch, lease_seconds, **_):
        rows = [{"tenant_id": uuid.uuid4(), "execution_id": uuid.uuid4(), "attempt": 1, "lease_token": uuid.uuid4(),
                 "run_at": NOW, "started": True, "triggers_version": None} for _ in range(min(batch, self.backlog))]
        self.backlog -= len(rows)
        with self.claimed:
            self.batches.append(batch)
            self.claimed.notify_all()
        return rows


@pytest.fixture
def rig(monkeypatch):
    """A worker of four slots, not started, whose attempts each run until `release(n)` ends n of them."""
    ends: dict[uuid.UUID, threading.Event] = {}

    def attempt(services, job):
        ends.setdefault(job.lease_token, threading.Event()).wait(30)
        return "succeeded"

    monkeypatch.setattr(worker_module, "run_attempt", attempt)
    workers: list[Worker] = []

    def make(backlog: int, claim_gather: float) -> tuple[Worker, _Queue]:
        queue = _Queue(backlog)
        monkeypatch.setattr(worker_module, "claim", queue.claim)
        w = Worker(SimpleNamespace(db=SimpleNamespace(dedicated_connection=lambda: None)), concurrency=4,
                   claim_gather=claim_gather)
        w._next_depth = float("inf")  # no queue-depth gauge read (there is no connection)
        workers.append(w)
        return w, queue

    def release(w: Worker, n: int) -> None:
        with w._lock:
            jobs = list(w._running.values())[:n]
        for job in jobs:
            ends.setdefault(job.lease_token, threading.Event()).set()
        for job in jobs:
            assert job.done.wait(10)

    yield make, release
    for event in list(ends.values()):
        event.set()
    for w in workers:
        w._stopping.set()
        w._pool.shutdown(wait=True)


def _claim_in_thread(w: Worker) -> threading.Thread:
    thread = threading.Thread(target=w._claim_and_dispatch, daemon=True)
    thread.start()
    return thread


def test_slots_that_free_one_after_the_other_under_a_backlog_are_refilled_by_one_claim(rig):
    make, release = rig
    w, queue = make(backlog=100, claim_gather=30.0)
    w._claim_and_dispatch()
    assert queue.batches == [4]
    release(w, 1)
    thread = _claim_in_thread(w)
    thread.join(0.3)
    assert thread.is_alive() and queue.batches == [4]  # one slot free: it waits for a second
    release(w, 1)
    thread.join(10)
    assert not thread.is_alive()
    assert queue.batches == [4, 2]
    assert len(w._running) == 4


def test_a_claim_waits_for_more_free_slots_no_longer_than_claim_gather(rig):
    make, release = rig
    w, queue = make(backlog=100, claim_gather=0.2)
    w._claim_and_dispatch()
    release(w, 1)
    began = time.monotonic()
    w._claim_and_dispatch()
    assert time.monotonic() - began >= 0.2
    assert queue.batches == [4, 1]


def test_a_worker_whose_last_claim_took_less_than_it_asked_claims_a_free_slot_at_once(rig):
    make, release = rig
    w, queue = make(backlog=3, claim_gather=30.0)
    w._claim_and_dispatch()
    assert queue.batches == [4] and len(w._running) == 3
    thread = _claim_in_thread(w)
    thread.join(10)
    assert not thread.is_alive()
    assert queue.batches == [4, 1]


def test_a_stop_ends_a_claims_wait_for_slots_and_claims_nothing(rig):
    make, release = rig
    w, queue = make(backlog=100, claim_gather=30.0)
    w._claim_and_dispatch()
    release(w, 1)
    thread = _claim_in_thread(w)
    thread.join(0.3)
    assert thread.is_alive()
    stopping = threading.Thread(target=w.stop, daemon=True)
    stopping.start()  # it then waits for the three attempts still running
    thread.join(10)
    assert not thread.is_alive()
    assert queue.batches == [4]
    release(w, 3)
    stopping.join(10)
    assert not stopping.is_alive()
