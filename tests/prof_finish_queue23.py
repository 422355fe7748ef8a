"""Not a test: the finish's client cost, 17 parameters against one JSON document (queue23's, not committed)."""
import datetime, json, time, uuid
from psycopg.types.json import Jsonb
from prof_open_queue23 import _bench


def test_finish_params(services, api):
    conn = services.db.pool.getconn()
    conn.execute("""CREATE FUNCTION pg_temp.f17(a uuid, b uuid, c uuid, d integer, e jsonb, f jsonb, g jsonb, h jsonb,
        i jsonb, j timestamptz, k timestamptz, l double precision, m integer, n jsonb, o text, p double precision, q uuid)
        RETURNS TABLE (x uuid, y boolean, z boolean) LANGUAGE sql AS $$ SELECT a, false, false $$""")
    conn.execute("""CREATE FUNCTION pg_temp.f1(d jsonb) RETURNS TABLE (x uuid, y boolean, z boolean)
        LANGUAGE sql AS $$ SELECT (d->>'tenant')::uuid, false, false $$""")
    t, e, l, a = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    now = datetime.datetime.now(datetime.timezone.utc)
    def rj(v):
        return Jsonb(v)
    def seventeen():
        conn.execute("SELECT * FROM pg_temp.f17(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                     (t, e, l, 1, rj({}), rj({}), None, rj([]), rj([]), now, now, 1.5, 2, None, "SUCCEEDED", None, a)).fetchone()
    def one():
        doc = json.dumps({"tenant": str(t), "execution": str(e), "lease": str(l), "attempt": 1, "input": [{}],
                          "output": [{}], "error": None, "tools": [[]], "logs": [[]], "started_at": now.isoformat(),
                          "finished_at": now.isoformat(), "duration_ms": 1.5, "output_bytes": 2, "usage": None,
                          "status": "SUCCEEDED", "retry_in": None, "action": str(a)})
        conn.execute("SELECT * FROM pg_temp.f1(%s::jsonb)", (doc,)).fetchone()
    _bench("17 parameters", seventeen)
    _bench("one JSON document", one)
    services.db.pool.putconn(conn)
