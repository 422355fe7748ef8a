"""`make bench`: the ledger side by side with pgbench, PostGraphile 4 and graphile-worker, in one run,
on one throwaway PostgreSQL cluster with default durability (fsync and synchronous_commit on).

    python -m bench.run [--seconds 10] [--rounds 3] [--paired-rounds N --paired-seconds S] [--smoke]
                        [--peers all|pgbench|none] [--only money,triggers,...] [--baseline REV] [--no-readme]

`--smoke` is the quick run `make test` does (each ledger workload for about a second, no anchors), so
that the harness cannot rot. Results go to bench/results.json and bench/results.md, and (unless
--no-readme or --smoke) into README.md between the bench markers.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import loadgen, peers, report, workloads
from .env import (ROOT, Cluster, DurableCommits, RoundTrips, Server, Statements, Workers, export_revision, settings_text,
                  wait_until_quiet)
from .fixtures import STATUS_CONDITION, STATUS_EVENTS, add_triggers, delete_triggers, populate, prepare_database

# Issue 18's goals, each measured in one run, side by side.
MONEY_GOAL = 0.25  # the money-moving call, x pgbench tpcb-like TPS
PEER_MONEY_GOAL = 1.0  # the same transfer as a PostGraphile 4 custom mutation (PL/pgSQL, the same RLS)
READ_GOAL = 1.5  # x PostGraphile 4's read
TREE_GOAL = 4.0  # a call tree of 1,000 graphql() reads, at most this many times the psycopg floor
QUEUE_GOAL = 0.5  # x graphile-worker
MONEY_ROUNDTRIPS_GOAL, QUEUE_ROUNDTRIPS_GOAL, QUEUE_COMMITS_GOAL = 8, 10, 2
POLICY_P99_US = 50.0
MCP_GOAL = 0.8
# The money-moving call with 10 triggers on other types, against the same call with none: at most 5% slower.
TRIGGERS_GOAL, OTHER_TRIGGERS = 0.95, 10
# What --only can name (the rows that run; the others are left out of the table).
ROW_GROUPS = ("money", "triggers", "read", "mcp", "tree", "agent", "queue", "policy")
LEDGER_WORKERS, WORKER_CONCURRENCY = 2, 4


def machine() -> dict:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "model": model}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _anchor(name: str, fn, errors: dict):
    try:
        return fn()
    except peers.NotMeasured as exc:
        errors[name] = str(exc)
        log(f"{name}: not measured: {exc}")
    except Exception as exc:  # noqa: BLE001 - an anchor failing must not lose the ledger's numbers
        errors[name] = f"{type(exc).__name__}: {exc}"
        log(f"{name}: failed: {exc}")
        traceback.print_exc()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds of each throughput run")
    parser.add_argument("--smoke", action="store_true", help="about a second per ledger workload, no anchors")
    parser.add_argument("--peers", choices=("all", "pgbench", "none"), default="all")
    parser.add_argument("--loadgen", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--queue-jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the throughput rows with their"
                        " anchors (medians are reported)")
    parser.add_argument("--paired-rounds", type=int, help="rounds of the paired rows (money with its anchors,"
                        " triggers, MCP), default --rounds; with --paired-seconds, more and shorter rounds")
    parser.add_argument("--paired-seconds", type=float, help="measured seconds of each side of a paired round"
                        " (default --seconds)")
    parser.add_argument("--only", help="comma-separated rows to run, of " + ", ".join(ROW_GROUPS)
                        + " (default: all)")
    parser.add_argument("--out", help="where results.json and results.md go (default: bench/; a temporary"
                        " directory with --smoke)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--baseline", metavar="REV", help="also run the ledger rows on the code of git revision REV"
                        " (before/after in one run, on the same cluster and anchors)")
    args = parser.parse_args(argv)
    only = set(ROW_GROUPS) if not args.only else {name.strip() for name in args.only.split(",") if name.strip()}
    if only - set(ROW_GROUPS):
        parser.error(f"--only: no row {', '.join(sorted(only - set(ROW_GROUPS)))} (rows: {', '.join(ROW_GROUPS)})")
    if args.smoke:
        args.seconds, args.peers, args.queue_jobs, args.no_readme = 1.0, "none", 20, True
        args.paired_rounds = args.paired_seconds = None
    if args.only:
        args.no_readme = True  # a partial table never replaces the README's
    warmup = 0.0 if args.smoke else 2.0
    rounds = 1 if args.smoke else max(1, args.rounds)
    paired_rounds = max(1, args.paired_rounds or rounds)
    paired_seconds = args.paired_seconds or args.seconds
    repeats = 1 if args.smoke else 5
    tree_reads = 100 if args.smoke else 1000
    loadgen_used = args.loadgen if args.loadgen != "auto" else ("wrk" if loadgen.wrk_available() else "python")

    workdir = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    results: dict = {"date": datetime.date.today().isoformat(), "machine": machine(), "loadgen": loadgen_used,
                     "seconds": args.seconds, "rounds": rounds, "paired_rounds": paired_rounds,
                     "paired_seconds": paired_seconds, "smoke": args.smoke, "only": sorted(only), "rows": {}}
    errors: dict[str, str] = {}
    variants: list[tuple[str, Path | None]] = [("current", None)]
    if args.baseline:
        base = export_revision(args.baseline, workdir / "baseline")
        variants.insert(0, (f"baseline {args.baseline}", base))
    log(f"logs in {workdir}; starting a throwaway PostgreSQL cluster (default durability)")
    cluster = Cluster()
    running: list = []
    try:
        results["postgres"] = settings_text(cluster)
        ledger_url = cluster.create_database("ledger")
        tenant_id, client_id, token, secret = prepare_database(ledger_url)
        stats = Statements(cluster, "ledger")
        commits = DurableCommits(cluster, "ledger")
        rt = RoundTrips(workdir)
        server = Server(ledger_url, workdir, workers=1)
        running.append(server)
        fx = populate(ledger_url, server.url, tenant_id, client_id, token, secret,
                      accounts=20 if args.smoke else 200)
        server.stop()
        running.remove(server)
        if args.peers != "none" and only & {"money", "read"}:
            log("pgbench -i")
            _anchor("pgbench", lambda: peers.pgbench_init(cluster), errors)

        # PostGraphile is started before the ledger's rows and measured right beside the ledger's money call
        # (the same transfer, as a custom mutation) and read.
        postgraphile = None
        if args.peers == "all" and only & {"money", "read"}:
            log("PostGraphile 4: starting (as a role subject to RLS)")

            def start_postgraphile():
                started = peers.PostGraphile(cluster, "ledger", secret, workdir)
                running.append(started)
                check_postgraphile(started, fx)
                return started

            postgraphile = _anchor("postgraphile", start_postgraphile, errors)

        def postgraphile_read():
            spec = {"url": postgraphile.url, "token": token, "kind": "static",
                    "body": postgraphile.body(tenant_id, fx.accounts[0])}
            loadgen.run(spec, 4, warmup or 1, loadgen=args.loadgen)
            stats.reset()
            cpu = postgraphile.cpu()
            out = loadgen.run(spec, 4, args.seconds, loadgen=args.loadgen)
            cpu = postgraphile.cpu() - cpu
            out["statements_per_call"] = round(stats.count(peers.POSTGRAPHILE_ROLE) / out["requests"], 1)
            out["server_cpu_ms_per_call"] = round(cpu * 1000 / out["requests"], 2) if out["requests"] else None
            return out

        def postgraphile_transfer(first: bool):
            spec = {"url": postgraphile.url, "token": token, "kind": "template",
                    "body": postgraphile.transfer_template(), "accounts": fx.accounts}
            if first:
                loadgen.run(spec, 4, warmup or 1, loadgen=args.loadgen)
            count_sql = "SELECT count(*) FROM transfers WHERE tenant_id = %s"
            before = workloads._count_rows(ledger_url, count_sql, (tenant_id,))
            stats.reset()
            cpu = postgraphile.cpu()
            out = loadgen.run(spec, 4, paired_seconds, loadgen=args.loadgen)
            cpu = postgraphile.cpu() - cpu
            transfers = workloads._count_rows(ledger_url, count_sql, (tenant_id,)) - before
            out["server_cpu_ms_per_call"] = round(cpu * 1000 / transfers, 2) if transfers else None
            out["transfers"] = transfers
            out["calls_per_s"] = round(transfers / out["seconds"], 1) if out["seconds"] else 0.0
            # pg_stat_statements tracks all: the function's own statements are counted besides its call.
            out["statements_per_call"] = (round(stats.count(peers.POSTGRAPHILE_ROLE) / transfers, 1)
                                          if transfers else None)
            out["top_statements"] = stats.top(peers.POSTGRAPHILE_ROLE)
            if out["errors"]:
                raise RuntimeError(f"PostGraphile's transfer answered {out['errors']} errors")
            return out

        def queue_with_trigger(workers, code_root) -> dict:
            def define(change):
                admin = Server(ledger_url, workdir, workers=1, code_root=code_root)
                try:
                    return change(admin.url)
                finally:
                    admin.stop()

            defined = define(lambda url: add_triggers(url, token, fx.noop_tool, 1, STATUS_EVENTS, STATUS_CONDITION,
                                                      name="bench_status"))
            try:
                return workloads.queue(fx, workers, stats, rt, jobs=args.queue_jobs, commits=commits,
                                       postgres_cpu=cluster.cpu)
            finally:
                define(lambda url: delete_triggers(url, token, defined))

        def pgbench_ok() -> bool:
            return args.peers != "none" and "pgbench" not in errors

        # Each anchor runs right after the ledger's workload it anchors, in alternating rounds (the machine
        # is shared: what matters is that both sides of a ratio see the same moment); medians are reported,
        # and for the paired rows the median of the per-round ratios too.
        measured: dict[str, dict] = {}
        anchors: dict[str, list] = {"tpcb": [], "select_only": [], "postgraphile": [], "postgraphile_transfer": []}
        pairs: dict[str, list] = {"tpcb": [], "postgraphile_transfer": [], "postgraphile": [], "select_only": []}
        # The agent row's scripted model (a baseline revision from before agents ignores the models file).
        agent_script = workdir / "agent-script.json"
        agent_script.write_text("[]")
        models = workdir / "models.toml"
        models.write_text('[bench]\ntype = "scripted"\nscript = "agent-script.json"\n')
        for name, code_root in variants:
            anchored = name == "current"
            m: dict = {"pairs": {}}
            if only & {"money", "triggers", "read", "mcp", "tree", "agent"}:
                log(f"[{name}] ledger serve --workers {LEDGER_WORKERS} --no-worker")
                server = Server(ledger_url, workdir, workers=LEDGER_WORKERS, code_root=code_root, roundtrips=rt,
                                extra_env={"LEDGER_MODELS": str(models)})
                running.append(server)

                def money_run(first: bool) -> dict:
                    return workloads.money(server, fx, paired_seconds, stats, rt, warmup=warmup if first else 0,
                                           loadgen_kind=args.loadgen)

                if "money" in only:
                    runs = []
                    for round_ in range(paired_rounds):
                        log(f"[{name}] money-moving call, round {round_ + 1}/{paired_rounds}")
                        ledger_run = money_run(not round_)
                        runs.append(ledger_run)
                        if anchored and pgbench_ok():
                            log("  pgbench tpcb-like -c 2 -j 2")
                            tpcb_run = _anchor("pgbench", lambda: peers.pgbench(
                                cluster, ["-c", "2", "-j", "2"], paired_seconds), errors)
                            if tpcb_run:
                                anchors["tpcb"].append(tpcb_run)
                                pairs["tpcb"].append(_pair(ledger_run, "calls_per_s", tpcb_run, "tps"))
                        if anchored and postgraphile is not None:
                            log("  PostGraphile 4: the same transfer as a custom mutation")
                            peer_run = _anchor("postgraphile transfer", lambda: postgraphile_transfer(not round_),
                                               errors)
                            if peer_run:
                                anchors["postgraphile_transfer"].append(peer_run)
                                pairs["postgraphile_transfer"].append(
                                    _pair(ledger_run, "calls_per_s", peer_run, "calls_per_s"))
                    m["money"] = _median_run(runs, "calls_per_s")
                if "triggers" in only:
                    # The same call with no trigger defined and with 10 triggers on other types, the two sides
                    # alternating in each round and their order too (A B, B A, ...), so that a drift of the
                    # machine within a round favours neither.
                    def triggered(first: bool) -> dict:
                        defined = add_triggers(server.url, fx.token, fx.noop_tool, OTHER_TRIGGERS)
                        try:
                            return money_run(first)
                        finally:
                            delete_triggers(server.url, fx.token, defined)

                    # A baseline from before triggers has no such row.
                    key = None if anchored else f"triggers ({name})"
                    sides = _alternating(name, paired_rounds, [
                        ("money-moving call, no trigger defined", money_run, key),
                        (f"the same with {OTHER_TRIGGERS} triggers on other types", triggered, key)], errors)
                    m["money_no_triggers"] = _median_run(sides[0], "calls_per_s")
                    m["money_other_triggers"] = _median_run(sides[1], "calls_per_s")
                    m["pairs"]["triggers"] = _pairs(sides[1], "calls_per_s", sides[0], "calls_per_s")
                if "read" in only:
                    runs = []
                    for round_ in range(rounds):
                        log(f"[{name}] read, round {round_ + 1}/{rounds}")
                        read_run = workloads.read(server, fx, args.seconds, stats, rt,
                                                  warmup=warmup if not round_ else 0, loadgen_kind=args.loadgen)
                        runs.append(read_run)
                        if anchored and postgraphile is not None:
                            log("  PostGraphile 4: the same read")
                            pgl_run = _anchor("postgraphile", postgraphile_read, errors)
                            if pgl_run:
                                anchors["postgraphile"].append(pgl_run)
                                pairs["postgraphile"].append(_pair(read_run, "rps", pgl_run, "rps"))
                        if anchored and pgbench_ok():
                            log("  pgbench -S -c 4 -j 2")
                            s_run = _anchor("pgbench", lambda: peers.pgbench(cluster, ["-S", "-c", "4", "-j", "2"],
                                                                             args.seconds), errors)
                            if s_run:
                                anchors["select_only"].append(s_run)
                                pairs["select_only"].append(_pair(read_run, "rps", s_run, "tps"))
                    m["read"] = _median_run(runs, "rps")
                if "mcp" in only:
                    # The same read tool through GraphQL invokeAction and through MCP tools/call, in the SDK's
                    # latest protocol and in 2025-11-25, alternating in each round (the order too).
                    def tool_run(via: str):
                        return lambda first: workloads.tool_call(server, fx, via, paired_seconds, stats, rt,
                                                                 warmup=warmup if first else 0,
                                                                 loadgen_kind=args.loadgen)

                    sides = _alternating(name, paired_rounds, [
                        ("read tool through GraphQL invokeAction", tool_run("graphql"), None),
                        (f"the same call through MCP tools/call ({workloads.MCP_LATEST})", tool_run("mcp"),
                         f"mcp ({name})"),
                        ("the same call through MCP tools/call (2025-11-25)", tool_run("mcp-2025-11-25"),
                         f"mcp 2025-11-25 ({name})")], errors)
                    m["tool_graphql"] = _median_run(sides[0], "rps")
                    m["tool_mcp"] = _median_run(sides[1], "rps")
                    m["tool_mcp_2025"] = _median_run(sides[2], "rps")
                    m["pairs"]["mcp"] = _pairs(sides[1], "rps", sides[0], "rps")
                    m["pairs"]["mcp_2025"] = _pairs(sides[2], "rps", sides[0], "rps")
                if "tree" in only:
                    log(f"[{name}] call tree: one invokeAction making {tree_reads} graphql() reads")
                    m["call_tree"], m["call_tree_floor"], m["pairs"]["call_tree"] = workloads.call_tree(
                        server, fx, stats, rt, reads=tree_reads, repeats=repeats,
                        settle=None if args.smoke else wait_until_quiet)
                if "agent" in only:
                    log(f"[{name}] agent turn: 2 rounds with a scripted model, beside the same 2 calls made directly")
                    m["agent_turn"] = _anchor(f"agent turn ({name})", lambda: workloads.agent_turn(
                        server, fx, agent_script, repeats=repeats), errors)
                m["rss"] = server.peak_rss()
                server.stop()
                running.remove(server)
            if "queue" in only:
                log(f"[{name}] queue: {args.queue_jobs} no-op executions, {LEDGER_WORKERS} `ledger worker`"
                    f" x {WORKER_CONCURRENCY}")
                workers = Workers(ledger_url, workdir, LEDGER_WORKERS, concurrency=WORKER_CONCURRENCY,
                                  code_root=code_root, roundtrips=rt)
                running.append(workers)
                # Rounds, each of its own `queue_jobs`, and the median: one run of a few seconds moved by
                # 20-30% with what else the machine ran.
                m["queue"] = _median_run([
                    workloads.queue(fx, workers, stats, rt, jobs=args.queue_jobs, commits=commits,
                                    postgres_cpu=cluster.cpu, settle=None if args.smoke else wait_until_quiet)
                    for _ in range(rounds)], "jobs_per_s")
                # The same with a trigger on execution status changes defined (never true): the durable
                # commits per execution must hold with it (a revision from before triggers cannot run it).
                log(f"[{name}] queue: the same with a trigger on execution status changes defined")
                m["queue_triggered"] = _anchor(f"queue with a trigger ({name})", lambda: queue_with_trigger(
                    workers, code_root), errors)
                workers.stop()
                running.remove(workers)
            if "policy" in only:
                log(f"[{name}] policy: chain decisions with CEL assertions, cached")
                n = 2_000 if args.smoke else 20_000
                m["policy"] = (workloads.policy(n) if code_root is None
                               else _anchor(f"policy ({name})", lambda: _policy_at(code_root, n), errors))
            measured[name] = m
        current = measured["current"]
        current["pairs"].update(pairs)
        before = measured.get(variants[0][0]) if args.baseline else None
        if postgraphile is not None:
            postgraphile.stop()
            running.remove(postgraphile)

        medians = {"tpcb": _median_run(anchors["tpcb"], "tps"),
                   "select_only": _median_run(anchors["select_only"], "tps"),
                   "postgraphile": _median_run(anchors["postgraphile"], "rps"),
                   "postgraphile_transfer": _median_run(anchors["postgraphile_transfer"], "calls_per_s")}
        gw = None
        if args.peers == "all" and "queue" in only:
            log(f"graphile-worker 0.17.3: {args.queue_jobs} no-op jobs, {LEDGER_WORKERS} processes"
                f" x concurrency {WORKER_CONCURRENCY}")

            def run_graphile():
                cluster.create_database("graphile")
                graphile = peers.GraphileWorker(cluster, "graphile", workdir, LEDGER_WORKERS, WORKER_CONCURRENCY)
                running.append(graphile)
                gstats = Statements(cluster, "graphile")
                runs = []
                for _ in range(rounds):
                    settled = wait_until_quiet()  # as each of the ledger's rounds (`workloads.queue`)
                    out = graphile.run_jobs(args.queue_jobs, gstats, DurableCommits(cluster, "graphile"))
                    out["settled"] = settled
                    out["statements_per_job"] = round(gstats.count(peers.GRAPHILE_WORKER_ROLE) / args.queue_jobs, 1)
                    runs.append(out)
                graphile.stop()
                running.remove(graphile)
                return _median_run(runs, "jobs_per_s")

            gw = _anchor("graphile-worker", run_graphile, errors)
        medians["graphile_worker"] = gw

        results["rows"] = build_rows(current, before, medians, errors, tree_reads)
        results["rss"] = current.get("rss")
        if before is not None:
            results["baseline"] = {"revision": args.baseline, "measured": before}
    finally:
        for thing in running:
            try:
                thing.stop()
            except Exception:  # noqa: BLE001
                pass
        cluster.stop()
    results["errors"] = errors
    out = Path(args.out) if args.out else (workdir if args.smoke else ROOT / "bench")
    report.write(results, out,
                 None if args.no_readme else ROOT / "README.md")
    print()
    print(report.markdown(results))
    log(f"results in {out}")
    return 0


def check_postgraphile(started: peers.PostGraphile, fx) -> None:
    """Before PostGraphile is measured: it reads the account and moves money under the ledger's RLS;
    another tenant's token can do neither, and an overdraft or a transfer across currencies moves nothing."""
    from ledger.auth.tokens import TokenService

    check = started.read(fx.token, fx.tenant_id, fx.accounts[0])
    if not (check.get("data") or {}).get("accountByTenantIdAndId"):
        raise RuntimeError(f"PostGraphile did not read the account: {check}")
    stranger, _ = TokenService(fx.jwt_secret).mint(peers.uuid.uuid4(), fx.client_id)
    if started.read(stranger, fx.tenant_id, fx.accounts[0])["data"]["accountByTenantIdAndId"]:
        raise RuntimeError("PostGraphile read another tenant's account: RLS does not apply")
    source, target = fx.accounts[-2], fx.accounts[-1]

    def balances() -> tuple[int, int, int]:
        import psycopg

        with psycopg.connect(fx.database_url, autocommit=True) as conn:  # the owner: what is really there
            rows = dict(conn.execute("SELECT id::text, balance FROM accounts WHERE tenant_id = %s AND id = ANY(%s)",
                                     (fx.tenant_id, [source, target])).fetchall())
            moved = conn.execute("SELECT count(*) FROM transfers WHERE tenant_id = %s", (fx.tenant_id,)).fetchone()[0]
        return rows[source], rows[target], moved

    before = balances()
    answer = started.transfer(fx.token, peers.new_uuid(), source, target, 7)
    if answer.get("errors") or not (((answer.get("data") or {}).get("benchTransfer") or {}).get("transfer") or {}).get("id"):
        raise RuntimeError(f"PostGraphile's transfer failed: {answer}")
    after = balances()
    if after != (before[0] - 7, before[1] + 7, before[2] + 1):
        raise RuntimeError(f"PostGraphile's transfer did not move 7 from {source} to {target}: {before} -> {after}")
    refused = started.transfer(stranger, peers.new_uuid(), source, target, 7)
    if not refused.get("errors") or balances() != after:
        raise RuntimeError(f"another tenant's token moved money through PostGraphile: {refused}")
    too_much = started.transfer(fx.token, peers.new_uuid(), source, target, after[0] + 1)
    if not too_much.get("errors") or balances() != after:
        raise RuntimeError(f"PostGraphile's transfer overdrew an account: {too_much}")
    to_euros = started.transfer(fx.token, peers.new_uuid(), source, fx.euro_account, 1)
    if not to_euros.get("errors") or balances() != after:
        raise RuntimeError(f"PostGraphile's transfer moved dollars into a euro account: {to_euros}")


def _policy_at(code_root: Path, n: int) -> dict:
    """The policy row on a baseline revision's code (its own bench.policy), in a process of its own."""
    import json
    import subprocess

    script = ("import json, time; from bench.policy import bench_decisions; t = time.perf_counter();"
              f" r = bench_decisions({n}); r['seconds'] = round(time.perf_counter() - t, 3);"
              " r['decisions_per_s'] = round(1e6 / r['p50_us']) if r['p50_us'] else None; print(json.dumps(r))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env["PYTHONPATH"] = str(code_root)
    result = subprocess.run([sys.executable, "-c", script], cwd=code_root, env=env, capture_output=True, text=True,
                            timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"the baseline's policy bench failed: {result.stderr.strip()[-300:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _alternating(variant: str, rounds: int, sides: list, errors: dict) -> list[list]:
    """Run each side once per round, in the listed order in even rounds and reversed in odd ones (A B, B A,
    ...), so that a drift of the machine within a round favours neither. Each side is (label, fn(first) ->
    run, error key or None); `first` is its first run (it warms up). A side with an error key that fails is
    recorded as None in that round (the error kept under its key), so that the sides' rounds stay aligned."""
    runs: list[list] = [[] for _ in sides]
    for round_ in range(rounds):
        order = list(range(len(sides)))
        if round_ % 2:
            order.reverse()
        for index in order:
            label, fn, error_key = sides[index]
            log(f"[{variant}] {label}, round {round_ + 1}/{rounds}")
            if error_key is not None:
                runs[index].append(_anchor(error_key, lambda: fn(not round_), errors))
            else:
                runs[index].append(fn(not round_))
    return runs


def _pair(ledger: dict, ledger_metric: str, anchor: dict, anchor_metric: str) -> dict:
    return {"ledger": ledger[ledger_metric], "anchor": anchor[anchor_metric],
            "ratio": round(ledger[ledger_metric] / anchor[anchor_metric], 3) if anchor[anchor_metric] else None}


def _pairs(ledger_runs: list, ledger_metric: str, anchor_runs: list, anchor_metric: str) -> list[dict]:
    return [_pair(a, ledger_metric, b, anchor_metric) for a, b in zip(ledger_runs, anchor_runs) if a and b]


def paired_summary(pairs: list[dict] | None) -> dict | None:
    """The median of the per-round ratios (each round's two sides saw the same moment of the machine), and
    their spread: (max - min) / median."""
    ratios = [p["ratio"] for p in pairs or () if p.get("ratio")]
    if not ratios:
        return None
    middle = statistics.median(ratios)
    return {"median": round(middle, 3), "ratios": ratios,
            "spread": round((max(ratios) - min(ratios)) / middle, 3) if middle else None}


def build_rows(current: dict, before: dict | None, medians: dict, errors: dict, tree_reads: int) -> dict:
    rows: dict = {}
    tpcb, select_only = medians.get("tpcb"), medians.get("select_only")
    pgl, peer, gw = medians.get("postgraphile"), medians.get("postgraphile_transfer"), medians.get("graphile_worker")
    pairs = current.get("pairs") or {}
    money = current.get("money")
    if money:
        rows["money"] = _row(
            "money-moving call (invokeAction → graphql() transfer) vs pgbench tpcb-like", money,
            f"{money['calls_per_s']:,.0f} calls/s, p50 {money['p50_ms']:.1f} ms, p99 {money['p99_ms']:.1f} ms",
            tpcb, (f"pgbench tpcb-like -c 2 -j 2: {tpcb['tps']:,.0f} TPS, p50 {tpcb['p50_ms']:.1f} ms,"
                   f" p99 {tpcb['p99_ms']:.1f} ms") if tpcb else None,
            money["calls_per_s"] / tpcb["tps"] if tpcb else None, MONEY_GOAL, f">= {MONEY_GOAL}x pgbench TPS",
            errors.get("pgbench"), anchor_statements=7 if tpcb else None, pairs=pairs.get("tpcb"),
            roundtrips=_trips(money, "roundtrips_per_call", MONEY_ROUNDTRIPS_GOAL))
        rows["money_peer"] = _row(
            "money-moving call vs PostGraphile custom mutation", money,
            f"the call above: {money['calls_per_s']:,.0f} calls/s",
            peer, (f"PostGraphile 4 `benchTransfer` (PL/pgSQL: lock both, check currency and balance, insert,"
                   f" update both; RLS): {peer['calls_per_s']:,.0f} calls/s, p50 {peer['p50_ms']:.1f} ms,"
                   f" p99 {peer['p99_ms']:.1f} ms") if peer else None,
            money["calls_per_s"] / peer["calls_per_s"] if peer and peer["calls_per_s"] else None, PEER_MONEY_GOAL,
            f">= {PEER_MONEY_GOAL}x PostGraphile's transfer",
            errors.get("postgraphile transfer") or errors.get("postgraphile"),
            anchor_statements=peer.get("statements_per_call") if peer else None,
            pairs=pairs.get("postgraphile_transfer"),
            roundtrips=_trips(money, "roundtrips_per_call", MONEY_ROUNDTRIPS_GOAL))
    plain, triggered = current.get("money_no_triggers"), current.get("money_other_triggers")
    if plain and triggered:
        rows["triggers"] = _row(
            f"money-moving call, {OTHER_TRIGGERS} triggers on other types defined", triggered,
            f"{triggered['calls_per_s']:,.0f} calls/s, p50 {triggered['p50_ms']:.1f} ms,"
            f" p99 {triggered['p99_ms']:.1f} ms",
            plain, f"the same call, no trigger defined: {plain['calls_per_s']:,.0f} calls/s,"
                   f" p50 {plain['p50_ms']:.1f} ms, {plain['roundtrips_per_call']} round trips",
            triggered["calls_per_s"] / plain["calls_per_s"] if plain["calls_per_s"] else None, TRIGGERS_GOAL,
            f">= {TRIGGERS_GOAL}x the same call without triggers", None,
            anchor_statements=plain.get("statements_per_call"), pairs=pairs.get("triggers"),
            roundtrips=_trips(triggered, "roundtrips_per_call"))
    read = current.get("read")
    if read:
        row = _row("read (`account(id) { balance }`) vs PostGraphile", read,
                   f"{read['rps']:,.0f} req/s, p50 {read['p50_ms']:.2f} ms, p99 {read['p99_ms']:.2f} ms",
                   pgl, (f"PostGraphile 4 (1 Node process, RLS): {pgl['rps']:,.0f} req/s, p50 {pgl['p50_ms']:.2f} ms,"
                         f" p99 {pgl['p99_ms']:.2f} ms") if pgl else None,
                   read["rps"] / pgl["rps"] if pgl else None, READ_GOAL, f">= {READ_GOAL}x PostGraphile",
                   errors.get("postgraphile"), anchor_statements=pgl["statements_per_call"] if pgl else None,
                   pairs=pairs.get("postgraphile"), roundtrips=_trips(read, "roundtrips_per_call"))
        rows["read"] = row
        if select_only:
            rows["read_pgbench"] = _row(
                "read vs `pgbench -S`", read, "the read above", select_only,
                f"`pgbench -S -c 4 -j 2`: {select_only['tps']:,.0f} TPS, p50 {select_only['p50_ms']:.2f} ms",
                read["rps"] / select_only["tps"], 0, "(reported)", None, anchor_statements=1,
                pairs=pairs.get("select_only"), roundtrips=_trips(read, "roundtrips_per_call"))
    graphql_call = current.get("tool_graphql")
    for key, measured_key, label, error_key in (
            ("mcp", "tool_mcp", f"MCP `tools/call` ({_mcp_latest()})", "mcp (current)"),
            ("mcp_2025", "tool_mcp_2025", "MCP `tools/call` (2025-11-25)", "mcp 2025-11-25 (current)")):
        if not graphql_call:
            break
        call = current.get(measured_key)
        latest = key == "mcp"
        rows[key] = _row(
            f"read tool through {label}", call or {},
            (f"{call['rps']:,.0f} calls/s, p50 {call['p50_ms']:.2f} ms, p99 {call['p99_ms']:.2f} ms"
             if call else f"not measured ({errors.get(error_key, 'skipped')})"),
            graphql_call, (f"the same call through GraphQL `invokeAction`: {graphql_call['rps']:,.0f} calls/s,"
                           f" p50 {graphql_call['p50_ms']:.2f} ms, p99 {graphql_call['p99_ms']:.2f} ms"),
            call["rps"] / graphql_call["rps"] if call and graphql_call["rps"] else None,
            MCP_GOAL if latest else 0, f">= {MCP_GOAL}x GraphQL invokeAction" if latest else "(reported)",
            errors.get(error_key), anchor_statements=graphql_call.get("statements_per_call"),
            pairs=pairs.get(key), roundtrips=_trips(call or {}, "roundtrips_per_call"))
    tree, floor = current.get("call_tree"), current.get("call_tree_floor")
    if tree and floor:
        medians = round(tree["median_ms"] / floor["median_ms"], 3) if floor["median_ms"] else None
        summary = paired_summary(pairs.get("call_tree"))
        ratio = summary["median"] if summary else medians
        rows["call_tree"] = {
            "title": f"call tree ({tree_reads:,} graphql() reads in one call) vs the psycopg floor", "ledger": tree,
            "anchor": floor,
            "ledger_text": f"{tree['median_ms']:,.0f} ms ({tree['per_read_us']:,.0f} µs per read"
                           + (f"; the server's CPU {tree['server_cpu_us_per_read']:,.0f} µs per read, its sandbox's"
                              " included" if tree.get("server_cpu_us_per_read") is not None else "") + ")",
            "anchor_text": f"{tree_reads:,} PK SELECTs, psycopg, one connection: {floor['median_ms']:,.0f} ms",
            "ratio": round(ratio, 3) if ratio else None, "met": ratio is not None and ratio <= TREE_GOAL,
            "median_of_medians": medians, "repeats": summary, "pairs": pairs.get("call_tree"),
            "goal": f"<= {TREE_GOAL:g}x the floor", "anchor_statements": tree_reads,
            "roundtrips": _trips(tree, "roundtrips_per_tree")}
    q = current.get("queue")
    if q:
        row = _row(
            "queue (no-op executions, enqueue commit → SUCCEEDED) vs graphile-worker", q,
            f"{q['jobs_per_s']:,.0f} executions/s ({q['jobs']:,} in {q['seconds']:.2f} s; p50 {q['p50_ms']:,.0f} ms,"
            f" p99 {q['p99_ms']:,.0f} ms after the commit{_worker_cpu(q)}{_queue_rounds(q)})",
            gw, (f"graphile-worker 0.17.3, 2 processes × concurrency 4: {gw['jobs_per_s']:,.0f} jobs/s"
                 f" ({gw['jobs']:,} in {gw['seconds']:.2f} s{_queue_rounds(gw)})") if gw else None,
            q["jobs_per_s"] / gw["jobs_per_s"] if gw else None, QUEUE_GOAL, f">= {QUEUE_GOAL}x graphile-worker",
            errors.get("graphile-worker"), anchor_statements=gw["statements_per_job"] if gw else None,
            roundtrips=_trips(q, "roundtrips_per_job", QUEUE_ROUNDTRIPS_GOAL))
        row["commits"] = _trips(q, "durable_commits_per_job", QUEUE_COMMITS_GOAL)
        if gw and gw.get("durable_commits_per_job") is not None:
            row["anchor_commits"] = gw["durable_commits_per_job"]
        rows["queue"] = row
        qt = current.get("queue_triggered")
        if qt:
            row = _row(
                "queue, a trigger on execution status changes defined (never true)", qt,
                f"{qt['jobs_per_s']:,.0f} executions/s ({qt['jobs']:,} in {qt['seconds']:.2f} s{_worker_cpu(qt)})", q,
                f"the queue above, no trigger: {q['jobs_per_s']:,.0f} executions/s",
                qt["jobs_per_s"] / q["jobs_per_s"] if q["jobs_per_s"] else None, 0, "(reported)",
                errors.get("queue with a trigger (current)"),
                roundtrips=_trips(qt, "roundtrips_per_job", QUEUE_ROUNDTRIPS_GOAL))
            row["commits"] = _trips(qt, "durable_commits_per_job", QUEUE_COMMITS_GOAL)
            rows["queue_triggered"] = row
    turn = current.get("agent_turn")
    if turn:
        rows["agent"] = {
            "title": "agent turn (2 rounds, scripted model: 3 model calls, 2 tool calls)", "ledger": turn,
            "ledger_text": f"{turn['median_ms']:,.1f} ms per turn (+{turn['overhead_ms']:,.1f} ms)",
            "anchor_text": f"the same 2 tool calls, invokeAction in one request: {turn['direct_median_ms']:,.1f} ms",
            "ratio": round(turn["median_ms"] / turn["direct_median_ms"], 3) if turn["direct_median_ms"] else None,
            "met": True, "goal": "(reported)"}
    pol = current.get("policy")
    if pol:
        met = pol["p99_us"] < POLICY_P99_US
        rows["policy"] = {
            "title": "policy (chain decision, CEL assertions in 2 layers, cached)", "ledger": pol,
            "ledger_text": f"{pol['decisions_per_s']:,} decisions/s, p50 {pol['p50_us']:.1f} µs, p99 {pol['p99_us']:.1f} µs",
            "anchor_text": "— (" + ("met" if met else "**not met**") + ")", "ratio": None, "met": met,
            "goal": f"p99 < {POLICY_P99_US:g} µs"}
    if before is not None:
        _add_before(rows, before)
    return rows


def _mcp_latest() -> str:
    return workloads.MCP_LATEST


def _add_before(rows: dict, before: dict) -> None:
    """The baseline revision's value beside each row, and its ratio to this run's anchor (for the rows whose
    anchor is the ledger itself, to the baseline's own)."""
    bpairs = before.get("pairs") or {}
    spec = {  # row: (the baseline's measurement, metric, its anchor's measurement or None for this run's anchor)
        "money": ("money", "calls_per_s", None), "money_peer": ("money", "calls_per_s", None),
        "triggers": ("money_other_triggers", "calls_per_s", "money_no_triggers"),
        "read": ("read", "rps", None), "read_pgbench": ("read", "rps", None),
        "mcp": ("tool_mcp", "rps", "tool_graphql"), "mcp_2025": ("tool_mcp_2025", "rps", "tool_graphql"),
        "call_tree": ("call_tree", "median_ms", "call_tree_floor"), "queue": ("queue", "jobs_per_s", None),
        "queue_triggered": ("queue_triggered", "jobs_per_s", "queue"),
        "agent": ("agent_turn", "median_ms", None), "policy": ("policy", "p99_us", None),
    }
    for key, (measured_key, metric, own_anchor) in spec.items():
        row = rows.get(key)
        measured = before.get(measured_key)
        if row is None or not measured:
            continue  # a row the revision cannot run (e.g. before the MCP endpoint or triggers)
        row["before"] = measured
        trips = (measured.get("roundtrips_per_call") or measured.get("roundtrips_per_tree")
                 or measured.get("roundtrips_per_job"))
        unit = {"calls_per_s": " calls/s", "rps": " req/s", "median_ms": " ms", "jobs_per_s": " executions/s",
                "p99_us": " µs p99"}[metric]
        row["before_text"] = f"{measured[metric]:,.1f}{unit}" + (f", {trips:g} round trips" if trips else "")
        if key == "call_tree" and measured.get("server_cpu_us_per_read") is not None:
            row["before_text"] += f", the server's CPU {measured['server_cpu_us_per_read']:,.0f} µs per read"
        if key.startswith("queue") and measured.get("durable_commits_per_job") is not None:
            row["before_text"] += f", {measured['durable_commits_per_job']:g} durable commits"
        if key == "agent":
            direct = measured.get("direct_median_ms")
            row["before_ratio"] = round(measured["median_ms"] / direct, 3) if direct else None
            continue
        if key == "policy":
            continue
        pair_key = {"triggers": "triggers", "mcp": "mcp", "mcp_2025": "mcp_2025", "call_tree": "call_tree"}.get(key)
        summary = paired_summary(bpairs.get(pair_key)) if pair_key else None
        if summary:
            row["before_ratio"] = summary["median"]
            continue
        anchor = before.get(own_anchor) if own_anchor else row.get("anchor")
        anchor = anchor or {}
        base = (anchor.get("calls_per_s") if key == "money_peer" else None) or anchor.get("tps") or anchor.get(
            "rps") or anchor.get("jobs_per_s") or anchor.get("median_ms") or anchor.get("calls_per_s")
        if base:
            row["before_ratio"] = round(measured[metric] / base, 3)


def _trips(measured: dict, key: str, goal: float | None = None) -> dict | None:
    value = measured.get(key)
    if value is None:
        return None
    return {"value": value, "goal": goal, "met": value <= goal if goal is not None else None}


def _worker_cpu(run: dict) -> str:
    cpu = run.get("worker_cpu_ms_per_job")  # a baseline's harness may not measure it
    postgres = run.get("postgres_cpu_ms_per_job")
    if cpu is None:
        return ""
    if postgres is None:
        return f"; the workers' CPU {cpu:.1f} ms per execution"
    return f"; CPU per execution: the workers' {cpu:.1f} ms, PostgreSQL's {postgres:.1f} ms"


def _queue_rounds(run: dict) -> str:
    rounds = run.get("rounds") or []
    if len(rounds) < 2:
        return ""
    return "; the median of rounds of " + ", ".join(f"{r:,.0f}" for r in rounds) + "/s"


def _median_run(runs: list[dict], metric: str) -> dict | None:
    """The run whose `metric` is the median (the lower middle of an even count); its rounds listed."""
    runs = [run for run in runs if run]
    if not runs:
        return None
    ordered = sorted(runs, key=lambda run: run[metric])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds"] = [run[metric] for run in runs]
    return chosen


def _row(title: str, ledger: dict, ledger_text: str, anchor: dict | None, anchor_text: str | None,
         ratio: float | None, goal_value: float, goal: str, anchor_error: str | None, *,
         anchor_statements=None, pairs: list[dict] | None = None, roundtrips: dict | None = None) -> dict:
    """A row: its ratio is the median of the per-round ratios when the two sides were paired in each round
    (`pairs`), else the ratio of the two medians; both are kept."""
    summary = paired_summary(pairs)
    medians = round(ratio, 3) if ratio is not None else None
    if summary:
        ratio = summary["median"]
    return {"title": title, "ledger": ledger, "anchor": anchor, "ledger_text": ledger_text,
            "anchor_text": anchor_text or f"not measured ({anchor_error or 'skipped'})",
            "ratio": round(ratio, 3) if ratio is not None else None, "median_of_medians": medians,
            "paired": summary, "pairs": pairs or None,
            "met": ratio is not None and ratio >= goal_value, "goal": goal, "anchor_error": anchor_error,
            "anchor_statements": anchor_statements, "roundtrips": roundtrips}


if __name__ == "__main__":
    sys.exit(main())
