"""The long versions of the reliability suite (see tests/reliability/): 60 s of mixed load on the
deployment shape, PostgreSQL outages and server kills repeated under that load, and the fuzzers and the
chain model with many more examples. Run with `make test-soak`; each test prints what it measured."""

from __future__ import annotations

import json
import os

import pytest

from reliability import fuzz
from reliability.deployment import unexpected_failures
from reliability.load import run_load

SOAK_SECONDS = float(os.environ.get("LEDGER_SOAK_SECONDS", "60"))
FUZZ_EXAMPLES = int(os.environ.get("LEDGER_SOAK_FUZZ_EXAMPLES", "1500"))


def test_sixty_seconds_of_mixed_traffic_keep_every_invariant(deployment):
    report = run_load(deployment, seconds=SOAK_SECONDS)
    print(f"\nsoak load ({SOAK_SECONDS:.0f} s):", json.dumps(report, indent=1))
    for worker in deployment.workers:
        assert unexpected_failures(worker) == []


# ---------------------------------------------------------------------------- faults, repeated


def test_faults_repeated(deployment):
    """The fault tests of tests/reliability/test_faults.py, three rounds each on one deployment."""
    from reliability import test_faults

    for round_ in range(3):
        print(f"\nround {round_ + 1}")
        test_faults.test_a_server_killed_during_a_burst_of_transfers_loses_nothing_acknowledged(
            test_faults.in_shape(deployment))
        test_faults.postgres_outage(test_faults.in_shape(deployment), outage_seconds=4.0 + 8 * round_)


# ---------------------------------------------------------------------------- the fuzzers and the chain


@pytest.fixture
def target(api, db_url):
    fuzzing = fuzz.Target(api, db_url)
    yield fuzzing
    fuzzing.close()


def test_fuzz_many_examples(api, target, monkeypatch):
    from helpers import funded_account
    from invoke_helpers import publish, tool
    from reliability import ops
    from reliability.test_fuzz import TYPED

    opening, funded = funded_account(api, 1000)
    other_opening, euros = funded_account(api, 1000, "EUR")
    pairs = [(opening, funded), (funded, opening), (other_opening, euros), (euros, other_opening)]
    print("\ncreateTransfer:", fuzz.fuzz_create_transfer(target, pairs, FUZZ_EXAMPLES))
    echo = publish(api, tool("echo", 'def run(event):\n    return {"echo": event["data"]}\n'))
    typed = publish(api, tool("typed", 'def run(event):\n    return event["data"]["n"] * 2\n', schema=TYPED,
                              output_schema={"type": "integer"}))
    mover = publish(api, tool("mover", ops.TRANSFER_SRC.replace('d["source"]', f'"{opening}"')
                              .replace('d["target"]', f'"{funded}"'), schema={"type": "object"}))
    print("invokeAction:", fuzz.fuzz_invoke_action(target, [echo, typed, mover], FUZZ_EXAMPLES))
    print("createAction:", fuzz.fuzz_create_action(target, FUZZ_EXAMPLES))
    print("Starlark source:", fuzz.fuzz_starlark_source(target, FUZZ_EXAMPLES))
    target.money_adds_up()


def test_chain_many_examples(api, monkeypatch):
    from reliability import test_security

    monkeypatch.setattr(test_security, "EXAMPLES", int(os.environ.get("LEDGER_SOAK_CHAIN_EXAMPLES", "500")))
    test_security.test_the_servers_chain_decides_as_the_model_for_random_policies(api)
