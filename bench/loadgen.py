"""HTTP load from outside the process under test: `wrk` (C, Lua-scripted bodies) when it is installed,
else a separate Python process (`python -m bench.loadgen SPEC`) with one keep-alive connection per thread.

A spec says what to send: `kind` "static" posts one fixed body; "template" posts `body` with each
`__UUID__` replaced by a fresh UUID per request (and, with `accounts`, `__FROM__` and `__TO__` by two
different random accounts); "invoke" posts an invokeAction of the transfer tool with
a fresh executionId and transfer id and two random accounts per request. `headers` are sent besides
Content-Type and the bearer token; a response counts as an error when it is not a 200 or contains one
of `error_markers` (default: a GraphQL error or a FAILED execution).
Both report the same JSON: requests, seconds, rps, errors, p50/p99 latency (ms).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


# ---------------------------------------------------------------------------- wrk

_LUA = r"""
local headers = %(headers)s
local kind = %(kind)s
local static_body = [==[%(body)s]==]
local query = [==[%(query)s]==]
local action = %(action)s
local accounts = { %(accounts)s }
local error_markers = { %(markers)s }
local counter = 0
graphql_errors = 0
local next_tid = 0
local threads = {}

function setup(thread)
  next_tid = next_tid + 1
  thread:set("tid", next_tid)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() * 7919 + tid * 104729)
  wrk.method = "POST"
  for k, v in pairs(headers) do wrk.headers[k] = v end
end

local function uuid4()
  counter = counter + 1
  return string.format("%%04x%%04x-%%04x-4%%03x-%%04x-%%04x%%08x", math.random(0, 65535), math.random(0, 65535),
    tid, math.random(0, 4095), 32768 + math.random(0, 16383), math.random(0, 65535), counter)
end

function request()
  if kind == "static" then
    return wrk.format(nil, nil, nil, static_body)
  end
  local a = 0
  local b = 0
  if #accounts > 1 then
    a = math.random(#accounts)
    b = math.random(#accounts - 1)
    if b >= a then b = b + 1 end
  end
  if kind == "template" then
    local body = string.gsub(static_body, "__UUID__", uuid4)
    if a > 0 then
      body = string.gsub(string.gsub(body, "__FROM__", accounts[a]), "__TO__", accounts[b])
    end
    return wrk.format(nil, nil, nil, body)
  end
  local body = '{"query":' .. query .. ',"variables":{"id":"' .. action .. '","input":{"executionId":"' .. uuid4()
    .. '","input":{"transfer_id":"' .. uuid4() .. '","from_account":"' .. accounts[a] .. '","to_account":"'
    .. accounts[b] .. '","amount":1}}}}'
  return wrk.format(nil, nil, nil, body)
end

function response(status, headers, body)
  local failed = status ~= 200
  for _, marker in ipairs(error_markers) do
    if not failed and string.find(body, marker, 1, true) then failed = true end
  end
  if failed then graphql_errors = graphql_errors + 1 end
end

function done(summary, latency, requests)
  local errors = 0
  for _, thread in ipairs(threads) do errors = errors + thread:get("graphql_errors") end
  io.write(string.format('BENCH_JSON {"requests":%%d,"duration_us":%%d,"graphql_errors":%%d,' ..
    '"socket_errors":%%d,"p50_ms":%%.3f,"p99_ms":%%.3f,"mean_ms":%%.3f}\n',
    summary.requests, summary.duration, errors,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
end
"""


def _lua_string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a valid Lua string literal for our ASCII values


def _wrk_script(spec: dict) -> str:
    headers = "{ " + ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in _headers(spec).items()) + " }"
    return _LUA % {
        "headers": headers, "kind": _lua_string(spec["kind"]), "body": spec.get("body", ""),
        "query": json.dumps(spec.get("query", "")), "action": _lua_string(spec.get("action", "")),
        "accounts": ", ".join(_lua_string(a) for a in spec.get("accounts", [])),
        "markers": ", ".join(_lua_string(m) for m in _error_markers(spec)),
    }


DEFAULT_ERROR_MARKERS = ('"errors"', '"FAILED"')


def _error_markers(spec: dict) -> list[str]:
    return list(spec.get("error_markers") or DEFAULT_ERROR_MARKERS)


def _headers(spec: dict) -> dict:
    headers = {"Content-Type": "application/json", **spec.get("headers", {})}
    if spec.get("token"):
        headers["Authorization"] = f"Bearer {spec['token']}"
    return headers


def run_wrk(spec: dict, connections: int, seconds: float) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_wrk_script(spec))
        script = f.name
    try:
        threads = max(1, min(2, connections))
        result = subprocess.run(
            ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--timeout", "60s",
             "-s", script, spec["url"]], capture_output=True, text=True, timeout=seconds + 120)
    finally:
        os.unlink(script)
    for line in result.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            raw = json.loads(line[len("BENCH_JSON "):])
            secs = raw["duration_us"] / 1e6
            return {"requests": raw["requests"], "seconds": round(secs, 3),
                    "rps": round(raw["requests"] / secs, 1) if secs else 0.0,
                    "errors": raw["graphql_errors"] + raw["socket_errors"], "p50_ms": round(raw["p50_ms"], 3),
                    "p99_ms": round(raw["p99_ms"], 3), "mean_ms": round(raw["mean_ms"], 3), "loadgen": "wrk"}
    raise RuntimeError(f"wrk failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}")


# ---------------------------------------------------------------------------- the Python load generator


def _body(spec: dict, rng: random.Random) -> bytes:
    if spec["kind"] == "static":
        return spec["body"].encode()
    if spec["kind"] == "template":
        body = spec["body"]
        while "__UUID__" in body:
            body = body.replace("__UUID__", str(uuid.uuid4()), 1)
        if len(spec.get("accounts") or ()) > 1:
            a, b = rng.sample(spec["accounts"], 2)
            body = body.replace("__FROM__", a).replace("__TO__", b)
        return body.encode()
    accounts = spec["accounts"]
    a, b = rng.sample(range(len(accounts)), 2)
    return json.dumps({"query": spec["query"], "variables": {"id": spec["action"], "input": {
        "executionId": str(uuid.uuid4()), "input": {
            "transfer_id": str(uuid.uuid4()), "from_account": accounts[a], "to_account": accounts[b],
            "amount": 1}}}}).encode()


def _python_load(spec: dict, connections: int, seconds: float) -> dict:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(spec["url"])
    headers = _headers(spec)
    markers = [m.encode() for m in _error_markers(spec)]
    latencies: list[list[float]] = [[] for _ in range(connections)]
    errors = [0] * connections
    stop_at = time.perf_counter() + seconds

    def worker(index: int) -> None:
        rng = random.Random(index * 7919 + os.getpid())
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        while time.perf_counter() < stop_at:
            body = _body(spec, rng)
            started = time.perf_counter()
            try:
                conn.request("POST", parts.path, body=body, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except OSError:
                errors[index] += 1
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
                continue
            latencies[index].append(time.perf_counter() - started)
            if response.status != 200 or any(marker in payload for marker in markers):
                errors[index] += 1
        conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    samples = sorted(x for per in latencies for x in per)
    return {"requests": len(samples), "seconds": round(elapsed, 3), "rps": round(len(samples) / elapsed, 1),
            "errors": sum(errors), "p50_ms": round(_centile(samples, 50) * 1000, 3),
            "p99_ms": round(_centile(samples, 99) * 1000, 3),
            "mean_ms": round(statistics.fmean(samples) * 1000, 3) if samples else 0.0, "loadgen": "python"}


def _centile(sorted_samples: list[float], p: float) -> float:
    if not sorted_samples:
        return 0.0
    index = min(len(sorted_samples) - 1, max(0, round(p / 100 * len(sorted_samples)) - 1))
    return sorted_samples[index]


def run_python(spec: dict, connections: int, seconds: float) -> dict:
    """The Python load generator, in a process of its own."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"spec": spec, "connections": connections, "seconds": seconds}, f)
        path = f.name
    try:
        result = subprocess.run([sys.executable, "-m", "bench.loadgen", path], capture_output=True, text=True,
                                timeout=seconds + 120, cwd=Path(__file__).resolve().parent.parent)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        raise RuntimeError(f"the load generator failed: {result.stderr.strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run(spec: dict, connections: int, seconds: float, *, loadgen: str = "auto") -> dict:
    if loadgen == "wrk" or (loadgen == "auto" and wrk_available()):
        return run_wrk(spec, connections, seconds)
    return run_python(spec, connections, seconds)


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(_python_load(job["spec"], job["connections"], job["seconds"])))
