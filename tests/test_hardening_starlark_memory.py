"""Starlark keeps every value a call creates until the call returns (starlark-rust collects garbage only
between a module's top-level statements, never inside a function such as run()). A long loop that
builds values, even small ones, then exhausts the executor's memory bound: the failure must say so."""

import pytest

from invoke_helpers import invoke, publish, tool
from ledger.config import Settings

# Big integers are allocated on the heap (~85 bytes an addition, measured): 256 MiB is reached after
# about 2.5 million additions.
ADDITIONS = ('def run(event):\n'
             '    s = 1 << 40\n'
             '    for i in range(event["data"]["n"]):\n'
             '        s += i\n'
             '    return 1\n')


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    # A small memory bound makes exhausting it quick.
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10,
                    executor_memory_bytes=256 << 20)


def test_a_loop_of_many_additions_fails_with_a_message_that_says_starlark_keeps_every_value(api):
    adder = publish(api, tool("adder", ADDITIONS, timeout_ms=60_000))
    result = invoke(api, adder, {"n": 6_000_000})
    assert result["status"] == "FAILED"
    error = result["invocation"]["error"]
    assert error["code"] == "action_resource_exhausted"
    assert "256 MiB" in error["message"] and "heap" in error["message"]
    assert "keeps every value" in error["hint"] and "fewer iterations per call" in error["hint"]
    # The same loop, shorter, fits.
    assert invoke(api, adder, {"n": 100_000})["status"] == "SUCCEEDED"
