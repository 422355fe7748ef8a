"""results.json, results.md, and the README's bench section."""

from __future__ import annotations

import json
import re
from pathlib import Path

README_START = "<!-- bench:start (written by `make bench`) -->"
README_END = "<!-- bench:end -->"


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


def table(results: dict) -> str:
    rows = results["rows"]
    baseline = (results.get("baseline") or {}).get("revision")
    head = "| workload | the ledger | anchor (same run, same cluster) | ratio | goal |"
    rule = "|---|---|---|---|---|"
    if baseline:
        head += f" before (`{baseline}`) | ratio before |"
        rule += "---|---|"
    lines = [head, rule]
    for key in ("money", "triggers", "read", "mcp", "call_tree", "agent", "queue", "policy"):
        row = rows.get(key)
        if not row:
            continue
        line = f"| {row['title']} | {row['ledger_text']} | {row['anchor_text']} | {_ratio(row)} | {row['goal']} |"
        if baseline:
            ratio = row.get("before_ratio")
            line += f" {row.get('before_text', '—')} | {f'{ratio:.2f}x' if ratio is not None else '—'} |"
        lines.append(line)
    extra = rows.get("read", {}).get("pgbench_S_text")
    if extra:
        lines.append(f"| read vs `pgbench -S` | (the read above) | {extra} | {rows['read']['pgbench_S_ratio']:.2f}x"
                     " | (reported) |" + (" | |" if baseline else ""))
    return "\n".join(lines)


def _commits(queue: dict) -> str:
    """A queued execution's durable commits (COMMIT records in the WAL), alone and with triggers defined."""
    if queue.get("durable_commits_per_job") is None:
        return ""
    text = f", {_f(queue['durable_commits_per_job'], 2)} durable commits per execution"
    triggered = queue.get("with_triggers") or {}
    if triggered.get("durable_commits_per_job") is not None:
        text += (f" ({_f(triggered['durable_commits_per_job'], 2)} with {triggered['triggers']} triggers on"
                 f" ActionExecution.updated: {_f(triggered['roundtrips_per_job'])} round trips)")
    return text


def details(results: dict) -> str:
    rows = results["rows"]
    out = []
    rss = results.get("rss") or {}
    out.append(f"- Peak RSS of a server process: {_f(rss.get('server_mib'), 0, ' MiB')}"
               f" (a Starlark sandbox process beside it: {_f(rss.get('sandbox_mib'), 0, ' MiB')}).")
    rt = []
    for key, label in (("money", "money-moving call"), ("triggers", "money-moving call with 10 triggers on other types"),
                       ("read", "read"), ("mcp", "MCP tools/call"),
                       ("call_tree", "call tree (whole tree)"), ("queue", "queued execution")):
        row = rows.get(key) or {}
        ledger = row.get("ledger") or {}
        trips = ledger.get("roundtrips_per_call") or ledger.get("roundtrips_per_tree") or ledger.get("roundtrips_per_job")
        value = ledger.get("statements_per_call") or ledger.get("statements_per_tree") or ledger.get("statements_per_job")
        anchor = row.get("anchor_statements")
        if value is not None:
            rt.append(f"{label} {_f(trips)} round trips / {_f(value)} statements"
                      + (f" (anchor: {_f(anchor)} statements)" if anchor is not None else "") + _commits(ledger))
    if rt:
        out.append("- Database work per call: round trips counted in the server processes (a hook on psycopg: a"
                   " statement, or one pipeline of them; the pool's connection check included), and statements"
                   " from pg_stat_statements (BEGIN, COMMIT and SAVEPOINTs included): " + "; ".join(rt) + ".")
    baseline = results.get("baseline")
    if baseline:
        out.append(f"- Before: the ledger's code at `{baseline['revision']}`, run in this same run, on the same cluster,"
                   " with the same installed packages; the call tree's floor is measured right after each tree.")
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
