"""The direct single-exchange answer's two shortcuts (ledger/api/mcp/exchange.py) against the SDK's own steps:
a tool result shaped without `ServerRunner._serialize` must be the dict it makes, key order included, and
headers parsed once must read as starlette's `Headers` reads them. Whatever a shortcut does not cover
takes the SDK's way."""

from __future__ import annotations

import json
import uuid

import mcp_types as types
import pytest
from mcp.server import Server
from mcp.server.runner import ServerRunner
from starlette.datastructures import Headers

from ledger.api.mcp.exchange import SHAPED_VERSION, _Headers, _response_body, shaped_tool_result
from ledger.api.mcp.json_text import floats_in_json
from ledger.api.mcp.tools import ListedTool, failed, succeeded

SERVER = Server("ledger")
SHAPER = ServerRunner(SERVER, None, None)  # type: ignore[arg-type]
OBJECT_TOOL = ListedTool("t", {}, {"tool": {"outputSchema": {"type": "object"}}})
SCALAR_TOOL = ListedTool("t", {}, {"tool": {"outputSchema": {"type": "string"}}})
META = {"ledger/executionId": "6f1c1d64-7d1e-4d7f-9b1c-1d2a3b4c5d6e"}


def _wire(shaped: dict) -> str:
    return json.dumps(shaped, separators=(",", ":"))


LEDGER_RESULTS = {
    "an object output": succeeded(OBJECT_TOOL, {"balance": "10.00", "id": "a"}, META),
    "nested nulls, lists, numbers": succeeded(OBJECT_TOOL, {"n": None, "l": [None, {"a": None}, 1.5, -0.0, 1e300,
                                                                            2 ** 80, True]}, META),
    "non-ASCII text": succeeded(OBJECT_TOOL, {"name": "Zoë ✓ 𝄞", "\u00e9": "\u2028"}, META),
    "a wrapped scalar": succeeded(SCALAR_TOOL, "just text", META),
    "a null output": succeeded(OBJECT_TOOL, None, META),
    "a session id": succeeded(OBJECT_TOOL, {"x": 1}, {**META, "ledger/sessionId": "s-1"}),
    "a null member of _meta": succeeded(OBJECT_TOOL, {"x": 1}, {**META, "ledger/sessionId": None}),
    "an empty _meta": succeeded(OBJECT_TOOL, {"x": 1}, {}),
    "a failure without a hint": failed("bad_request", "no such account", None, META),
    "a failure with a hint": failed("retryable", "try again", "later", {**META, "ledger/preview": True}),
    "no _meta": types.CallToolResult(content=[types.TextContent(text="t")], structured_content={"a": [1]}),
    "no content": types.CallToolResult(content=[], is_error=True, _meta={"k": {"deep": [None]}}),
    "two text blocks": types.CallToolResult(content=[types.TextContent(text="a"), types.TextContent(text="b")]),
}


# The ledger's server stamps a serverInfo of strings only, which the route says (`info_of_strings`).
@pytest.mark.parametrize("info_of_strings", [False, True])
@pytest.mark.parametrize("result", LEDGER_RESULTS.values(), ids=LEDGER_RESULTS.keys())
def test_a_ledger_tool_result_is_shaped_as_the_sdk_serializes_it(result, info_of_strings):
    assert all(type(value) is str for value in SERVER.server_info_stamp.values())
    shaped = shaped_tool_result(result, lambda: SERVER.server_info_stamp, info_of_strings=info_of_strings)
    assert shaped is not None
    assert _wire(shaped[0]) == _wire(SHAPER._serialize("tools/call", SHAPED_VERSION, result))


@pytest.mark.parametrize("info_of_strings", [False, True])
@pytest.mark.parametrize("name", LEDGER_RESULTS)
def test_a_shaped_result_says_whether_it_holds_a_float(name, info_of_strings):
    _, holds_float = shaped_tool_result(LEDGER_RESULTS[name], lambda: SERVER.server_info_stamp,
                                        info_of_strings=info_of_strings)
    assert holds_float is (name == "nested nulls, lists, numbers")


OTHER_RESULTS = {
    "a non-finite float": succeeded(OBJECT_TOOL, {"x": float("nan")}, META),
    "an infinity in _meta": types.CallToolResult(content=[], _meta={"k": float("inf")}),
    "a tuple": types.CallToolResult(content=[], structured_content={"t": (1, 2)}),
    "a non-string key": types.CallToolResult(content=[], structured_content={"d": {1: "one"}}),
    "a serverInfo of its own": types.CallToolResult(content=[], _meta={"io.modelcontextprotocol/serverInfo": None}),
    "an annotated block": types.CallToolResult(content=[types.TextContent(text="a", annotations={"priority": 1})]),
    "a block's _meta": types.CallToolResult(content=[types.TextContent(text="a", _meta={"k": 1})]),
    "an image": types.CallToolResult(content=[types.ImageContent(data="AAAA", mime_type="image/png")]),
    "another result type": types.CallToolResult(content=[], result_type="input_required"),
    "a listing": types.ListToolsResult(tools=[]),
}


@pytest.mark.parametrize("result", OTHER_RESULTS.values(), ids=OTHER_RESULTS.keys())
def test_a_result_the_shortcut_does_not_cover_is_left_to_the_sdk(result):
    assert shaped_tool_result(result, lambda: SERVER.server_info_stamp) is None


def test_a_shaped_result_stamps_a_server_info_of_its_own():
    first, _ = shaped_tool_result(LEDGER_RESULTS["an object output"], lambda: SERVER.server_info_stamp)
    second, _ = shaped_tool_result(LEDGER_RESULTS["an object output"], lambda: SERVER.server_info_stamp)
    info = "io.modelcontextprotocol/serverInfo"
    assert first["_meta"][info] == second["_meta"][info] and first["_meta"][info] is not second["_meta"][info]


RAW_HEADERS = [(b"host", b"127.0.0.1:8000"), (b"accept", b"application/json, text/event-stream"),
               (b"content-type", b"application/json"), (b"x-repeated", b"first"), (b"x-repeated", b"second"),
               (b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", b"tools/call"),
               (b"mcp-name", b"=?base64?w6k=?="), (b"x-latin", "caf\u00e9".encode("latin-1"))]


def test_headers_parsed_once_read_as_starlette_s_headers_read_them():
    parsed = _Headers.of(RAW_HEADERS)
    starlette = Headers(scope={"type": "http", "headers": RAW_HEADERS})
    assert dict(parsed) == dict(starlette)
    for name in ("host", "accept", "content-type", "x-repeated", "mcp-name", "x-latin", "origin", "Accept"):
        assert parsed.get(name) == starlette.get(name)
        assert (parsed[name] if name in parsed else None) == (starlette[name] if name in starlette else None)


@pytest.mark.parametrize("extra", [(b"mcp-method", b"tools/call"), (b"mcp-protocol-version", b"2026-07-28"),
                                   (b"mcp-name", b"other")])
def test_a_routing_header_sent_twice_is_left_to_the_sdk(extra):
    assert _Headers.of([*RAW_HEADERS, extra]) is None


def test_a_header_name_not_in_lower_case_is_left_to_the_sdk():
    assert _Headers.of([*RAW_HEADERS, (b"Origin", b"http://example.com")]) is None


def _standard_library_body(request_id, result) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":"),
                      allow_nan=False).encode()


BODIES = {
    "a shaped call": ("1", shaped_tool_result(LEDGER_RESULTS["an object output"], lambda: SERVER.server_info_stamp)[0]),
    "escapes orjson and json.dumps write alike": (7, {"text": "\"quoted\" \\ \n\t\b\f\r \x00\x1f /"}),
    "a float": (7, {"x": 1e16, "y": 0.1}),
    "non-ASCII text": (7, {"x": "Zoë 𝄞"}),
    "DEL": (7, {"x": "\x7f"}),
    "an integer beyond 64 bits": (7, {"x": 2 ** 64, "y": -(2 ** 63) - 1}),
    "an integer at 64 bits' edges": (7, {"x": 2 ** 63 - 1, "y": -(2 ** 63)}),
    "nested lists and nulls": (None, {"a": [[], {}, [None, True, False, 0, ""]]}),
}


@pytest.mark.parametrize("request_id, result", BODIES.values(), ids=BODIES.keys())
def test_a_response_body_is_the_standard_library_s_text(request_id, result):
    assert _response_body(request_id, result) == _standard_library_body(request_id, result)


@pytest.mark.parametrize("name", [name for name in BODIES if name != "a float"])
def test_a_float_free_response_body_is_the_standard_library_s_text(name):
    request_id, result = BODIES[name]
    assert _response_body(request_id, result, float_free=True) == _standard_library_body(request_id, result)


@pytest.mark.parametrize("value, floats", [
    ({"x": 1.5}, True), ({"x": [0.0]}, True), ({1: "a"}, None), ({"x": ("a",)}, None), ({"x": uuid.uuid4()}, None),
    ({"x": float("inf")}, None), ({"a": [None, True, 1, "s", {"b": []}]}, False)])
def test_a_value_of_json_s_own_types_is_told_from_others_and_its_floats_found(value, floats):
    assert floats_in_json(value) is floats


TEXTS = {
    "plain values": {"a": [None, True, False, 0, -1, "s"], "b": {}},
    "escapes": "\"quoted\" \\ \n\t\b\f\r \x00\x1f \x7f /",
    "non-ASCII text": {"Zoë": "✓ 𝄞 \u2028 \u2029"},
    "a float": {"x": 1e16, "y": 0.1, "z": -0.0},
    "an integer beyond 64 bits": [2 ** 64, -(2 ** 63) - 1],
    "a lone surrogate": "\ud800",
    "a UUID (written by str)": {"id": uuid.UUID(int=7)},
}


@pytest.mark.parametrize("value", TEXTS.values(), ids=TEXTS.keys())
def test_a_tool_result_s_text_is_the_standard_library_s(value):
    from ledger.api.mcp.tools import _text

    assert _text(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# Which of TEXTS orjson writes, as ASCII-only text and as UTF-8 text: the others take the standard library.
WRITTEN_BY_ORJSON = {"plain values": (True, True), "escapes": (False, True), "non-ASCII text": (False, True)}


@pytest.mark.parametrize("name", TEXTS)
@pytest.mark.parametrize("ascii_only", [True, False])
def test_orjson_s_text_is_given_only_where_it_is_the_standard_library_s(name, ascii_only):
    from ledger.api.mcp.json_text import orjson_text

    text = orjson_text(TEXTS[name], ascii_only=ascii_only)
    if text is not None:
        assert text == json.dumps(TEXTS[name], ensure_ascii=ascii_only, separators=(",", ":")).encode()
    assert (text is not None) is WRITTEN_BY_ORJSON.get(name, (False, False))[0 if ascii_only else 1]


def test_the_security_and_accept_verdicts_kept_are_the_sdk_s():
    import asyncio

    from mcp.server.streamable_http import check_accept_headers
    from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
    from starlette.requests import Request

    from ledger.api.mcp.exchange import SingleExchange

    security = TransportSecurityMiddleware(TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://127.0.0.1:*"]))
    exchange = SingleExchange(SERVER, security)
    variants = [{}, {b"content-type": b"text/plain"}, {b"host": b"attacker.example"},
                {b"origin": b"http://attacker.example"}, {b"origin": b"http://127.0.0.1:9"},
                {b"accept": b"text/event-stream"}, {b"accept": b"*/*"}, {b"accept": b"application/*;q=0.5"}]

    async def verdicts():
        found = []
        for variant in variants * 2:  # the second time from what was kept
            raw = [(name, variant.get(name, value)) for name, value in RAW_HEADERS if name != b"x-repeated"]
            raw += [(name, value) for name, value in variant.items() if name not in dict(RAW_HEADERS)]
            sdk = Request({"type": "http", "method": "POST", "headers": raw})
            expected = await security.validate_request(sdk, is_post=True) is None and check_accept_headers(sdk)[0]
            found.append((await exchange._passes_security_and_accept(_Headers.of(raw)), expected))
        return found

    found = asyncio.run(verdicts())
    assert [kept for kept, _ in found] == [sdk for _, sdk in found]
    assert [kept for kept, _ in found[:len(variants)]] == [True, False, False, False, True, False, True, True]
