"""The MCP route's shortcuts against the general steps they stand for: the executionId's text read without
`uuid.UUID`'s steps, the metrics counted and observed on prometheus-client's child state, the actions a
server references read ahead in fewer columns, and the call's layered scope handed to invoke_action. Each
must give what the general step gives, and fall back to it where its shortcut does not apply."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from types import SimpleNamespace

import psycopg
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from psycopg.rows import dict_row

from helpers import json_read_outcome
from mcp_helpers import EVERYTHING, create_server, reference
from mcp_helpers import examples, settings  # noqa: F401  (fixtures)

from ledger.actions import mcp_servers
from ledger.actions.mcp_servers import McpServer, server_and_tools_by_name_query, server_and_tools_of_row, server_layer
from ledger.actions.registry import action_of_row, action_statement
from ledger.api.mcp import telemetry
from ledger.api.mcp.calls import Caller, McpCalls
from ledger.api.mcp.tools import uuid_of_text
from ledger.policy.chain import Chain, Layer
from ledger.policy.principal import Principal

UUID_TEXTS = [
    "6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e", "6F1C1D64-7D1E-4D7F-9B1C-1D2A3B4C5D6E", "6f1c1d647d1e4d7f9b1c1d2a3b4c5d6e",
    "6f1c-1d64-7d1e-4d7f-9b1c-1d2a-3b4c-5d6e", "{6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e}",
    "urn:uuid:6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e", "uuid:6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e",
    "+f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e", " f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e",
    "0x1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e", "6f1c_d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e",
    "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6", "6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6eff", "g" * 32, "-" + "f" * 31,
    "", "not a uuid", "٦" * 32,
]


def _general(text: str) -> tuple[str, object]:
    try:
        made = uuid.UUID(text)
    except ValueError as exc:
        return "error", str(exc)
    return "uuid", (made, made.int, str(made), made.is_safe)


@pytest.mark.parametrize("text", UUID_TEXTS)
def test_a_uuid_text_of_an_execution_id_or_a_reference_reads_as_uuid_reads_it(text):
    try:
        made = uuid_of_text(text)
    except ValueError as exc:
        assert _general(text) == ("error", str(exc))
    else:
        assert _general(text) == ("uuid", (made, made.int, str(made), made.is_safe))


def _families(registry: CollectorRegistry) -> tuple[Counter, Histogram]:
    return (Counter("calls_total", "calls", ["method"], registry=registry),
            Histogram("seconds", "seconds", ["method"], buckets=(0.001, 0.01, 0.1, 1, 10), registry=registry))


def _samples(registry: CollectorRegistry) -> list:
    return sorted((s.name, tuple(sorted(s.labels.items())), repr(s.value)) for family in registry.collect()
                  for s in family.samples if not s.name.endswith("_created"))  # repr: NaN equals itself


AMOUNTS = [0, 0.0005, 0.001, 0.0010001, 0.05, 1, 9.99, 10, 11, 1e9, float("inf"), float("nan"), -1, 3]


def test_a_count_and_an_observation_on_the_childs_state_are_prometheus_clients_own():
    general, direct = CollectorRegistry(), CollectorRegistry()
    (general_count, general_seconds), (direct_count, direct_seconds) = _families(general), _families(direct)
    for amount in AMOUNTS:
        general_count.labels("tools/call").inc()
        general_seconds.labels("tools/call").observe(amount)
        telemetry._count(direct_count.labels("tools/call"))
        telemetry._observe(direct_seconds.labels("tools/call"), amount)
    assert _samples(direct) == _samples(general)


def test_a_metric_child_without_prometheus_clients_state_is_counted_and_observed_by_its_methods():
    seen: list = []
    child = SimpleNamespace(inc=lambda: seen.append("inc"), observe=lambda amount: seen.append(amount))
    telemetry._count(child)
    telemetry._observe(child, 0.5)
    assert seen == ["inc", 0.5]


def test_the_server_and_its_actions_read_ahead_are_the_row_and_the_records_read_alone(examples, db_url):
    create_server(examples, "desk", [reference("get_account_activity"), reference("transfer", version=1)],
                  EVERYTHING, instructions="Zoë ✓ 𝄞 \u2028")
    with psycopg.connect(db_url, row_factory=dict_row) as conn:  # as the owner: the same rows in one snapshot
        tenant_id = conn.execute("SELECT tenant_id FROM mcp_servers WHERE name = 'desk'").fetchone()["tenant_id"]
        row = conn.execute(*server_and_tools_by_name_query(tenant_id, "desk")).fetchone()
        server, preloaded = server_and_tools_of_row(row)
        alone = conn.execute(mcp_servers._BY_NAME, (tenant_id, "desk")).fetchone()
        assert list(server.items()) == list(alone.items())  # the JSON columns' values, and the keys' order
        assert len(preloaded) == 2
        scope = SimpleNamespace(tenant_id=tenant_id)
        for (action_id, version), found in preloaded.items():
            loaded = action_of_row(conn.execute(*action_statement(scope, action_id, version)).fetchone())
            assert action_of_row(found) == loaded


def test_a_calls_listing_scope_is_its_scope_with_the_servers_layer_added(services):
    principal = Principal(uuid.uuid4(), uuid.uuid4(), "desk-client")
    server = McpServer(uuid.uuid4(), "desk", None, None, (), EVERYTHING, True, None)
    client = Layer("client", ())
    caller = Caller(principal, [], server, 1e9, opened=None, layer=client)  # type: ignore[arg-type]
    calls, state = McpCalls(services), {}
    scope = calls._scope(None, caller, 7, Chain((client,)), dry_run=True, request_state=state)
    listing = calls._scope(None, caller, 7, Chain((client, server_layer(server))), dry_run=True, request_state=state)
    assert listing == replace(scope, chain=scope.chain.extended(server_layer(server)))
    assert listing.request_state is scope.request_state


BODIES = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"n":5}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}', b'{"a":1.5,"b":-0.0,"c":1e300,"d":0.1}',
    b'{"a":18446744073709551616123}', b'{"a":-9223372036854775809}', b'{"a":9223372036854775807}', b'{"a":-0}',
    b'{"a":1E5}', b'{"a":1e-400}', b'{"a":"\\u00e9\\/"}', '{"a":"Zoë ✓ 𝄞 \u2028"}'.encode(), b'{"a":1,"a":2}',
    b'{"a":NaN}', b'{"a":"\\ud800"}', b'\xef\xbb\xbf{"a":1}', b'[' * 2000 + b']' * 2000, b'{"a":', b'', b'"text"',
    b'[1,2.0,true,false,null,{}]', '{"a":"\x7f"}'.encode(),
]


@pytest.mark.parametrize("body", BODIES)
def test_a_request_body_reads_as_load_json_reads_it(body):
    from ledger.api.json_codec import load_json
    from ledger.api.mcp.exchange import read_body_json

    assert json_read_outcome(read_body_json, body) == json_read_outcome(load_json, body)


def test_a_compact_body_is_read_by_orjson_alone(monkeypatch):
    from ledger.api.mcp import exchange

    monkeypatch.setattr(exchange, "load_json", lambda body: pytest.fail("read by load_json"))
    assert exchange.read_body_json(BODIES[0]) == json.loads(BODIES[0])


