"""Layers built from stored policies are kept by their name and their policies' JSON text. No database."""

from __future__ import annotations

import enum

from ledger.policy.chain import Chain
from ledger.policy.layers import layer_from_stored

ALLOW_SELECT = {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.*"], "assertion": None}


def decide(layer, operation: str = "SELECT"):
    return Chain((layer,)).decide(operation, "financial.Account.document", principal={}, document={},
                                  has_document=True, action=None)


def test_equal_policies_read_again_get_the_layer_kept():
    first = layer_from_stored("tool kept", [dict(ALLOW_SELECT)])
    assert layer_from_stored("tool kept", [dict(ALLOW_SELECT)]) is first


def test_policies_that_differ_in_any_value_get_their_own_layer():
    first = layer_from_stored("tool edited", [dict(ALLOW_SELECT)])
    edited = layer_from_stored("tool edited", [{**ALLOW_SELECT, "actions": ["INSERT"]}])
    assert edited is not first
    assert decide(edited) is not None and decide(first) is None
    assert layer_from_stored("another tool", [dict(ALLOW_SELECT)]) is not first
    assert layer_from_stored("tool edited", [dict(ALLOW_SELECT)], remedy="fix it") is not first


def test_policies_spelt_with_other_python_types_decide_alike():
    class Effect(enum.Enum):
        ALLOW = "ALLOW"

    spelt = layer_from_stored("tool spelt", [{**ALLOW_SELECT, "effect": Effect.ALLOW, "actions": ("SELECT",)}])
    assert decide(spelt) is None
    assert decide(layer_from_stored("tool spelt", [dict(ALLOW_SELECT)])) is None


def test_policies_whose_text_cannot_be_written_still_make_their_layer():
    # A key that is not a string: the policies are parsed each time (and here have a problem).
    odd = [{**ALLOW_SELECT, 1: "x"}]
    layer = layer_from_stored("tool odd", odd)
    assert "its stored policies are invalid" in layer.name
    assert layer_from_stored("tool odd", odd) is not layer
    big = [{**ALLOW_SELECT, "assertion": f"context.document.amount < {2**40}"}]
    assert layer_from_stored("tool big", big) is layer_from_stored("tool big", big)
