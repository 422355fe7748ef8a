"""The call bound to a thread names itself in every line as text, whatever type its fields were bound as."""

from __future__ import annotations

import io
import json
import logging
import uuid

from ledger.logs import JsonFormatter, TextFormatter, bind_call, current_call, unbind_call, update_call

EXECUTION = uuid.UUID("6b1d0c1e-3f0a-4c2b-9a55-6f4b2d7e8a90")
TENANT = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def _logged(formatter: logging.Formatter) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("ledger.test.call_fields")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.info("hello")
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_call_bound_with_uuids_logs_their_text_in_json_lines():
    token = bind_call(execution_id=EXECUTION, root_execution_id=EXECUTION, tenant=TENANT, action="pay")
    try:
        line = json.loads(_logged(JsonFormatter()))
    finally:
        unbind_call(token)
    assert (line["executionId"], line["rootExecutionId"], line["tenant"], line["action"]) == (
        str(EXECUTION), str(EXECUTION), str(TENANT), "pay")


def test_a_call_bound_with_uuids_logs_their_text_in_text_lines():
    token = bind_call(execution_id=EXECUTION, tenant=TENANT)
    try:
        line = _logged(TextFormatter())
    finally:
        unbind_call(token)
    assert f"executionId={EXECUTION} tenant={TENANT}" in line


def test_the_current_call_is_given_as_text_with_the_fields_added_later():
    token = bind_call(execution_id=EXECUTION, tenant=TENANT)
    try:
        update_call(action="pay", root_execution_id=EXECUTION)
        assert current_call() == {"executionId": str(EXECUTION), "tenant": str(TENANT), "action": "pay",
                                  "rootExecutionId": str(EXECUTION)}
    finally:
        unbind_call(token)
    assert current_call() == {}
