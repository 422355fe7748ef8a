"""A server process that starts while PostgreSQL is down waits for it (ledger/db/startup.py), on the
deployment shape: the supervisor's replacement of a killed process boots during an outage, connects once
PostgreSQL is back, and serves, instead of exiting and being replaced again and again."""

from __future__ import annotations

import os
import signal
import time

from reliability.deployment import wait_until
from reliability.test_faults import in_shape

OUTAGE_SECONDS = 8.0


def test_a_server_process_replaced_during_a_postgres_outage_waits_for_it_and_then_serves(deployment):
    shape = in_shape(deployment)
    victim = sorted(shape.server_pids())[0]
    os.kill(victim, signal.SIGKILL)
    down_at = time.monotonic()
    shape.cluster.stop("immediate", wait_for_users=0)
    wait_until(lambda: len(shape.server_pids()) == 2 and victim not in shape.server_pids(), 30,
               "the killed server process to be replaced")
    replaced = sorted(shape.server_pids())
    # Longer than a replacement takes to import and reach its first connection here.
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
    assert sorted(shape.server_pids()) == replaced, "a server process exited during the outage"
    shape.cluster.start()

    wait_until(lambda: shape.healthz() == 200, 40, "the servers to answer after the outage")
    # Both processes serve: requests on fresh connections (the kernel spreads them over both) succeed.
    for _ in range(8):
        assert shape.healthz() == 200
    assert sorted(shape.server_pids()) == replaced, "the replacement was itself replaced"
