"""The worker's untriggered claim runs on psycopg's prepared statement without a cursor once psycopg has
prepared it (queue/claims.py, db/prepared.py), and answers there the rows the cursor answered."""

from __future__ import annotations

from invoke_helpers import publish, tool
from ledger.queue.claims import claim
from test_queue import start

NOOP = "def run(event):\n    return {}\n"


def test_the_untriggered_claim_answers_on_the_prepared_statement_what_it_answered_through_the_cursor(api, services):
    action = publish(api, tool("noop", NOOP))
    started = {start(api, action)["executionId"] for _ in range(20)}
    conn = services.db.dedicated_connection()
    cursor_calls: list[str] = []
    through_cursor = conn.execute

    def counted(query, *args, **kwargs):
        cursor_calls.append(query)
        return through_cursor(query, *args, **kwargs)

    conn.execute = counted
    try:
        answers = []
        for _ in range(10):
            calls_before = len(cursor_calls)
            rows = claim(conn, "w", 2, 10.0, untriggered_first=True)
            answers.append((len(cursor_calls) > calls_before, rows))
    finally:
        conn.close()
    # Through the cursor until psycopg has prepared the statement (after its fifth run), then not.
    by_cursor = [through for through, _ in answers]
    assert by_cursor[0] and by_cursor == sorted(by_cursor, reverse=True) and by_cursor[-2:] == [False, False]
    shape = {key: type(value) for key, value in answers[0][1][0].items()}
    claimed = []
    for _, rows in answers:
        assert len(rows) == 2
        for row in rows:
            assert {key: type(value) for key, value in row.items()} == shape and list(row) == list(shape)
            assert (row["attempt"], row["started"], row["previous_status"], row["triggers_version"]) == (
                1, True, "QUEUED", None)
            claimed.append(str(row["execution_id"]))
    assert sorted(claimed) == sorted(started)


def test_the_claim_drops_the_finished_leases_it_is_given_and_keeps_the_others(api, services, db_url):
    import psycopg

    action = publish(api, tool("noop", NOOP))
    for _ in range(3):
        start(api, action)
    conn = services.db.dedicated_connection()
    try:
        first = claim(conn, "w", 3, 10.0, untriggered_first=True)
        finished = [first[0]["lease_token"], first[1]["lease_token"]]
        assert claim(conn, "w", 0, 10.0, finished=finished, untriggered_first=True) == []
    finally:
        conn.close()
    with psycopg.connect(db_url) as admin:
        leases = {row[0] for row in admin.execute("SELECT lease_token FROM execution_leases")}
    assert leases == {first[2]["lease_token"]}
