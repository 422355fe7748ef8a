"""A queued attempt's finish (queue/attempts.py `_finish`): the invocation's values go to the finish as their
JSON text (`storable_json`'s, what `record_json` gives the jsonb), so they are stored as a call's record
stores them: exactly, and a NUL character, which jsonb cannot hold, as U+FFFD."""

from __future__ import annotations

import psycopg

from invoke_helpers import publish, tool
from test_queue import start, wait_for

_INVOCATION = ("SELECT attempt, input, output, error, tools, logs, output_bytes, usage FROM invocations"
               " WHERE tenant_id = %s AND execution_id = %s ORDER BY attempt")

_PRINTS = '''def run(event):
    print("a \\x00 b")
    print(event["data"]["text"])
    return {"echo": event["data"], "max": 18446744073709551615, "min": -9223372036854775808, "f": 0.1}
'''


def _invocations(db_url: str, api, execution_id: str) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(_INVOCATION, (api.tenant_id, execution_id)).fetchall()


def test_an_attempt_records_its_output_exactly_and_a_printed_nul_as_u_fffd(api, worker, db_url):
    action_id = publish(api, tool("prints", _PRINTS))
    data = {"text": "é \u2028 \"q\" \\", "n": [1, {"b": None, "a": True}]}
    execution_id = start(api, action_id, data)["executionId"]
    assert wait_for(api, execution_id)["status"] == "SUCCEEDED"
    [(attempt, input, output, error, tools, logs, output_bytes, usage)] = _invocations(db_url, api, execution_id)
    assert (attempt, input, error, tools, usage) == (1, data, None, [], None)
    assert output == {"echo": data, "max": 18446744073709551615, "min": -9223372036854775808, "f": 0.1}
    assert logs == ["a \ufffd b", data["text"]]
    assert output_bytes > 0


def test_a_failed_attempt_records_its_error_and_the_tools_it_resolved_then_its_retry_records_its_own(api, worker,
                                                                                                    db_url):
    leaf = publish(api, tool("leaf", 'def run(event):\n    return {"leaf": True}\n'))
    doc = tool("calls_then_fails", 'def run(event):\n    tools.leaf({})\n    fail("no \\x00 luck")\n',
               tools=[{"name": "leaf"}])
    doc["execution"] = {"maxAttempts": 2, "backoffSeconds": 0.05}
    action_id = publish(api, doc)
    execution_id = start(api, action_id, {"k": 1})["executionId"]
    done = wait_for(api, execution_id)
    assert done["status"] == "FAILED" and done["attempts"] == 2
    rows = _invocations(db_url, api, execution_id)
    assert [row[0] for row in rows] == [1, 2]
    for attempt, input, output, error, tools, logs, _bytes, usage in rows:
        assert (input, output, logs, usage) == ({"k": 1}, None, [], None)
        assert error["code"] == "action_failure" and "no \ufffd luck" in error["message"]
        assert tools == [{"name": "leaf", "actionId": leaf, "actionVersion": 1}]
