"""Not a test: an in-process profile of queued attempts (queue23's harness, not committed)."""
import cProfile, os, pstats, time, uuid

from invoke_helpers import publish, tool

NOOP = "def run(event):\n    return {}\n"


def _enqueue(api, services, action_id, n):
    from ledger.auth.clients import client_layer, load_principal
    from ledger.policy.chain import Chain
    from ledger.queue.start import start_action
    from ledger.scope import Scope
    claims = {"tenant": str(api.tenant_id), "sub": str(api.client_id), "iat": int(time.time())}
    deadline = time.monotonic() + 600
    with services.db.transaction(api.tenant_id, deadline=deadline) as conn:
        principal, policies = load_principal(conn, api.tenant_id, api.client_id, claims)
        scope = Scope(conn=conn, principal=principal, chain=Chain((client_layer(principal, policies),)),
                      services=services, deadline=deadline)
        for _ in range(n):
            start_action(scope, uuid.UUID(action_id), uuid.uuid4(), None, {}, None)


def _run(services, conn, batches, profile=None):
    from ledger.queue.attempts import run_attempt
    from ledger.queue.claims import Job, claim
    finished = []
    claim_cpu = attempt_cpu = 0.0
    count = 0
    for _ in range(batches):
        t = time.thread_time()
        if profile: profile.enable()
        rows = claim(conn, "prof", 4, 30.0, finished=finished, untriggered_first=True)
        if profile: profile.disable()
        claim_cpu += time.thread_time() - t
        finished = []
        for row in rows:
            job = Job(row["tenant_id"], row["execution_id"], row["attempt"], row["lease_token"], row["run_at"],
                      lease_seconds=30.0, started=row["started"])
            t = time.thread_time()
            if profile: profile.enable()
            outcome = run_attempt(services, job)
            if profile: profile.disable()
            attempt_cpu += time.thread_time() - t
            assert outcome == "succeeded", outcome
            finished.append(job.lease_token)
            count += 1
    return count, claim_cpu, attempt_cpu


def test_profile(api, services):
    action_id = publish(api, tool("noop", NOOP))
    n_warm, n = 40, int(os.environ.get("PROF_N", "800"))
    _enqueue(api, services, action_id, n_warm + n)
    conn = services.db.dedicated_connection()
    pool = services.executor_pool()
    _run(services, conn, n_warm // 4)
    profile = cProfile.Profile(time.thread_time) if os.environ.get("PROF_CPROFILE") else None
    count, claim_cpu, attempt_cpu = _run(services, conn, n // 4, profile)
    print(f"\n{count} attempts: claim {claim_cpu * 1e6 / count:.0f} us/exec, attempt {attempt_cpu * 1e6 / count:.0f} us/exec")
    if profile:
        profile.dump_stats("/tmp/queue23/prof.out")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(90); pstats.Stats(profile).sort_stats("tottime").print_stats(40)


def test_worker(api, services, monkeypatch):
    """A real Worker (concurrency 4) in this process over N executions: CPU per execution, this process and
    its sandboxes (as bench.env.cpu_seconds counts them), and optionally py-spy over it."""
    import subprocess
    from bench.env import cpu_seconds
    from ledger.queue.worker import Worker
    import collections
    import ledger.queue.worker as worker_mod
    sizes = collections.Counter()
    real_claim = worker_mod.claim
    def counting_claim(*a, **k):
        rows = real_claim(*a, **k)
        sizes[(a[2], len(rows))] += 1
        return rows
    monkeypatch.setattr(worker_mod, "claim", counting_claim)
    action_id = publish(api, tool("noop", NOOP))
    n = int(os.environ.get("PROF_N", "2000"))
    w = Worker(services, concurrency=4, lease_seconds=10.0, poll_interval=0.05).start()
    try:
        _enqueue(api, services, action_id, 40)
        _wait(services, api, 40)
        spy = None
        import resource
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        cpu0 = cpu_seconds([os.getpid()])
        t0 = time.perf_counter()
        te = time.thread_time()
        _enqueue(api, services, action_id, n)
        enqueue_cpu = time.thread_time() - te
        if os.environ.get("PROF_SPY"):
            spy = subprocess.Popen(["/work/queue23/.venv/bin/py-spy", "record", "-r", "250", "-o", "/tmp/queue23/spy.txt", "-f", "raw",
                                    "--threads", *(["--gil"] if os.environ.get("PROF_GIL") else []),
                                    "-p", str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(services, api, 40 + n)
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds([os.getpid()]) - cpu0 - enqueue_cpu
        if spy:
            import signal; spy.send_signal(signal.SIGINT); spy.wait()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        print(f"\nthis process: user {(r1.ru_utime - r0.ru_utime) * 1000 / n:.2f} ms, sys {(r1.ru_stime - r0.ru_stime) * 1000 / n:.2f} ms per execution (enqueue included), ctx switches vol {(r1.ru_nvcsw - r0.ru_nvcsw) / n:.1f} invol {(r1.ru_nivcsw - r0.ru_nivcsw) / n:.1f}")
        print("claims (free, claimed): count", sorted(sizes.items()))
        print(f"\n{n} executions in {elapsed:.2f} s ({n / elapsed:.0f}/s); CPU {cpu * 1000 / n:.2f} ms per execution")
    finally:
        w.stop()


def _wait(services, api, total):
    import psycopg
    with psycopg.connect(services.db.conninfo, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM executions WHERE tenant_id = %s AND status = 'SUCCEEDED'",
                           (api.tenant_id,)).fetchone()[0] < total:
            time.sleep(0.01)


def test_sections(api, services, monkeypatch):
    """thread_time per section of an attempt, without a profiler: sections wrapped by monkeypatch."""
    import collections, functools
    import ledger.queue.attempts as attempts
    import ledger.db.pool as dbpool
    from ledger.runtime import lease as lease_mod
    spent = collections.Counter()

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.thread_time() - t
        return wrapper
    monkeypatch.setattr(dbpool.Database, "_begin", timed("begin", dbpool.Database._begin))
    monkeypatch.setattr(dbpool.Database, "_give_back", timed("give_back", dbpool.Database._give_back))
    import psycopg
    monkeypatch.setattr(dbpool.Database, "_connection", timed("begin.getconn", dbpool.Database._connection))
    monkeypatch.setattr(psycopg.Cursor, "fetchone", timed("fetchone(all)", psycopg.Cursor.fetchone))
    monkeypatch.setattr(psycopg.Connection, "pipeline", timed("pipeline enter(all)", psycopg.Connection.pipeline))
    monkeypatch.setattr(psycopg.Pipeline, "__exit__", timed("pipeline exit(all)", psycopg.Pipeline.__exit__))
    monkeypatch.setattr(attempts, "_split_reads", timed("split_reads", attempts._split_reads))
    monkeypatch.setattr(attempts, "action_of_row", timed("action_of_row", attempts.action_of_row))
    monkeypatch.setattr(attempts, "_scope_for", timed("scope_for", attempts._scope_for))
    monkeypatch.setattr(attempts, "raise_execution_event", timed("finish.event", attempts.raise_execution_event))
    monkeypatch.setattr(attempts, "call_finished", timed("finish.call_finished", attempts.call_finished))
    monkeypatch.setattr(attempts, "record_json", timed("finish.record_json", attempts.record_json))
    monkeypatch.setattr(attempts, "json_size", timed("finish.json_size", attempts.json_size))
    monkeypatch.setattr(attempts, "held", timed("finish.held", attempts.held))
    monkeypatch.setattr(dbpool._DeadlineCursor, "execute", timed("execute(all, exc. pipeline)", dbpool._DeadlineCursor.execute))
    monkeypatch.setattr(attempts, "_finish", timed("finish", attempts._finish))
    monkeypatch.setattr(attempts, "run_call", timed("run_call", attempts.run_call))
    monkeypatch.setattr(lease_mod.ExecutorLease, "run", timed("lease.run", lease_mod.ExecutorLease.run))
    monkeypatch.setattr(psycopg_tx(), "__exit__", timed("tx_exit", psycopg_tx().__exit__))
    action_id = publish(api, tool("noop", NOOP))
    n = int(os.environ.get("PROF_N", "800"))
    _enqueue(api, services, action_id, 40 + n)
    conn = services.db.dedicated_connection()
    _run(services, conn, 10)
    spent.clear()
    count, claim_cpu, attempt_cpu = _run(services, conn, n // 4)
    print(f"\n{count} attempts: claim {claim_cpu * 1e6 / count:.0f} us/exec, attempt {attempt_cpu * 1e6 / count:.0f} us/exec")
    for name, s in spent.most_common():
        print(f"  {name}: {s * 1e6 / count:.0f} us")


def psycopg_tx():
    import psycopg
    return psycopg.Transaction


def test_claim_latency(api, services, db_url):
    """Wall time of one claim of one execution, the flush-waiting claim against the one without, alternating
    in blocks (run against a durable cluster: LEDGER_TEST_DATABASE_URL)."""
    import statistics
    action_id = publish(api, tool("noop", NOOP))
    n = int(os.environ.get("PROF_N", "1000"))
    _enqueue(api, services, action_id, 2 * n + 10)
    conn = services.db.dedicated_connection()
    import psycopg
    owner = psycopg.connect(db_url, autocommit=True)
    if os.environ.get("PROF_SQL"):
        owner.execute(open(os.environ["PROF_SQL"]).read())
    print("\nsynchronous_commit:", conn.execute("SHOW synchronous_commit").fetchone(), conn.execute("SHOW fsync").fetchone())
    sqls = {"waits for its flush": "SELECT * FROM ledger_claim_and_start(%s, %s, %s, %s, true)",
            "no flush wait": "SELECT * FROM ledger_claim_untriggered(%s, %s, %s, %s)"}
    times = {k: [] for k in sqls}
    finished = []
    for block in range(2 * n // 50):
        name = list(sqls)[block % 2]
        for _ in range(50):
            t = time.perf_counter()
            rows = conn.execute(sqls[name], ("w", 1, 30.0, finished)).fetchall()
            times[name].append(time.perf_counter() - t)
            assert len(rows) == 1
            # As its attempt would, once done: leased rows left behind would each cost the next claim a check.
            owner.execute("DELETE FROM execution_queue WHERE lease_token = %s", (rows[0]["lease_token"],))
            finished = [rows[0]["lease_token"]]
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts) * 1e6:.0f} us, mean {statistics.mean(ts) * 1e6:.0f} us, p90 {sorted(ts)[int(len(ts) * 0.9)] * 1e6:.0f} us")


def test_claim_plan(api, services, db_url):
    import psycopg
    action_id = publish(api, tool("noop", NOOP))
    _enqueue(api, services, action_id, 2000)
    with psycopg.connect(db_url, autocommit=True) as conn:
        if os.environ.get("PROF_INDEX"):
            conn.execute(os.environ["PROF_INDEX"])
            conn.execute("ANALYZE execution_queue")
        notes = []
        conn.add_notice_handler(lambda d: notes.append(d.message_primary))
        for s in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0", "SET auto_explain.log_nested_statements = on",
                  "SET auto_explain.log_analyze = on", "SET client_min_messages = log"):
            conn.execute(s)
        finished = []
        for i in range(30):
            notes.clear()
            rows = conn.execute("SELECT * FROM ledger_claim_untriggered('w', 1, 30, %s)", (finished,)).fetchall()
            conn.execute("DELETE FROM execution_queue WHERE lease_token = %s", (rows[0][3],))
            finished = [rows[0][3]]
        print("\n".join(l for n in notes[:6] for l in n.splitlines() if "Scan" in l or "Sort" in l or "duration" in l or "Join" in l or "Limit" in l))
        t = time.perf_counter()
        for i in range(200):
            rows = conn.execute("SELECT * FROM ledger_claim_untriggered('w', 1, 30, %s)", (finished,)).fetchall()
            conn.execute("DELETE FROM execution_queue WHERE tenant_id = %s AND execution_id = %s", (rows[0][0], rows[0][1]))
            finished = [rows[0][3]]
        print(f"claim + delete: {(time.perf_counter() - t) * 1e6 / 200:.0f} us wall each (auto_explain on)")
