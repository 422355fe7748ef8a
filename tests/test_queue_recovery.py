"""Recovery: a worker killed with SIGKILL mid-attempt loses its lease; another worker completes the
execution, and its writes appear exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from helpers import balance, funded_account
from invoke_helpers import publish, tool
from test_queue import read, start, wait_for

SLOW_TRANSFER = (
    'def run(event):\n'
    '    graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id,'
    ' input: {fromAccountId: $f, toAccountId: $t, amount: 7}) { id } } }""", variables={"id": event["data"]["id"],'
    ' "f": event["data"]["f"], "t": event["data"]["t"]})\n'
    # Spins in proportion to the flag account's balance: the test drains it before the retry.
    '    flag = graphql("""query($id: UUID!) { financial { account(id: $id) { balance } } }""",'
    ' variables={"id": event["data"]["flag"]})["financial"]["account"]["balance"]\n'
    '    n = 0\n'
    '    for i in range(flag * 1000000):\n'
    '        n += 1\n'
    '    return n\n'
)


def spawn_worker(db_url: str, tmp_path) -> subprocess.Popen:
    env = {**os.environ, "LEDGER_DATABASE_URL": db_url, "LEDGER_LEASE_SECONDS": "3",
           "LEDGER_DATA_DIR": str(tmp_path / "worker-data")}
    log = open(tmp_path / f"worker-{time.monotonic_ns()}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "ledger.cli", "worker", "--concurrency", "2"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def test_a_killed_workers_execution_is_completed_by_another_worker_exactly_once(api, db_url, tmp_path):
    from helpers import create_account, transfer

    opening, funded = funded_account(api, 0)
    flag = create_account(api, "flag")
    transfer(api, opening, flag, 500)
    action_id = publish(api, tool("slow_transfer", SLOW_TRANSFER, timeout_ms=120_000))
    first = spawn_worker(db_url, tmp_path)
    second = None
    try:
        execution_id = start(api, action_id, {"id": str(uuid.uuid4()), "f": opening, "t": funded,
                                              "flag": flag})["executionId"]
        wait_for(api, execution_id, statuses=("RUNNING",), timeout=30)
        time.sleep(0.5)  # well inside the attempt: the transfer is made, the loop is spinning
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert read(api, execution_id)["status"] == "RUNNING"
        assert balance(api, funded) == 0  # the killed attempt's write never committed
        transfer(api, flag, opening, 500)  # the retry will not spin
        second = spawn_worker(db_url, tmp_path)
        done = wait_for(api, execution_id, timeout=120)
        assert done["status"] == "SUCCEEDED", done
        # At least the killed attempt and the one that finished; a loaded machine may add retries of its
        # own (a lapsed lease rolls an attempt back), never a second transfer.
        assert done["attempts"] >= 2, done
        assert balance(api, funded) == 7
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
