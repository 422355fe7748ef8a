"""The GraphiQL page and its static assets. The page reads a bearer token from the URL fragment
(`#token=...`, never sent to the server in a URL) and sends it as `Authorization` on every request.

Its assets are pinned `graphiql`, `react` and `react-dom` builds from the npm registry. They are fetched
(`ledger assets fetch`, run by the install step, or by `ledger serve` on its first start when missing)
into an ignored cache and served by this server under `/graphiql/<file>`, so that GraphiQL works without
internet. Where no cache holds them, the page loads them from the public CDN (pinned by subresource
integrity) and the server logs that it fell back: that renders a blank page on a machine without internet.

Caches looked in, first found wins: `$LEDGER_GRAPHIQL_DIR`, `<data dir>/graphiql/`, and the source
checkout's `.cache/graphiql/` (where `make install` puts them).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("ledger.graphiql")

CDN = "https://unpkg.com"
NPM_REGISTRY = "https://registry.npmjs.org"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # the registry's tarball integrity (dist.integrity)


@dataclass(frozen=True)
class Asset:
    package: Package
    path: str  # inside the package
    integrity: str  # of the file itself (subresource integrity)
    media_type: str


REACT = Package("react", "18.3.1",
                "sha512-wS+hAgJShR0KhEvPJArfuPVN1+Hz1t0Y6n5jLrGQbkb4urgPE/0Rve+1kMB1v/oWgHgm4WIcV+i7F2pTVj+2iQ==")
REACT_DOM = Package("react-dom", "18.3.1",
                    "sha512-5m4nQKp+rZRb09LNH59GM4BxTh9251/ylbKIbpe7TpGxfJ+9kv6BLkLBXIjjspbgbnIBNqlI23tRnTWT0snUIw==")
GRAPHIQL = Package("graphiql", "3.8.3",
                   "sha512-cuPDYtXVKV86Pu5PHBX642Odi/uVEE2y1Jxq5rGO/Qy1G2lRp7ZZ7a/T30RzxhuLSWo9zUbzq0P3U49//H0Ugw==")

JS = "application/javascript; charset=utf-8"
# By file name in the cache and under /graphiql/: versioned, so that a browser may keep it for ever.
ASSETS: dict[str, Asset] = {
    "react-18.3.1.min.js": Asset(
        REACT, "umd/react.production.min.js",
        "sha384-DGyLxAyjq0f9SPpVevD6IgztCFlnMF6oW/XQGmfe+IsZ8TqEiDrcHkMLKI6fiB/Z", JS),
    "react-dom-18.3.1.min.js": Asset(
        REACT_DOM, "umd/react-dom.production.min.js",
        "sha384-gTGxhz21lVGYNMcdJOyq01Edg0jhn/c22nsx0kyqP0TxaV5WVdsSH1fSDUf5YJj1", JS),
    "graphiql-3.8.3.min.js": Asset(
        GRAPHIQL, "graphiql.min.js",
        "sha384-HbRVEFG0JGJZeAHCJ9Xm2+tpknBQ7QZmNlO/DgZtkZ0aJSypT96YYGRNod99l9Ie", JS),
    "graphiql-3.8.3.min.css": Asset(
        GRAPHIQL, "graphiql.min.css",
        "sha384-Mq3vbRBY71jfjQAt/DcjxUIYY33ksal4cgdRt9U/hNPvHBCaT2JfJ/PTRiPKf0aM", "text/css; charset=utf-8"),
}
# Which file each tag of the page loads.
ROLES = {"react": "react-18.3.1.min.js", "react_dom": "react-dom-18.3.1.min.js",
         "graphiql": "graphiql-3.8.3.min.js", "css": "graphiql-3.8.3.min.css"}
PACKAGES = tuple(dict.fromkeys(asset.package for asset in ASSETS.values()))

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8" />
  <title>Ledger GraphiQL</title>
  <style>body {{ margin: 0; height: 100vh; }} #graphiql {{ height: 100vh; }}</style>
  <link rel="stylesheet" href="{css[url]}"{css[integrity]} crossorigin="anonymous" />
</head>
<body>
  <div id="graphiql">Loading GraphiQL...</div>
  <script src="{react[url]}"{react[integrity]} crossorigin="anonymous"></script>
  <script src="{react_dom[url]}"{react_dom[integrity]} crossorigin="anonymous"></script>
  <script src="{graphiql[url]}"{graphiql[integrity]} crossorigin="anonymous"></script>
  <script>
    if (typeof GraphiQL === "undefined") {{
      document.getElementById("graphiql").textContent =
        "GraphiQL could not load its scripts ({source}). Run `ledger assets fetch` on the server.";
    }} else {{
      const params = new URLSearchParams(window.location.hash.slice(1));
      const token = params.get("token") || window.localStorage.getItem("ledger-token") || "";
      if (params.get("token")) {{
        window.localStorage.setItem("ledger-token", token);
        history.replaceState(null, "", window.location.pathname);
      }}
      const headers = token ? {{ Authorization: "Bearer " + token }} : {{}};
      const fetcher = GraphiQL.createFetcher({{ url: window.location.pathname, headers }});
      const root = ReactDOM.createRoot(document.getElementById("graphiql"));
      root.render(React.createElement(GraphiQL, {{
        fetcher,
        defaultEditorToolsVisibility: true,
        defaultQuery: "{{ viewer {{ tenantId clientId clientName }} }}\\n",
        headers: JSON.stringify(headers, null, 2),
      }}));
    }}
  </script>
</body>
</html>
"""


# ---------------------------------------------------------------------------- where the assets are


def source_cache_dir() -> Path | None:
    """`.cache/graphiql/` of the source checkout this package runs from (an editable install), if any."""
    root = Path(__file__).resolve().parents[2]
    return root / ".cache" / "graphiql" if (root / "pyproject.toml").exists() else None


def cache_dirs(settings: Any) -> list[Path]:
    dirs: list[Path] = []
    if os.environ.get("LEDGER_GRAPHIQL_DIR"):
        dirs.append(Path(os.environ["LEDGER_GRAPHIQL_DIR"]))
    dirs.append(Path(settings.data_dir) / "graphiql")
    source = source_cache_dir()
    if source is not None:
        dirs.append(source)
    return dirs


def asset_dir(services: Any) -> Path:
    """The cache `ledger serve` fetches into: `<data dir>/graphiql/`."""
    return Path(services.settings.data_dir) / "graphiql"


def _sri(data: bytes) -> str:
    return "sha384-" + base64.b64encode(hashlib.sha384(data).digest()).decode()


def _holds_all(directory: Path) -> bool:
    """Whether the directory holds every pinned asset. Their content was verified when they were
    fetched (and written atomically); the page pins each by its hash, so a browser refuses a changed one."""
    return all((directory / name).is_file() for name in ASSETS)


def verify(directory: Path) -> list[str]:
    """The assets in `directory` that are missing or do not match their pinned hash."""
    problems = []
    for name, asset in ASSETS.items():
        try:
            data = (directory / name).read_bytes()
        except OSError:
            problems.append(f"{name} is missing")
            continue
        if _sri(data) != asset.integrity:
            problems.append(f"{name} does not match its pinned hash")
    return problems


def find_assets(settings: Any) -> Path | None:
    """The first cache directory that holds every pinned asset, verified."""
    for directory in cache_dirs(settings):
        if _holds_all(directory):
            return directory
    return None


# ---------------------------------------------------------------------------- fetching


class FetchFailed(Exception):
    pass


def _tarball_integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _npm_pack(package: Package, workdir: Path, timeout: float) -> bytes:
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm is not installed")
    spec = f"{package.name}@{package.version}"
    result = subprocess.run(
        [npm, "pack", spec, "--json", "--pack-destination", str(workdir), "--fetch-retries=1",
         "--fetch-retry-mintimeout=1000", "--fetch-retry-maxtimeout=5000", "--fetch-timeout=30000",
         "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"],
        capture_output=True, text=True, timeout=timeout, cwd=workdir, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        said = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()][:2]
        raise FetchFailed(f"`npm pack {spec}` failed: {' / '.join(said) or f'exit {result.returncode}'}")
    try:
        filename = json.loads(result.stdout)[0]["filename"]
    except (ValueError, LookupError, TypeError):
        raise FetchFailed(f"`npm pack {spec}` printed no package: {result.stdout[-300:]}") from None
    return (workdir / filename).read_bytes()


def _registry_download(package: Package, timeout: float) -> bytes:
    registry = os.environ.get("npm_config_registry") or NPM_REGISTRY
    url = f"{registry.rstrip('/')}/{package.name}/-/{package.name.split('/')[-1]}-{package.version}.tgz"
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a pinned https URL
        return response.read()


def _tarball(package: Package, workdir: Path, timeout: float) -> bytes:
    """The package's tarball from the npm registry, checked against its pinned integrity."""
    try:
        data = _npm_pack(package, workdir, timeout)
    except FileNotFoundError:
        try:
            data = _registry_download(package, timeout)
        except OSError as exc:
            raise FetchFailed(f"npm is not installed, and downloading {package.name}@{package.version} "
                              f"from the registry failed: {exc}") from None
    except subprocess.TimeoutExpired:
        raise FetchFailed(f"`npm pack {package.name}@{package.version}` took longer than {timeout:.0f} s") from None
    if _tarball_integrity(data) != package.integrity:
        raise FetchFailed(f"{package.name}@{package.version} does not match its pinned integrity")
    return data


def fetch_assets(dest: Path, *, timeout: float = 90.0) -> Path:
    """Fetch every pinned asset into `dest` (atomically, file by file); FetchFailed says why not.

    Fetches nothing when `dest` already holds them all, verified. Writes `manifest.json` last.
    """
    if verify(dest):
        _fetch_into(dest, timeout)
        problems = verify(dest)
        if problems:
            raise FetchFailed(f"the assets fetched into {dest} do not verify: {'; '.join(problems)}")
    manifest = {name: {"package": a.package.name, "version": a.package.version, "path": a.path,
                       "integrity": a.integrity} for name, a in ASSETS.items()}
    partial = dest / f".manifest.json.{os.getpid()}.part"
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(partial, dest / "manifest.json")
    return dest


def _fetch_into(dest: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ledger-graphiql-") as tmp:
        workdir = Path(tmp)
        for package in PACKAGES:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FetchFailed(f"fetching the GraphiQL assets took longer than {timeout:.0f} s")
            data = _tarball(package, workdir, left)
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
                for name, asset in ASSETS.items():
                    if asset.package != package:
                        continue
                    member = archive.extractfile(f"package/{asset.path}")
                    content = member.read() if member is not None else b""
                    if _sri(content) != asset.integrity:
                        raise FetchFailed(f"{package.name}/{asset.path} does not match its pinned hash")
                    partial = dest / f".{name}.{os.getpid()}.part"
                    partial.write_bytes(content)
                    os.chmod(partial, 0o644)
                    os.replace(partial, dest / name)


def ensure_assets(settings: Any, *, background: bool = True) -> threading.Thread | None:
    """On `ledger serve`'s start: fetch the assets into `<data dir>/graphiql/` when no cache holds them.

    In the background by default, so that the server starts at once (the page falls back to the CDN until
    the fetch is done); a failure is logged, never raised.
    """
    found = find_assets(settings)
    if found is not None:
        log.info("GraphiQL assets are served from %s", found)
        return None
    dest = Path(settings.data_dir) / "graphiql"

    def fetch() -> None:
        try:
            fetch_assets(dest)
        except Exception as exc:  # noqa: BLE001 - never break serving over GraphiQL's assets
            log.warning("could not fetch the GraphiQL assets into %s (%s); the GraphiQL page falls back to the "
                        "public CDN, which needs internet; `ledger assets fetch` retries", dest, exc)
        else:
            log.info("fetched the GraphiQL assets into %s", dest)

    log.info("GraphiQL assets are not cached; fetching them from the npm registry into %s", dest)
    if not background:
        fetch()
        return None
    thread = threading.Thread(target=fetch, name="ledger-graphiql-fetch", daemon=True)
    thread.start()
    return thread


# ---------------------------------------------------------------------------- serving

_fell_back = False


def graphiql_page(services: Any) -> str:
    global _fell_back
    local = find_assets(services.settings)
    if local is not None:
        urls = {name: f"/graphiql/{name}" for name in ASSETS}
        source = "served by this server"
    else:
        if not _fell_back:
            log.warning("GraphiQL assets are not cached (looked in %s); the page loads them from the public CDN "
                        "%s, which renders a blank page without internet: run `ledger assets fetch`",
                        ", ".join(str(d) for d in cache_dirs(services.settings)), CDN)
            _fell_back = True
        urls = {name: f"{CDN}/{a.package.name}@{a.package.version}/{a.path}" for name, a in ASSETS.items()}
        source = f"from {CDN}"
    fields = {role: {"url": urls[name], "integrity": f' integrity="{ASSETS[name].integrity}"'}
              for role, name in ROLES.items()}
    return _PAGE.format_map({**fields, "source": source})


def asset_response(services: Any, name: str):
    """The response for GET /graphiql/<name>: a pinned asset from the first cache holding them all, or 404."""
    from starlette.responses import FileResponse, PlainTextResponse

    asset = ASSETS.get(name)
    directory = find_assets(services.settings) if asset is not None else None
    if asset is None or directory is None:
        return PlainTextResponse("not found", status_code=404)
    return FileResponse(directory / name, media_type=asset.media_type,
                        headers={"Cache-Control": "public, max-age=31536000, immutable"})
