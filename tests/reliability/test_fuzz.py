"""Bad input, fuzzed (see reliability/fuzz.py): a few dozen examples per target here; `make test-soak`
runs many more. Set LEDGER_FUZZ_EXAMPLES to change the count."""

from __future__ import annotations

import os

import pytest

from invoke_helpers import publish, tool
from reliability import fuzz, ops
from helpers import funded_account

EXAMPLES = int(os.environ.get("LEDGER_FUZZ_EXAMPLES", "40"))

TYPED = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 10}},
         "required": ["n"], "additionalProperties": False}


@pytest.fixture
def target(api, db_url):
    fuzzing = fuzz.Target(api, db_url)
    yield fuzzing
    fuzzing.close()


def test_fuzzed_create_transfer_never_500s_and_an_error_writes_nothing(api, target):
    opening, funded = funded_account(api, 1000)
    other_opening, euros = funded_account(api, 1000, "EUR")
    pairs = [(opening, funded), (funded, opening), (other_opening, euros), (euros, other_opening)]
    seen = fuzz.fuzz_create_transfer(target, pairs, EXAMPLES)
    print(f"\ncreateTransfer fuzz: {seen}")


def test_fuzzed_invoke_action_never_500s_fails_with_a_code_and_an_error_writes_nothing(api, target):
    opening, funded = funded_account(api, 1000)
    echo = publish(api, tool("echo", 'def run(event):\n    return {"echo": event["data"]}\n'))
    typed = publish(api, tool("typed", 'def run(event):\n    return event["data"]["n"] * 2\n', schema=TYPED,
                              output_schema={"type": "integer"}))
    # A tool that writes: its input decides the transfer (id, amount), so a bad one must write nothing.
    mover = publish(api, tool("mover", ops.TRANSFER_SRC.replace('d["source"]', f'"{opening}"')
                              .replace('d["target"]', f'"{funded}"'), schema={"type": "object"}))
    seen = fuzz.fuzz_invoke_action(target, [echo, typed, mover], EXAMPLES)
    print(f"\ninvokeAction fuzz: {seen}")
    target.money_adds_up()


def test_fuzzed_create_action_never_500s_and_an_error_writes_nothing(target):
    seen = fuzz.fuzz_create_action(target, EXAMPLES)
    print(f"\ncreateAction fuzz: {seen}")


def test_fuzzed_starlark_source_is_accepted_or_refused_with_a_line(target):
    seen = fuzz.fuzz_starlark_source(target, EXAMPLES)
    print(f"\nStarlark source fuzz: {seen}")
