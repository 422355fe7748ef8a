"""A layer of the chain built from stored policies (a client's, a tool version's), failing closed."""

from __future__ import annotations

import logging

from ledger.policy.chain import Layer
from ledger.policy.statements import parse_policies

log = logging.getLogger("ledger.policy")


def layer_from_stored(name: str, policies: list[dict], *, remedy: str | None = None) -> Layer:
    """The layer `name` of the stored `policies`; `remedy` says how their owner fixes them.

    Policies are checked when written, but stored ones can stop compiling (an edited row, a CEL
    environment that changed). Dropping only the broken statements could drop a DENY and widen what
    the owner may do; so a layer whose stored policies have any problem allows nothing, and its name
    says why in every permission hint.
    """
    statements, problems = parse_policies(policies)
    if problems:
        log.error("%s has stored policies that do not parse: %s", name, problems)
        lead = f"; {remedy}: " if remedy else ": "
        return Layer(f"{name} (its stored policies are invalid, so it is allowed nothing{lead}"
                     f"{problems[0]['path']}: {problems[0]['message']})", ())
    return Layer(name, statements)
