"""A dry run leaves nothing behind, its session included (DESIGN 17)."""

from __future__ import annotations

import uuid

import psycopg

from test_sessions import INVOKE_WITH_SESSION, READ_SESSION, call, session_tool

DRY_RUN = {"Ledger-Dry-Run": "true"}


def _dry_call(api, action_id: str, text: str) -> dict:
    body = api.post(INVOKE_WITH_SESSION, {"id": action_id, "input": {"executionId": str(uuid.uuid4()),
                                                                     "input": {"text": text}}},
                    headers=DRY_RUN).json()
    assert "errors" not in body, body
    return body["data"]["actions"]["invokeAction"]


def test_a_dry_run_of_a_session_tool_leaves_no_session_for_the_next_real_call(api, db_url):
    action_id = session_tool(api)
    dry = _dry_call(api, action_id, "only a rehearsal")
    assert dry["status"] == "SUCCEEDED" and dry["sessionId"]
    assert api.gql(READ_SESSION, {"id": dry["sessionId"]})["actions"]["session"] is None
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    real = call(api, action_id, "for real")
    assert real["sessionId"] != dry["sessionId"]
    session = api.gql(READ_SESSION, {"id": real["sessionId"]})["actions"]["session"]
    assert session["input"] == {"text": "for real"}
    assert [i["input"] for i in session["inputs"]] == [{"text": "for real"}]


def test_a_dry_run_uses_the_open_session_without_changing_it(api):
    action_id = session_tool(api)
    real = call(api, action_id, "first")
    dry = _dry_call(api, action_id, "rehearsal")
    assert dry["sessionId"] == real["sessionId"]
    session = api.gql(READ_SESSION, {"id": real["sessionId"]})["actions"]["session"]
    assert session["input"] == {"text": "first"}
    assert [i["input"] for i in session["inputs"]] == [{"text": "first"}]
