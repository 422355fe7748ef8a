"""Child executionIds are derived with a server-held key: no client can take one in advance (DESIGN 17)."""

from __future__ import annotations

import uuid

from invoke_helpers import INVOKE, invoke, publish, tool

CEL_TWICE = 'def run(event):\n    cel("1 + 1", {})\n    return cel("2 + 2", {})\n'


def _old_scheme_child_id(parent: str, sequence: int, attempt: int = 1) -> str:
    """What child ids were before DESIGN 17: computable by anyone who knows the parent's executionId."""
    return str(uuid.uuid5(uuid.UUID(parent), f"{attempt}:{sequence}"))


def _squat(api, action_id: str, execution_id: str) -> None:
    assert invoke(api, action_id, execution_id=execution_id)["status"] == "SUCCEEDED"


def test_a_child_id_computed_the_old_way_and_used_first_no_longer_wedges_its_parent(api):
    caller = publish(api, tool("caller", CEL_TWICE))
    squatter = publish(api, tool("squatter", 'def run(event):\n    return 1\n'))
    parent = str(uuid.uuid4())
    _squat(api, squatter, _old_scheme_child_id(parent, 1))
    _squat(api, squatter, _old_scheme_child_id(parent, 2))
    result = invoke(api, caller, execution_id=parent)
    assert result["status"] == "SUCCEEDED", result
    assert result["invocation"]["output"] == 4
    assert {c["executionId"] for c in result["children"]}.isdisjoint(
        {_old_scheme_child_id(parent, 1), _old_scheme_child_id(parent, 2)})


def test_child_ids_are_deterministic_for_a_repeat_and_across_processes(api, services, settings, db_url):
    from ledger.wiring import open_services

    caller = publish(api, tool("caller", CEL_TWICE))
    parent = str(uuid.uuid4())
    first = invoke(api, caller, execution_id=parent)
    repeat = invoke(api, caller, execution_id=parent)
    ids = [c["executionId"] for c in first["children"]]
    assert [c["executionId"] for c in repeat["children"]] == ids
    # Another process against the same database derives the same ids (the key comes from the shared secret).
    other = open_services(settings, db_url)
    try:
        assert [str(other.execution_ids.child(uuid.UUID(parent), 1, n)) for n in (1, 2)] == ids
    finally:
        other.close()
    for child in ids:
        # A valid RFC 9562 UUID of version 8 (custom), with the RFC variant.
        assert uuid.UUID(child).version == 8 and uuid.UUID(child).variant == uuid.RFC_4122


def test_a_child_id_already_taken_fails_the_call_with_a_clear_code_that_is_not_retryable(api, services):
    caller = publish(api, tool("caller", CEL_TWICE))
    squatter = publish(api, tool("squatter", 'def run(event):\n    return 1\n'))
    parent = str(uuid.uuid4())
    # Only a holder of the server's key can compute this; a row may hold it from before the key, or by chance.
    _squat(api, squatter, str(services.execution_ids.child(uuid.UUID(parent), 1, 2)))
    for _ in range(2):
        error = api.error(INVOKE, {"id": caller, "input": {"executionId": parent, "input": {}}})
        assert error["extensions"]["code"] == "execution_id_conflict", error
        assert not error["extensions"].get("retryable")
        assert "new executionId" in error["extensions"]["hint"]
    fresh = invoke(api, caller)
    assert fresh["status"] == "SUCCEEDED"


def test_child_and_trigger_ids_are_hmac_sha256_of_their_inputs_under_the_key(services):
    """The derivation is fixed: ids already on record (a repeat after an upgrade) must keep matching."""
    import hashlib
    import hmac

    from ledger.executions.ids import uuid_v8

    key = services.execution_ids.key
    parent, cause = uuid.uuid4(), uuid.uuid4()
    for attempt, sequence in ((1, 1), (1, 2), (3, 1024)):
        message = parent.bytes + attempt.to_bytes(8, "big") + sequence.to_bytes(8, "big")
        expected = uuid_v8(hmac.new(key, message, hashlib.sha256).digest()[:16])
        assert services.execution_ids.child(parent, attempt, sequence) == expected
    message = b"trigger" + parent.bytes + cause.bytes + (7).to_bytes(8, "big")
    assert services.execution_ids.triggered(parent, cause, 7) == uuid_v8(hmac.new(key, message, hashlib.sha256).digest()[:16])
    raw = bytes(range(16))
    assert uuid_v8(raw).version == 8 and uuid_v8(raw).variant == uuid.RFC_4122
    assert uuid_v8(raw).int & ~((0xF << 76) | (0x3 << 62)) == int.from_bytes(raw, "big") & ~((0xF << 76) | (0x3 << 62))


def test_a_child_id_is_the_uuid_the_standard_library_makes_of_the_same_bits():
    """uuid_v8 builds its UUID without UUID.__init__'s checks: the same value, text, hash and comparisons."""
    import hashlib
    import hmac

    from ledger.executions.ids import ExecutionIds, uuid_v8

    for raw in (bytes(16), bytes(range(16)), b"\xff" * 16, hashlib.sha256(b"x").digest()):
        value = int.from_bytes(raw[:16], "big") & ~((0xF << 76) | (0x3 << 62)) | (0x8 << 76) | (0x2 << 62)
        made, standard = uuid_v8(raw), uuid.UUID(int=value)
        assert (made, str(made), hash(made), made.bytes, made.is_safe) == (
            standard, str(standard), hash(standard), standard.bytes, standard.is_safe)
        assert type(made) is uuid.UUID and not made < standard and not made > standard
    # The key's padded blocks absorbed once give HMAC-SHA256 itself, for a key longer than a block too.
    for key in (b"k", bytes(64), b"long key " * 10):
        ids = ExecutionIds(key)
        parent = uuid.uuid4()
        message = parent.bytes + (2).to_bytes(8, "big") + (9).to_bytes(8, "big")
        assert ids.child(parent, 2, 9) == uuid_v8(hmac.new(key, message, hashlib.sha256).digest())


def test_the_ids_of_one_attempts_children_are_the_ids_child_derives():
    from ledger.executions.ids import ExecutionIds

    ids = ExecutionIds.from_secret("a secret")
    for parent in (uuid.UUID(int=0), uuid.uuid4(), uuid.UUID(int=2**128 - 1)):
        for attempt in (0, 1, 7, 2**64 - 1):
            children = ids.children_of(parent, attempt)
            for sequence in (0, 1, 2, 1024, 2**32, 2**64 - 1):
                assert children(sequence) == ids.child(parent, attempt, sequence)
    assert ids.children_of(parent, 1)(1) != ExecutionIds.from_secret("another").children_of(parent, 1)(1)
