"""`make bench`: the ledger side by side with pgbench, PostGraphile 4 and graphile-worker, in one run,
on one throwaway PostgreSQL cluster with default durability (fsync and synchronous_commit on).

    python -m bench.run [--seconds 10] [--smoke] [--peers all|pgbench|none] [--no-readme]

`--smoke` is the quick run `make test` does (each ledger workload for about a second, no anchors), so
that the harness cannot rot. Results go to bench/results.json and bench/results.md, and (unless
--no-readme or --smoke) into README.md between the bench markers.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import loadgen, peers, report, workloads
from .env import ROOT, Cluster, RoundTrips, Server, Statements, Workers, export_revision, settings_text
from .fixtures import add_triggers, delete_triggers, populate, prepare_database

MONEY_GOAL, READ_GOAL, TREE_GOAL, QUEUE_GOAL, POLICY_P99_US = 0.5, 1.0, 3.0, 1.0, 50.0
MCP_GOAL = 0.8
# The money-moving call with 10 triggers on other types, against the same call with none: at most 5% slower.
TRIGGERS_GOAL, OTHER_TRIGGERS = 0.95, 10
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
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the money and read rows"
                        " with their anchors (medians are reported)")
    parser.add_argument("--out", help="where results.json and results.md go (default: bench/; a temporary"
                        " directory with --smoke)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--baseline", metavar="REV", help="also run the ledger rows on the code of git revision REV"
                        " (before/after in one run, on the same cluster and anchors)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.peers, args.queue_jobs, args.no_readme = 1.0, "none", 20, True
    warmup = 0.0 if args.smoke else 2.0
    rounds = 1 if args.smoke else max(1, args.rounds)
    repeats = 1 if args.smoke else 5
    tree_reads = 100 if args.smoke else 1000
    loadgen_used = args.loadgen if args.loadgen != "auto" else ("wrk" if loadgen.wrk_available() else "python")

    workdir = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    results: dict = {"date": datetime.date.today().isoformat(), "machine": machine(), "loadgen": loadgen_used,
                     "seconds": args.seconds, "smoke": args.smoke, "rows": {}}
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
        rt = RoundTrips(workdir)
        server = Server(ledger_url, workdir, workers=1)
        running.append(server)
        fx = populate(ledger_url, server.url, tenant_id, client_id, token, secret,
                      accounts=20 if args.smoke else 200)
        server.stop()
        running.remove(server)
        if args.peers != "none":
            log("pgbench -i")
            _anchor("pgbench", lambda: peers.pgbench_init(cluster), errors)

        # PostGraphile is started before the ledger's rows and measured right beside the ledger's read.
        postgraphile = None
        if args.peers == "all":
            log("PostGraphile 4: starting (as a role subject to RLS)")

            def start_postgraphile():
                started = peers.PostGraphile(cluster, "ledger", secret, workdir)
                running.append(started)
                check = started.read(token, tenant_id, fx.accounts[0])
                if not (check.get("data") or {}).get("accountByTenantIdAndId"):
                    raise RuntimeError(f"PostGraphile did not read the account: {check}")
                from ledger.auth.tokens import TokenService

                stranger, _ = TokenService(secret).mint(peers.uuid.uuid4(), client_id)
                if started.read(stranger, tenant_id, fx.accounts[0])["data"]["accountByTenantIdAndId"]:
                    raise RuntimeError("PostGraphile read another tenant's account: RLS does not apply")
                return started

            postgraphile = _anchor("postgraphile", start_postgraphile, errors)

        def postgraphile_read():
            spec = {"url": postgraphile.url, "token": token, "kind": "static",
                    "body": postgraphile.body(tenant_id, fx.accounts[0])}
            loadgen.run(spec, 4, warmup or 1, loadgen=args.loadgen)
            stats.reset()
            out = loadgen.run(spec, 4, args.seconds, loadgen=args.loadgen)
            out["statements_per_call"] = round(stats.count(peers.POSTGRAPHILE_ROLE) / out["requests"], 1)
            return out

        def pgbench_ok() -> bool:
            return args.peers != "none" and "pgbench" not in errors

        # Each anchor runs right after the ledger's workload it anchors, in alternating rounds (the machine
        # is shared: what matters is that both sides of a ratio see the same moment); medians are reported.
        measured: dict[str, dict] = {}
        anchors: dict[str, list] = {"tpcb": [], "select_only": [], "postgraphile": []}
        # The agent row's scripted model (a baseline revision from before agents ignores the models file).
        agent_script = workdir / "agent-script.json"
        agent_script.write_text("[]")
        models = workdir / "models.toml"
        models.write_text('[bench]\ntype = "scripted"\nscript = "agent-script.json"\n')
        for name, code_root in variants:
            anchored = name == "current"
            log(f"[{name}] ledger serve --workers {LEDGER_WORKERS} --no-worker")
            server = Server(ledger_url, workdir, workers=LEDGER_WORKERS, code_root=code_root, roundtrips=rt,
                            extra_env={"LEDGER_MODELS": str(models)} if anchored else None)
            running.append(server)
            m: dict = {}
            runs = []
            for round_ in range(rounds):
                log(f"[{name}] money-moving call, round {round_ + 1}/{rounds}")
                runs.append(workloads.money(server, fx, args.seconds, stats, rt, warmup=warmup if not round_ else 0,
                                            loadgen_kind=args.loadgen))
                if anchored and pgbench_ok():
                    log("  pgbench tpcb-like -c 2 -j 2")
                    tpcb_run = _anchor("pgbench", lambda: peers.pgbench(cluster, ["-c", "2", "-j", "2"], args.seconds),
                                       errors)
                    if tpcb_run:
                        anchors["tpcb"].append(tpcb_run)
            m["money"] = _median_run(runs, "calls_per_s")
            if anchored:
                # The same call with no trigger defined and with 10 triggers on other types, alternating in each
                # round (a shared machine: both sides of the ratio see the same moment).
                plain_runs, triggered_runs = [], []
                for round_ in range(rounds):
                    log(f"[{name}] money-moving call, no trigger defined, round {round_ + 1}/{rounds}")
                    plain_runs.append(workloads.money(server, fx, args.seconds, stats, rt, warmup=0,
                                                      loadgen_kind=args.loadgen))
                    defined = add_triggers(server.url, fx.token, fx.noop_tool, OTHER_TRIGGERS)
                    log(f"[{name}] the same with {OTHER_TRIGGERS} triggers on other types, round {round_ + 1}/{rounds}")
                    triggered_runs.append(workloads.money(server, fx, args.seconds, stats, rt, warmup=0,
                                                          loadgen_kind=args.loadgen))
                    delete_triggers(server.url, fx.token, defined)
                m["money_no_triggers"] = _median_run(plain_runs, "calls_per_s")
                m["money_other_triggers"] = _median_run(triggered_runs, "calls_per_s")
            runs = []
            for round_ in range(rounds):
                log(f"[{name}] read, round {round_ + 1}/{rounds}")
                runs.append(workloads.read(server, fx, args.seconds, stats, rt, warmup=warmup if not round_ else 0,
                                           loadgen_kind=args.loadgen))
                if anchored and postgraphile is not None:
                    log("  PostGraphile 4: the same read")
                    pgl_run = _anchor("postgraphile", postgraphile_read, errors)
                    if pgl_run:
                        anchors["postgraphile"].append(pgl_run)
                if anchored and pgbench_ok():
                    log("  pgbench -S -c 4 -j 2")
                    s_run = _anchor("pgbench", lambda: peers.pgbench(cluster, ["-S", "-c", "4", "-j", "2"],
                                                                     args.seconds), errors)
                    if s_run:
                        anchors["select_only"].append(s_run)
            m["read"] = _median_run(runs, "rps")
            # The same read tool through GraphQL invokeAction and through MCP tools/call, alternating in
            # each round so that both sides of the ratio see the same moment of a shared machine.
            graphql_runs, mcp_runs = [], []
            for round_ in range(rounds):
                first = warmup if not round_ else 0
                log(f"[{name}] read tool through GraphQL invokeAction, round {round_ + 1}/{rounds}")
                graphql_runs.append(workloads.tool_call(server, fx, "graphql", args.seconds, stats, rt, warmup=first,
                                                        loadgen_kind=args.loadgen))
                log(f"[{name}] the same call through MCP tools/call, round {round_ + 1}/{rounds}")
                mcp_run = _anchor(f"mcp ({name})", lambda: workloads.tool_call(
                    server, fx, "mcp", args.seconds, stats, rt, warmup=first, loadgen_kind=args.loadgen), errors)
                if mcp_run:
                    mcp_runs.append(mcp_run)
            m["tool_graphql"] = _median_run(graphql_runs, "rps")
            m["tool_mcp"] = _median_run(mcp_runs, "rps")
            log(f"[{name}] call tree: one invokeAction making {tree_reads} graphql() reads")
            m["call_tree"] = workloads.call_tree(server, fx, stats, rt, reads=tree_reads, repeats=repeats)
            # The floor right after the tree, so that both see the same machine (it is shared and noisy).
            m["call_tree_floor"] = workloads.call_tree_floor(fx, reads=tree_reads, repeats=repeats)
            if anchored:
                log(f"[{name}] agent turn: 2 rounds with a scripted model, beside the same 2 calls made directly")
                m["agent_turn"] = _anchor("agent turn", lambda: workloads.agent_turn(
                    server, fx, agent_script, repeats=repeats), errors)
            m["rss"] = server.peak_rss()
            server.stop()
            running.remove(server)
            log(f"[{name}] queue: {args.queue_jobs} no-op executions, {LEDGER_WORKERS} `ledger worker`"
                f" x {WORKER_CONCURRENCY}")
            workers = Workers(ledger_url, workdir, LEDGER_WORKERS, concurrency=WORKER_CONCURRENCY, code_root=code_root,
                              roundtrips=rt)
            running.append(workers)
            m["queue"] = workloads.queue(fx, workers, stats, rt, jobs=args.queue_jobs)
            log(f"[{name}] queue again, with 10 triggers on financial.ActionExecution.updated (none firing)")
            m["queue"]["with_triggers"] = workloads.queue(fx, workers, stats, rt, jobs=args.queue_jobs, triggers=10)
            workers.stop()
            running.remove(workers)
            measured[name] = m
        current = measured["current"]
        before = measured.get(variants[0][0]) if args.baseline else None
        if postgraphile is not None:
            postgraphile.stop()
            running.remove(postgraphile)

        tpcb = _median_run(anchors["tpcb"], "tps")
        select_only = _median_run(anchors["select_only"], "tps")
        pgl = _median_run(anchors["postgraphile"], "rps")
        gw = None
        if args.peers == "all":
            log(f"graphile-worker 0.17.3: {args.queue_jobs} no-op jobs, {LEDGER_WORKERS} processes"
                f" x concurrency {WORKER_CONCURRENCY}")

            def run_graphile():
                cluster.create_database("graphile")
                graphile = peers.GraphileWorker(cluster, "graphile", workdir, LEDGER_WORKERS, WORKER_CONCURRENCY)
                running.append(graphile)
                gstats = Statements(cluster, "graphile")
                out = graphile.run_jobs(args.queue_jobs, gstats)
                out["statements_per_job"] = round(gstats.count(peers.GRAPHILE_WORKER_ROLE) / args.queue_jobs, 1)
                graphile.stop()
                running.remove(graphile)
                return out

            gw = _anchor("graphile-worker", run_graphile, errors)

        log("policy: chain decisions with CEL assertions, cached")
        pol = workloads.policy(2_000 if args.smoke else 20_000)
        results["rows"] = build_rows(current, before, tpcb, select_only, pgl, gw, pol, errors, tree_reads,
                                     fx, repeats)
        results["rss"] = current["rss"]
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


def build_rows(current: dict, before: dict | None, tpcb, select_only, pgl, gw, pol, errors, tree_reads, fx,
               repeats) -> dict:
    rows = {}
    money = current["money"]
    rows["money"] = _row(
        "money-moving call (invokeAction → graphql() transfer)", money,
        f"{money['calls_per_s']:,.0f} calls/s, p50 {money['p50_ms']:.1f} ms, p99 {money['p99_ms']:.1f} ms",
        tpcb, (f"pgbench tpcb-like -c 2 -j 2: {tpcb['tps']:,.0f} TPS, p50 {tpcb['p50_ms']:.1f} ms,"
               f" p99 {tpcb['p99_ms']:.1f} ms") if tpcb else None,
        money["calls_per_s"] / tpcb["tps"] if tpcb else None, MONEY_GOAL, ">= 0.5x pgbench TPS",
        errors.get("pgbench"), anchor_statements=7 if tpcb else None)
    plain, triggered = current.get("money_no_triggers"), current.get("money_other_triggers")
    if plain and triggered:
        rows["triggers"] = _row(
            f"money-moving call, {OTHER_TRIGGERS} triggers on other types defined", triggered,
            f"{triggered['calls_per_s']:,.0f} calls/s, p50 {triggered['p50_ms']:.1f} ms,"
            f" p99 {triggered['p99_ms']:.1f} ms, {triggered['roundtrips_per_call']} round trips",
            plain, f"the same call, no trigger defined: {plain['calls_per_s']:,.0f} calls/s,"
                   f" p50 {plain['p50_ms']:.1f} ms, {plain['roundtrips_per_call']} round trips",
            triggered["calls_per_s"] / plain["calls_per_s"] if plain["calls_per_s"] else None, TRIGGERS_GOAL,
            f">= {TRIGGERS_GOAL}x the same call without triggers", None,
            anchor_statements=plain.get("statements_per_call"))
    read = current["read"]
    row = _row("read (`account(id) { balance }`)", read,
               f"{read['rps']:,.0f} req/s, p50 {read['p50_ms']:.2f} ms, p99 {read['p99_ms']:.2f} ms",
               pgl, (f"PostGraphile 4 (1 Node process, RLS): {pgl['rps']:,.0f} req/s, p50 {pgl['p50_ms']:.2f} ms,"
                     f" p99 {pgl['p99_ms']:.2f} ms") if pgl else None,
               read["rps"] / pgl["rps"] if pgl else None, READ_GOAL, ">= 1.0x PostGraphile",
               errors.get("postgraphile"), anchor_statements=pgl["statements_per_call"] if pgl else None)
    if select_only:
        row["pgbench_S"] = select_only
        row["pgbench_S_text"] = f"`pgbench -S -c 4 -j 2`: {select_only['tps']:,.0f} TPS, p50 {select_only['p50_ms']:.2f} ms"
        row["pgbench_S_ratio"] = round(read["rps"] / select_only["tps"], 3)
    rows["read"] = row
    graphql_call, mcp_call = current["tool_graphql"], current["tool_mcp"]
    rows["mcp"] = _row(
        "read tool through MCP `tools/call`", mcp_call or {},
        (f"{mcp_call['rps']:,.0f} calls/s, p50 {mcp_call['p50_ms']:.2f} ms, p99 {mcp_call['p99_ms']:.2f} ms"
         if mcp_call else "not measured"),
        graphql_call, (f"the same call through GraphQL `invokeAction`: {graphql_call['rps']:,.0f} calls/s,"
                       f" p50 {graphql_call['p50_ms']:.2f} ms, p99 {graphql_call['p99_ms']:.2f} ms"),
        mcp_call["rps"] / graphql_call["rps"] if mcp_call and graphql_call["rps"] else None, MCP_GOAL,
        ">= 0.8x GraphQL invokeAction", errors.get("mcp (current)"),
        anchor_statements=graphql_call.get("statements_per_call"))
    tree = current["call_tree"]
    floor = current["call_tree_floor"]
    ratio = tree["median_ms"] / floor["median_ms"] if floor["median_ms"] else None
    rows["call_tree"] = {
        "title": f"call tree ({tree_reads:,} graphql() reads in one call)", "ledger": tree, "anchor": floor,
        "ledger_text": f"{tree['median_ms']:,.0f} ms ({tree['per_read_us']:,.0f} µs per read)",
        "anchor_text": f"{tree_reads:,} PK SELECTs, psycopg, one connection: {floor['median_ms']:,.0f} ms",
        "ratio": round(ratio, 3) if ratio else None, "met": ratio is not None and ratio <= TREE_GOAL,
        "goal": "<= 3x the floor", "anchor_statements": tree_reads}
    q = current["queue"]
    rows["queue"] = _row(
        "queue (no-op executions, enqueue commit → SUCCEEDED)", q,
        f"{q['jobs_per_s']:,.0f} executions/s ({q['jobs']:,} in {q['seconds']:.2f} s; p50 {q['p50_ms']:,.0f} ms,"
        f" p99 {q['p99_ms']:,.0f} ms after the commit)",
        gw, (f"graphile-worker 0.17.3, 2 processes × concurrency 4: {gw['jobs_per_s']:,.0f} jobs/s"
             f" ({gw['jobs']:,} in {gw['seconds']:.2f} s)") if gw else None,
        q["jobs_per_s"] / gw["jobs_per_s"] if gw else None, QUEUE_GOAL, ">= 1.0x graphile-worker",
        errors.get("graphile-worker"), anchor_statements=gw["statements_per_job"] if gw else None)
    turn = current.get("agent_turn")
    if turn:
        rows["agent"] = {
            "title": "agent turn (2 rounds, scripted model: 3 model calls, 2 tool calls)", "ledger": turn,
            "ledger_text": f"{turn['median_ms']:,.1f} ms per turn (+{turn['overhead_ms']:,.1f} ms)",
            "anchor_text": f"the same 2 tool calls, invokeAction in one request: {turn['direct_median_ms']:,.1f} ms",
            "ratio": round(turn["median_ms"] / turn["direct_median_ms"], 3) if turn["direct_median_ms"] else None,
            "met": True, "goal": "(reported)"}
    met = pol["p99_us"] < POLICY_P99_US
    rows["policy"] = {
        "title": "policy (chain decision, CEL assertions in 2 layers, cached)", "ledger": pol,
        "ledger_text": f"{pol['decisions_per_s']:,} decisions/s, p50 {pol['p50_us']:.1f} µs, p99 {pol['p99_us']:.1f} µs",
        "anchor_text": "— (" + ("met" if met else "**not met**") + ")", "ratio": None, "met": met,
        "goal": "p99 < 50 µs"}
    if before is not None:
        for key, metric in (("money", "calls_per_s"), ("read", "rps"), ("mcp", "rps"), ("call_tree", "median_ms"),
                            ("queue", "jobs_per_s")):
            measured = before.get("tool_mcp" if key == "mcp" else key)
            if not measured:
                continue  # a revision from before the MCP endpoint
            rows[key]["before"] = measured
            rows[key]["before_text"] = f"{measured[metric]:,.1f}"
            if key == "mcp":
                # Its anchor is the ledger's own GraphQL path: the revision's, measured beside it.
                anchor = before.get("tool_graphql") or {}
            else:
                anchor = before["call_tree_floor"] if key == "call_tree" else rows[key].get("anchor") or {}
            base = anchor.get("tps") or anchor.get("rps") or anchor.get("jobs_per_s") or anchor.get("median_ms")
            if base:
                rows[key]["before_ratio"] = round(measured[metric] / base, 3)
    return rows


def _median_run(runs: list[dict], metric: str) -> dict | None:
    """The run whose `metric` is the median (the lower middle of an even count); its rounds listed."""
    if not runs:
        return None
    ordered = sorted(runs, key=lambda run: run[metric])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds"] = [run[metric] for run in runs]
    return chosen


def _row(title: str, ledger: dict, ledger_text: str, anchor: dict | None, anchor_text: str | None,
         ratio: float | None, goal_value: float, goal: str, anchor_error: str | None, *,
         anchor_statements=None) -> dict:
    return {"title": title, "ledger": ledger, "anchor": anchor, "ledger_text": ledger_text,
            "anchor_text": anchor_text or f"not measured ({anchor_error or 'skipped'})",
            "ratio": round(ratio, 3) if ratio is not None else None,
            "met": ratio is not None and ratio >= goal_value, "goal": goal, "anchor_error": anchor_error,
            "anchor_statements": anchor_statements}


if __name__ == "__main__":
    sys.exit(main())
