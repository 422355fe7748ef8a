"""uvicorn's HTTP protocols with TCP_NODELAY on every connection.

asyncio sets TCP_NODELAY only on sockets whose `proto` is IPPROTO_TCP. With `--workers N`, uvicorn hands
the listening socket to its worker processes, where it (and every connection it accepts) reports proto
0, so Nagle's algorithm stays on: a response written as two segments (head, then body) waits for the
client's delayed ACK, about 40 ms per request on Linux. Setting the option ourselves removes that.

Both of uvicorn's HTTP/1.1 parsers get the same subclass: h11 (pure Python) and httptools (llhttp, C).
"""

from __future__ import annotations

import socket

from uvicorn.protocols.http.h11_impl import H11Protocol


def set_nodelay(transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools not installed
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

if HttpToolsProtocol is not None:
    class NoDelayHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport) -> None:  # type: ignore[override]
            set_nodelay(transport)
            super().connection_made(transport)
