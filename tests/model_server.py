"""A local HTTP server that answers as a model provider's API would: each test queues the answers
(status, JSON body, headers) and reads back every request (path, headers, JSON body) it was sent."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Seen:
    path: str
    headers: dict
    body: dict


@dataclass
class Answer:
    status: int
    body: object
    headers: dict = field(default_factory=dict)
    delay: float = 0.0


class ModelServer:
    def __init__(self):
        self.answers: list[Answer] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with server._lock:
                    server.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()},
                                            json.loads(raw)))
                    answer = server.answers.pop(0) if server.answers else Answer(500, {"error": "no answer queued"})
                if answer.delay:
                    time.sleep(answer.delay)
                data = answer.body.encode() if isinstance(answer.body, str) else json.dumps(answer.body).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def queue(self, status: int, body: object, headers: dict | None = None, delay: float = 0.0) -> None:
        self.answers.append(Answer(status, body, headers or {}, delay))

    def __enter__(self) -> "ModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
