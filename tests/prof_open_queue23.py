"""Not a test: microbenchmarks of an attempt's opening (queue23's, not committed)."""
import time, uuid
import psycopg


def _bench(label, fn, n=3000):
    for _ in range(200):
        fn()
    best = []
    for _ in range(3):
        t = time.thread_time()
        for _ in range(n):
            fn()
        best.append((time.thread_time() - t) * 1e6 / n)
    print(f"{label}: {min(best):.1f} us (runs {', '.join(f'{b:.0f}' for b in best)})")


def test_open(services, api):
    from ledger.queue.attempts import _ATTEMPT_READ
    conn = services.db.pool.getconn()
    tid, eid = api.tenant_id, uuid.uuid4()
    conn.execute("""CREATE FUNCTION pg_temp.f(t text, s text) RETURNS TABLE(a text, b text)
        LANGUAGE sql AS $$ SELECT set_config('ledger.tenant_id', t, true), set_config('statement_timeout', s, true) $$""")

    def pipeline_open():
        with conn.pipeline():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT set_config('ledger.tenant_id', %s, true), set_config('statement_timeout', %s, true)",
                         (str(tid), "30000"))
            cur = conn.execute(_ATTEMPT_READ, (tid, eid))
        cur.fetchone()
        conn.execute("ROLLBACK")

    simple_read = _ATTEMPT_READ.replace("%s", "'{}'")
    def simple_open():
        cur = conn.execute(("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT set_config('ledger.tenant_id', '%s', true),"
                            " set_config('statement_timeout', '30000', true); " % tid) + simple_read.format(tid, eid))
        cur.nextset(); cur.nextset()
        cur.fetchone()
        conn.execute("ROLLBACK")

    def simple_rollback_only():
        conn.execute("BEGIN")
        conn.execute("ROLLBACK")

    def single_params():
        cur = conn.execute(_ATTEMPT_READ, (tid, eid))
        cur.fetchone()

    def single_simple():
        cur = conn.execute(simple_read.format(tid, eid))
        cur.fetchone()

    _bench("pipeline BEGIN+tenant+read, ROLLBACK", pipeline_open)
    _bench("simple BEGIN;tenant;read, ROLLBACK", simple_open)
    _bench("BEGIN, ROLLBACK", simple_rollback_only)
    _bench("read alone, params", single_params)
    _bench("read alone, simple", single_simple)
    conn.execute("ROLLBACK") if conn.info.transaction_status else None
    services.db.pool.putconn(conn)
