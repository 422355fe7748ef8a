"""A layer of the chain built from stored policies (a client's, a tool version's), failing closed."""

from __future__ import annotations

import logging
import threading

import orjson

from ledger.policy.chain import Layer
from ledger.policy.statements import parse_policies

log = logging.getLogger("ledger.policy")

# Layers built from stored policies, by their name and the policies' JSON text: a request's client layer
# and each tool version's are the same from one call to the next, and a layer kept keeps its plans and
# the decisions it has evaluated (pure functions of their inputs). Keyed by content, so an edited client
# or server gets a layer of its new policies at once. Layers whose policies have problems are not kept:
# each use logs them, as before. The text is orjson's (a tenth of `json.dumps`' time): equal texts are
# equal JSON, and policies without problems are JSON (strings in lists and objects) whichever Python
# types spelt them; a value orjson refuses (a key not a string, an integer past 64 bits) is not kept.
_LAYERS: dict[tuple[str, str | None, bytes], Layer] = {}
_LAYERS_LIMIT = 1024
_LAYERS_LOCK = threading.Lock()


def layer_from_stored(name: str, policies: list[dict], *, remedy: str | None = None) -> Layer:
    """The layer `name` of the stored `policies`; `remedy` says how their owner fixes them.

    Policies are checked when written, but stored ones can stop compiling (an edited row, a CEL
    environment that changed). Dropping only the broken statements could drop a DENY and widen what
    the owner may do; so a layer whose stored policies have any problem allows nothing, and its name
    says why in every permission hint.
    """
    try:
        key = (name, remedy, orjson.dumps(policies))
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        key = None
    if key is not None:
        kept = _LAYERS.get(key)
        if kept is not None:
            return kept
    statements, problems = parse_policies(policies)
    if problems:
        log.error("%s has stored policies that do not parse: %s", name, problems)
        lead = f"; {remedy}: " if remedy else ": "
        return Layer(f"{name} (its stored policies are invalid, so it is allowed nothing{lead}"
                     f"{problems[0]['path']}: {problems[0]['message']})", ())
    layer = Layer(name, statements)
    if key is not None:
        with _LAYERS_LOCK:
            if len(_LAYERS) >= _LAYERS_LIMIT:
                _LAYERS.clear()
            _LAYERS[key] = layer
    return layer
