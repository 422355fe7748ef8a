"""A 2026-07-28 `tools/call` or `tools/list` answered without the SDK's streamable-HTTP transport.

Nearly every MCP request is one of these two, and each is one self-contained POST answered with one JSON
body. The SDK's single-exchange entry (`mcp.server._streamable_http_modern.handle_modern_request`) wraps
its steps in a session manager, a starlette Request and Response, a per-request `Connection` and
`ServerSession`, and an anyio cancel scope for the connection's exit stack: none of them does anything for
these two methods on this server (JSON responses, no notifications, no server-to-client requests, handlers
that read only the ASGI scope). Here the SDK's own steps run in its order, on its functions: the transport
security check, the Accept check, the JSON-RPC envelope's validation, the routing-header ladder
(`classify_inbound_request`), the method's params validation for the envelope's version, the handler's
step through the server's middleware (the ledger's Telemetry), the result's shaping for that version
(`ServerRunner._serialize`: the per-version sieve and the serverInfo stamp) and the error mapping
(`modern_error_data`, `ERROR_CODE_HTTP_STATUS`).

A request that any check before the handler would refuse, or any other method or shape, is not answered
here: `prepare` returns None having sent nothing, and the route hands the request, body replayed, to the
SDK's transport, which refuses it in its own words (so every refusal is the SDK's, byte for byte). For
one that passes, the route's handler step opens the request's transaction, validates the params and
makes the call on one request thread (the transport's way takes two trips to one: the route's opening,
then the handler's).

The checks before the handler read the headers from the ASGI scope's list made a dict once (`_Headers`:
each name's first value, as starlette's `Headers.get` reads it), handed to the SDK's check functions in
place of a starlette Request, instead of one scan of the list per header read; the transport security and
Accept checks, which read nothing but four headers and the fixed settings, run once for each set of their
values. A `tools/call` result as the ledger builds one is shaped by `shaped_tool_result`, to the very dict
the SDK's `_serialize` makes of it, without its three dumps and the validation between them; any other
result takes `_serialize`.

`Mcp-Param-*` headers are not checked: the ledger's `get_tool_input_schema` resolves no schema
(ledger/api/mcp/endpoint.py), so the SDK's check (`_mcp_param_rejection`) passes every request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from functools import partial
from typing import Any


from mcp.server import Server
from mcp.server.runner import ServerRunner, _apply_middleware, _dump_result, modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (ERROR_CODE_HTTP_STATUS, MCP_METHOD_HEADER, MCP_NAME_HEADER,
                                MCP_PROTOCOL_VERSION_HEADER, InboundLadderRejection, classify_inbound_request)
import mcp_types as types
import orjson
from mcp_types import SERVER_INFO_META_KEY, ErrorData, JSONRPCError, JSONRPCRequest, JSONRPCResponse
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Scope as AsgiScope, Send

from ..json_codec import load_json
from .json_text import floats_in_json
from .telemetry import Unobserved

# The methods answered here; every other one goes to the SDK's transport.
METHODS = frozenset({"tools/call", "tools/list"})
# The headers the SDK refuses to see twice (`find_duplicated_routing_header`).
_ROUTING_HEADERS = frozenset(name.encode() for name in (MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER,
                                                         MCP_NAME_HEADER))
# How many sets of the four headers the security and Accept checks read are remembered with their verdict.
_VERDICTS_KEPT = 256
# The protocol revision whose result surface `shaped_tool_result` writes.
SHAPED_VERSION = "2026-07-28"


class _Request:
    """`ctx.request` as the handlers and the middleware read it: the ASGI scope."""

    __slots__ = ("scope",)

    def __init__(self, scope: AsgiScope) -> None:
        self.scope = scope


class _Context:
    """What the ledger's handlers and Telemetry read of the SDK's `ServerRequestContext`."""

    __slots__ = ("method", "params", "request_id", "request", "meta", "protocol_version")

    def __init__(self, method: str, params: dict | None, request_id: Any, scope: AsgiScope, version: str) -> None:
        self.method, self.params, self.request_id = method, params, request_id
        self.request = _Request(scope)
        self.meta = None
        self.protocol_version = version


class Prepared:
    """A request the SDK's checks before a handler let through: its envelope, the version it speaks, the
    handler registered for its method, and its last Authorization header (b"" without one)."""

    __slots__ = ("scope", "envelope", "version", "entry", "authorization")

    def __init__(self, scope: AsgiScope, envelope: JSONRPCRequest, version: str, entry: Any,
                 authorization: bytes) -> None:
        self.scope, self.envelope, self.version, self.entry = scope, envelope, version, entry
        self.authorization = authorization


# Runs the handler's step for a prepared request (the transaction, the params' validation, the call) and
# returns the handler's result.
Handler = Callable[[Prepared], Awaitable[Any]]


class SingleExchange:
    def __init__(self, server: Server[Any], security: TransportSecurityMiddleware) -> None:
        self.server = server
        self.security = security
        # Only `_serialize` of it is used: it reads the server's cache hints and serverInfo, nothing else.
        self._shaper = ServerRunner(server, None, None)  # type: ignore[arg-type]
        # The serverInfo stamp, dumped once as the SDK dumps it once per server; a response gets a copy of
        # its top level, which is all of it while every value is a string (otherwise the SDK's deep copy).
        stamp = server.server_info_stamp
        self._flat_stamp = stamp if all(type(value) is str for value in stamp.values()) else None
        # Whether the security and Accept checks pass, by the values of the headers they read.
        self._verdicts: dict[tuple[str | None, ...], bool] = {}

    def _server_info(self) -> dict[str, Any]:
        return dict(self._flat_stamp) if self._flat_stamp is not None else self.server.server_info_stamp

    async def prepare(self, scope: AsgiScope, body: bytes, limit: int) -> Prepared | None:
        """The request, when the SDK would take it to its single-exchange entry, its checks before a handler
        pass and it is one answered here; None otherwise (nothing is sent). `body` is the whole body, at
        most `limit` bytes."""
        raw = scope["headers"]
        headers = _Headers.of(raw)
        if headers is None or not _single_exchange(scope, headers):
            return None
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            return None  # the SDK answers 413 to the declared length (`RequestBodyLimitMiddleware`)
        if not await self._passes_security_and_accept(headers):
            return None
        try:
            # What `json.loads` (the SDK's read) reads too, the same; a body it reads otherwise, or not at
            # all, is refused here (and the SDK's transport reads it in its own way).
            decoded = read_body_json(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(decoded, dict) or "id" not in decoded or decoded.get("method") not in METHODS:
            return None
        try:
            envelope = JSONRPCRequest.model_validate(decoded)
        except ValueError:
            return None
        verdict = classify_inbound_request(decoded, headers=headers)
        if isinstance(verdict, InboundLadderRejection):
            return None
        entry = self.server.get_request_handler(envelope.method)
        if entry is None:
            return None
        # The last one counts, as the route reads it (`McpEndpoint._claims`); every name is in lower case.
        authorization = dict(raw).get(b"authorization", b"")
        return Prepared(scope, envelope, verdict.protocol_version, entry, authorization)

    async def _passes_security_and_accept(self, headers: _Headers) -> bool:
        """The SDK's transport security check (Content-Type, Host, Origin) and its Accept check, run once for
        each set of those four headers' values: nothing else goes into their verdict."""
        key = (headers.get("content-type"), headers.get("host"), headers.get("origin"), headers.get("accept"))
        passes = self._verdicts.get(key)
        if passes is None:
            request: Any = _ParsedRequest(headers)  # all that the two checks read of a Request
            passes = (await self.security.validate_request(request, is_post=True) is None
                      and check_accept_headers(request)[0])
            if len(self._verdicts) >= _VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[key] = passes
        return passes

    @staticmethod
    def validated(prepared: Prepared) -> Any:
        """The request's params as its handler takes them, validated as the SDK's kernel does
        (`ServerRunner._on_request`): for the envelope's version, then as the method's params type. Runs
        in the handler's step (after the transaction is opened, as when the SDK's transport calls it)."""
        method, params = prepared.envelope.method, prepared.envelope.params
        _methods.validate_client_request(method, prepared.version, params)
        return prepared.entry.params_type.model_validate({} if params is None else params, by_name=False)

    async def answer(self, prepared: Prepared, send: Send, handler: Handler) -> None:
        """Run `handler` through the server's middleware, shape its result for the wire and send it, or
        the JSON-RPC error it raised. An `Unobserved` refusal passes through, with nothing sent."""
        envelope, version = prepared.envelope, prepared.version
        ctx = _Context(envelope.method, envelope.params, envelope.id, prepared.scope, version)
        # The result shaped here without a float, which orjson writes as the standard library does.
        float_free: list[dict[str, Any]] = []

        async def handle(ctx: _Context) -> dict[str, Any]:
            result = await handler(prepared)
            if isinstance(result, ErrorData):
                raise MCPError.from_error_data(result)
            # Shaped for the wire inside the middleware chain, as the SDK's kernel does.
            if ctx.method == "tools/call" and version == SHAPED_VERSION and not self.server.cache_hints:
                shaped = shaped_tool_result(result, self._server_info, info_of_strings=self._flat_stamp is not None)
                if shaped is not None:
                    if not shaped[1]:
                        float_free.append(shaped[0])
                    return shaped[0]
            return self._shaper._serialize(ctx.method, version, result)

        call: Any = handle
        for middleware in reversed(self.server.middleware):
            call = partial(_apply_middleware, middleware, call)
        try:
            returned = await call(ctx)
            # A middleware that answered with a result of its own takes the general way.
            written_alike = bool(float_free) and returned is float_free[0]
            result = _dump_result(returned)
        except Unobserved:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK's exception-to-wire mapping, as its entry does
            error = JSONRPCError(jsonrpc="2.0", id=envelope.id, error=modern_error_data(exc))
            await _send(ERROR_CODE_HTTP_STATUS.get(error.error.code, 200), _dumped(error), send)
            return
        await _send(200, _response_body(envelope.id, result, float_free=written_alike), send)


def read_body_json(body: bytes) -> Any:
    """`load_json(body)`: orjson's value at once when orjson writes it back as the very bytes it read, as an
    SDK client sends its compact body. Each token is then orjson's own text of its value, which the
    standard library reads to the same value (an integer exactly, a float as its shortest text, a string
    without escapes, an object without a repeated key, in order): no walk of the value for a float is
    needed to tell that orjson read no number inexactly. Any other body takes `load_json`."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return load_json(body)
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return load_json(body)
    return value if written == body else load_json(body)


class _ParsedRequest:
    """`request.headers` as the SDK's transport security and Accept checks read it, on parsed headers."""

    __slots__ = ("headers",)

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class _Headers(Mapping[str, str]):
    """A request's headers as starlette's `Headers` reads them (each name's first value, in latin-1), from
    the ASGI scope's list made a dict once; a header is decoded when it is read."""

    __slots__ = ("_first",)

    def __init__(self, first: dict[bytes, bytes]) -> None:
        self._first = first

    @classmethod
    def of(cls, raw: list[tuple[bytes, bytes]]) -> _Headers | None:
        """None when a routing header appears twice (the SDK refuses it), or a name is not in lower case
        (ASGI's rule, on which `Headers`' lookups rely: such a request takes the SDK's way)."""
        first = dict(reversed(raw))
        if len(first) != len(raw):
            seen: set[bytes] = set()
            for name, _ in raw:
                if name in _ROUTING_HEADERS:
                    if name in seen:
                        return None
                    seen.add(name)
        names = b"".join(first)
        if names.lower() != names:
            return None
        return cls(first)

    def get(self, name: str, default: Any = None) -> Any:
        value = self._first.get(_NAMES.get(name) or _name_bytes(name))
        return default if value is None else value.decode("latin-1")

    def __getitem__(self, name: str) -> str:
        value = self._first.get(_NAMES.get(name) or _name_bytes(name))
        if value is None:
            raise KeyError(name)
        return value.decode("latin-1")

    def __iter__(self) -> Iterator[str]:
        return (name.decode("latin-1") for name in self._first)

    def __len__(self) -> int:
        return len(self._first)


# A header name as the scope's list holds it (lower case, latin-1), by the name a check reads: the checks read
# a handful of fixed names, so each is lowered and encoded once.
_NAMES: dict[str, bytes] = {}
_NAMES_KEPT = 64


def _name_bytes(name: str) -> bytes:
    encoded = name.lower().encode("latin-1")
    if len(_NAMES) < _NAMES_KEPT:
        _NAMES[name] = encoded
    return encoded


def _single_exchange(scope: AsgiScope, headers: _Headers) -> bool:
    """Whether the SDK's session manager takes the request to its 2026-era single-exchange entry: a POST
    whose MCP-Protocol-Version header names no handshake-era revision (`StreamableHTTPSessionManager`)."""
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    return scope.get("method") == "POST" and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


def shaped_tool_result(result: Any, server_info: Callable[[], dict[str, Any]], *,
                       info_of_strings: bool = False) -> tuple[dict[str, Any], bool] | None:
    """`ServerRunner._serialize("tools/call", "2026-07-28", result)` for a `CallToolResult` as the ledger builds
    one (text blocks, JSON values, a `_meta` dict), built directly, and whether it holds a float: the SDK
    dumps the model, validates the dump against the revision's surface, dumps that again (dropping `_meta`'s
    null members) and stamps a copy of the serverInfo. None for any other result, which takes `_serialize`:
    a value JSON mode would rewrite (a non-finite float, a tuple, a non-string key), a block other than plain
    text, a `_meta` of another kind or one that names serverInfo itself. `info_of_strings`: every value of
    the serverInfo is a string (a flat stamp), so it needs no look for a float or a non-JSON value."""
    if type(result) is not types.CallToolResult or result.result_type != "complete" or \
            type(result.is_error) is not bool:
        return None
    content = []
    for block in result.content:
        if type(block) is not types.TextContent or block.type != "text" or type(block.text) is not str or \
                block.annotations is not None or block.meta is not None:
            return None
        content.append({"text": block.text, "type": "text"})
    structured, meta = result.structured_content, result.meta
    shown: dict[str, Any] | None = None
    if meta is not None:
        if type(meta) is not dict:
            return None
        shown = {}
        for key, value in meta.items():
            if type(key) is not str or key == SERVER_INFO_META_KEY:
                return None
            if value is not None:
                shown[key] = value
    info = server_info()
    holds_float = floats_in_json([structured, shown] if info_of_strings else [structured, shown, info])
    if holds_float is None:
        return None
    shaped: dict[str, Any] = {}
    if shown is not None:
        shown[SERVER_INFO_META_KEY] = info
        shaped["_meta"] = shown
    shaped["content"] = content
    shaped["isError"] = result.is_error
    shaped["resultType"] = "complete"
    if structured is not None:
        shaped["structuredContent"] = structured
    if shown is None:
        shaped["_meta"] = {SERVER_INFO_META_KEY: info}  # stamped after the sieve: the last key
    return shaped, holds_float


def _dumped(message: JSONRPCResponse | JSONRPCError) -> bytes:
    """A reply as the SDK's entry serializes it (`_streamable_http_modern._write`)."""
    return json.dumps(message.model_dump(mode="json", by_alias=True, exclude_none=True),
                      separators=(",", ":")).encode()


def _response_body(request_id: Any, result: dict[str, Any], *, float_free: bool = False) -> bytes:
    """`_dumped(JSONRPCResponse(...))` without validating and dumping the result a second time: it is the
    wire form already (`_serialize` dumped it in JSON mode), and the envelope's `result: dict[str, Any]` dumps
    it unchanged (nulls kept). A value JSON has no literal for (NaN, an infinity), which pydantic would
    write differently, takes the SDK's way.

    `float_free`: the result is of JSON's own types and holds no float (`shaped_tool_result` says so), which
    orjson then writes as the standard library does, where its text is ASCII without DEL (the standard
    library escapes every other character; orjson writes it as it is, and refuses an integer beyond 64
    bits)."""
    message = {"jsonrpc": "2.0", "id": request_id, "result": result}
    if float_free:
        try:
            text = orjson.dumps(message)
        except orjson.JSONEncodeError:
            pass
        else:
            if text.isascii() and b"\x7f" not in text:
                return text
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError):
        return _dumped(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result))


async def _send(status: int, body: bytes, send: Send) -> None:
    """The headers a starlette JSON Response sends, as the SDK's entry answers."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
