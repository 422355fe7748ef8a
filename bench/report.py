"""results.json, results.md, and the README's bench section."""

from __future__ import annotations

import json
import re
from pathlib import Path

README_START = "<!-- bench:start (written by `make bench`) -->"
README_END = "<!-- bench:end -->"


def _settled(settles: list | None) -> str:
    """How each repeat of the call tree waited for the machine to be quiet (`bench.env.wait_until_quiet`)."""
    if not settles:
        return ""
    waits = ", ".join(f"{w['waited_s']:g} s" + ("" if w["settled"] else " (not quiet)") for w in settles)
    return f"; each repeat started once the machine's CPUs were at most 10% busy over 0.5 s (waits {waits})"


def _f(value, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:,.{digits}f}"
    else:
        text = f"{value:,}"
    return f"{text}{unit}"


def _ratio(row: dict) -> str:
    if row.get("ratio") is None:
        return "not measured" if row.get("anchor_error") else "—"
    if row.get("goal") == "(reported)":
        return f"{row['ratio']:.2f}x"
    mark = "met" if row["met"] else "**not met**"
    return f"**{row['ratio']:.2f}x** ({mark})"


ROW_ORDER = ("money", "money_peer", "triggers", "read", "read_pgbench", "mcp", "mcp_2025", "call_tree", "agent",
             "queue", "queue_triggered", "policy")


def _goal_cell(measured: dict | None, unit: str) -> str:
    """"15.6" or, for a row with a goal, "15.6 (goal ≤ 8, **not met**)"."""
    if not measured:
        return ""
    text = f"{_f(measured['value'])}{unit}"
    if measured.get("goal") is None:
        return text
    mark = "met" if measured["met"] else "**not met**"
    return f"{text} (goal ≤ {measured['goal']:g}, {mark})"


def _roundtrips(row: dict) -> str:
    cells = [c for c in (_goal_cell(row.get("roundtrips"), ""),
                         _goal_cell(row.get("commits"), " durable commits")) if c]
    if row.get("anchor_commits") is not None:
        cells.append(f"anchor: {_f(row['anchor_commits'])} durable commits")
    return "; ".join(cells) or "—"


def table(results: dict) -> str:
    rows = results["rows"]
    baseline = (results.get("baseline") or {}).get("revision")
    head = "| workload | the ledger | anchor (same run, same cluster) | ratio | goal | round trips per call |"
    rule = "|---|---|---|---|---|---|"
    if baseline:
        head += f" before (`{baseline}`) | ratio before |"
        rule += "---|---|"
    lines = [head, rule]
    for key in ROW_ORDER:
        row = rows.get(key)
        if not row:
            continue
        line = (f"| {row['title']} | {row['ledger_text']} | {row['anchor_text']} | {_ratio(row)} | {row['goal']} |"
                f" {_roundtrips(row)} |")
        if baseline:
            ratio = row.get("before_ratio")
            line += f" {row.get('before_text', '—')} | {f'{ratio:.2f}x' if ratio is not None else '—'} |"
        lines.append(line)
    return "\n".join(lines)


def details(results: dict) -> str:
    rows = results["rows"]
    out = []
    paired = []
    for key in ROW_ORDER:
        row = rows.get(key) or {}
        summary = row.get("paired")
        if not summary:
            continue
        mom = row.get("median_of_medians")
        paired.append(f"{row['title']}: **{summary['median']:.2f}x** (rounds "
                      + ", ".join(f"{r:.2f}x" for r in summary["ratios"])
                      + f"; spread {_f(summary.get('spread'), 2)}; median of medians "
                      + (f"{mom:.2f}x" if mom is not None else "—") + ")")
    if paired:
        out.append(f"- Paired ratios: each round runs both sides one after the other (the triggers and MCP rows"
                   f" alternate the order, A B then B A), so each round's ratio compares one moment of the shared"
                   f" machine; the table shows their median ({results.get('paired_rounds', '?')} rounds of"
                   f" {_f(results.get('paired_seconds'), 0)} s; spread = (max − min) / median): "
                   + "; ".join(paired) + ".")
    tree = rows.get("call_tree") or {}
    repeats = tree.get("repeats")
    if repeats:
        mom = tree.get("median_of_medians")
        out.append(f"- Call tree: each repeat runs one tree, then the floor's SELECTs on the same machine's moment;"
                   f" the table shows the median of the repeats' ratios: **{repeats['median']:.2f}x** (repeats "
                   + ", ".join(f"{r:.2f}x" for r in repeats["ratios"])
                   + f"; spread {_f(repeats.get('spread'), 2)}; median of medians "
                   + (f"{mom:.2f}x" if mom is not None else "—") + ")"
                   + _settled((tree.get("ledger") or {}).get("settled")) + ".")
    rss = results.get("rss") or {}
    out.append(f"- Peak RSS of a server process: {_f(rss.get('server_mib'), 0, ' MiB')}"
               f" (a Starlark sandbox process beside it: {_f(rss.get('sandbox_mib'), 0, ' MiB')}).")
    rt = []
    for key, label in (("money", "money-moving call"), ("triggers", "money-moving call with 10 triggers on other types"),
                       ("read", "read"), ("mcp", "MCP tools/call (latest protocol)"),
                       ("mcp_2025", "MCP tools/call (2025-11-25)"),
                       ("call_tree", "call tree (whole tree)"), ("queue", "queued execution"),
                       ("queue_triggered", "queued execution, a trigger on status changes defined")):
        row = rows.get(key) or {}
        ledger = row.get("ledger") or {}
        trips = ledger.get("roundtrips_per_call") or ledger.get("roundtrips_per_tree") or ledger.get("roundtrips_per_job")
        value = ledger.get("statements_per_call") or ledger.get("statements_per_tree") or ledger.get("statements_per_job")
        anchor = row.get("anchor_statements")
        if value is not None:
            rt.append(f"{label} {_f(trips)} round trips / {_f(value)} statements"
                      + (f" (anchor: {_f(anchor)} statements)" if anchor is not None else ""))
    peer = rows.get("money_peer") or {}
    if peer.get("anchor_statements") is not None:
        rt.append(f"PostGraphile's transfer {_f(peer['anchor_statements'])} statements (its function's own"
                  " statements included)")
    if rt:
        out.append("- Database work per call: round trips counted in the server processes (a hook on psycopg: a"
                   " statement, or one pipeline of them; the pool's connection check included), and statements"
                   " from pg_stat_statements (BEGIN, COMMIT and SAVEPOINTs included): " + "; ".join(rt) + ".")
    queue = rows.get("queue") or {}
    if queue.get("commits"):
        out.append("- Durable commits per queued execution: the WAL's commit records (pg_walinspect) from the"
                   " enqueue to the last SUCCEEDED, the enqueue's own commit taken off, divided by the executions"
                   " (cluster-wide: an autovacuum ANALYZE in that stretch counts too).")
    baseline = results.get("baseline")
    if baseline:
        out.append(f"- Before: the ledger's code at `{baseline['revision']}`, run in this same run, on the same cluster,"
                   " with the same installed packages and this run's anchors (the triggers, MCP and call tree rows"
                   " against the revision's own side); a row the revision cannot run says —.")
    errors = results.get("errors") or {}
    if errors:
        out.append("- Not measured: " + "; ".join(f"{k}: {v}" for k, v in errors.items()) + ".")
    out.append(f"- Load generator: {results.get('loadgen')}; PostgreSQL {results['postgres'].get('server_version')}"
               f" with fsync={results['postgres'].get('fsync')},"
               f" synchronous_commit={results['postgres'].get('synchronous_commit')}.")
    return "\n".join(out)


def markdown(results: dict) -> str:
    machine = results["machine"]
    head = (f"`make bench` of {results['date']} on {machine['nproc']} × {machine['model']}"
            f" (shared machine: compare the ratios, measured in the same run).")
    return f"{head}\n\n{table(results)}\n\n{details(results)}\n"


def write(results: dict, out_dir: Path, readme: Path | None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = markdown(results)
    (out_dir / "results.md").write_text(md)
    if readme is not None:
        update_readme(readme, md)


def update_readme(readme: Path, md: str) -> None:
    """Replace the table between the markers (read just before writing: others edit the README too)."""
    text = readme.read_text()
    block = f"{README_START}\n{md}{README_END}"
    if README_START in text and README_END in text:
        text = re.sub(re.escape(README_START) + r".*?" + re.escape(README_END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n## Performance (`make bench`)\n\n" + block + "\n"
    readme.write_text(text)
