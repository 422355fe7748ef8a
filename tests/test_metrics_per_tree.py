"""A tree's calls counted and observed in one pass (metrics.calls_finished): the same counts, buckets and
sums as each call observed on its own (metrics.call_finished), and the same log lines."""

from __future__ import annotations

import logging
import math
import random
import uuid
from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from ledger import metrics

# The call latency buckets (the last bound, +Inf, is every histogram's own).
_BOUNDS = tuple(metrics.CALL_SECONDS._upper_bounds[:-1])


@dataclass
class _Call:
    execution_id: uuid.UUID
    root_execution_id: uuid.UUID
    parent_execution_id: uuid.UUID | None
    action_name: str | None
    action_kind: str | None
    action_version: int
    status: str
    error: dict | None
    duration_ms: float | None
    output_bytes: int | None
    attempt: int
    depth: int

    def result_bytes(self) -> int | None:
        return self.output_bytes


def _calls(rng: random.Random, count: int) -> list[_Call]:
    root = uuid.uuid4()
    calls = []
    for index in range(count):
        failed = rng.random() < 0.3
        calls.append(_Call(
            execution_id=root if index == 0 else uuid.uuid4(), root_execution_id=root,
            parent_execution_id=None if index == 0 else root,
            action_name=rng.choice(["graphql", "cel", "a tool", None]),
            action_kind=rng.choice(["graphql", "cel", "tool", "agent", None]), action_version=1,
            status="FAILED" if failed else "SUCCEEDED",
            error=({"code": rng.choice(["cel_error", "", None])} if failed else None),
            duration_ms=rng.choice([None, -1.0, 0.0, 1.0, 2.5, 300_000.0, 10**9, rng.random() * 50]),
            output_bytes=rng.choice([None, -1, 0, 16, 17, 1 << 20, rng.randrange(10**8)]),
            attempt=1, depth=0 if index == 0 else 1))
    return calls


def _families() -> dict:
    """Every sample of the calls' families: {(name, labels): value}."""
    wanted = {"ledger_calls", "ledger_call_duration_seconds", "ledger_call_output_bytes", "ledger_calls_per_tree"}
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in REGISTRY.collect() if family.name in wanted for sample in family.samples
            if not sample.name.endswith("_created")}


def _change(before: dict, after: dict) -> dict:
    return {key: value - before.get(key, 0) for key, value in after.items() if value != before.get(key, 0)}


def _same(one: dict, other: dict) -> None:
    assert one.keys() == other.keys()
    for key, value in one.items():
        if key[0].endswith("_sum"):  # float sums added in another order
            assert math.isclose(value, other[key], rel_tol=1e-9, abs_tol=1e-9), key
        else:
            assert value == other[key], key


@pytest.mark.parametrize("per_action", [False, True], ids=["no-action-label", "per-action"])
def test_a_trees_calls_change_the_metrics_as_each_call_observed_alone(per_action, monkeypatch):
    monkeypatch.setattr(metrics, "_per_action", per_action)
    calls = _calls(random.Random(25), 400)
    before = _families()
    metrics.calls_finished("t", calls)
    one_pass = _change(before, _families())
    before = _families()
    for call in calls:
        metrics.call_finished("t", execution_id=call.execution_id, root_execution_id=call.root_execution_id,
                              action=call.action_name, action_version=call.action_version, status=call.status,
                              error=call.error, duration_ms=call.duration_ms, output_bytes=call.result_bytes(),
                              attempt=call.attempt, depth=call.depth, kind=call.action_kind)
    metrics.observe_tree(len(calls))
    _same(one_pass, _change(before, _families()))


def test_observing_values_together_fills_the_buckets_observing_each_fills():
    values = [0.0, 0.001, 0.0010001, 0.0025, 299.9, 300.0, 300.5, 1e12, -3.0, 0.5] * 3
    registry = CollectorRegistry()
    together = Histogram("together", "t", buckets=_BOUNDS, registry=registry)
    alone = Histogram("alone", "a", buckets=_BOUNDS, registry=registry)
    metrics._observe_all(together, values)
    for value in values:
        alone.observe(value)
    samples = {family.name: {(s.name.split("_", 1)[1], tuple(s.labels.items())): s.value for s in family.samples
                             if not s.name.endswith("_created")} for family in registry.collect()}
    _same(samples["together"], samples["alone"])


def test_a_histogram_without_prometheus_clients_state_observes_each_value():
    class Plain:
        def __init__(self) -> None:
            self.seen: list = []

        def observe(self, value) -> None:
            self.seen.append(value)

    plain = Plain()
    metrics._observe_all(plain, [1.0, 2.0])
    assert plain.seen == [1.0, 2.0]


def test_a_trees_calls_log_the_lines_each_call_logs(caplog):
    calls = _calls(random.Random(3), 30)
    with caplog.at_level(logging.DEBUG, logger="ledger.calls"):
        metrics.calls_finished("t", calls)
        one_pass = [(r.levelno, r.getMessage(), r.executionId, r.code, r.durationMs, r.outputBytes)
                    for r in caplog.records]
        caplog.clear()
        for call in calls:
            metrics.call_finished("t", execution_id=call.execution_id, root_execution_id=call.root_execution_id,
                                  action=call.action_name, action_version=call.action_version, status=call.status,
                                  error=call.error, duration_ms=call.duration_ms, output_bytes=call.result_bytes(),
                                  attempt=call.attempt, depth=call.depth, kind=call.action_kind)
        alone = [(r.levelno, r.getMessage(), r.executionId, r.code, r.durationMs, r.outputBytes)
                 for r in caplog.records]
    assert len(one_pass) == 30 and one_pass == alone
