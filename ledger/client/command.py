"""`ledger publish`: the command-line face of `ledger.client.publish`."""

from __future__ import annotations

import argparse
import os
import sys

from . import DEFAULT_URL, LedgerClient
from .errors import LedgerRequestError
from .publish import DefinitionError, PublishRejected, publish


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="definition files (*.toml) or directories of them")
    parser.add_argument("--url", help=f"the GraphQL endpoint (env LEDGER_URL, default {DEFAULT_URL})")
    parser.add_argument("--token", help="bearer token (env LEDGER_TOKEN)")
    parser.add_argument("--dry-run", action="store_true",
                        help="run everything on the server and roll it back (Ledger-Dry-Run: true)")


def run(args: argparse.Namespace) -> int:
    """Exit codes: 0 published (or nothing to do), 1 the server rejected it or could not be reached,
    2 the definition files or the options are wrong (nothing was sent)."""
    token = args.token or os.environ.get("LEDGER_TOKEN")
    if not token:
        print("error: no token: set LEDGER_TOKEN or pass --token (`ledger token` mints one)", file=sys.stderr)
        return 2
    client = LedgerClient(args.url or os.environ.get("LEDGER_URL") or DEFAULT_URL, token)
    try:
        result = publish(client, args.paths, dry_run=args.dry_run)
    except DefinitionError as exc:
        print("error: nothing was published:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except PublishRejected as exc:
        print(f"error: the server rejected the publish ({exc.code}); nothing was written:", file=sys.stderr)
        for item in exc.located:
            print(f"  {item}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        if exc.unchecked:
            print(f"not checked (the request stopped at the first failure): {', '.join(exc.unchecked)}",
                  file=sys.stderr)
        return 1
    except LedgerRequestError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 1
    if result.dry_run:
        print(f"dry run against {client.url}: the server ran it and rolled it back; nothing was written")
    for warning in result.warnings:  # DESIGN 16: the write succeeded; a model client may misread the schema
        print(warning, file=sys.stderr)
    for change in result.changes:
        print(change.describe())
    for server in result.servers:
        print(server.describe())
    suffix = " (dry run)" if result.dry_run else ""
    if result.server_summary():
        print(result.server_summary() + suffix)
    print(result.summary() + suffix)
    return 0
