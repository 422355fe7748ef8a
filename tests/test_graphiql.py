"""GraphiQL's assets: served locally from a cache, fetched pinned from the npm registry, and a logged CDN
fallback when they are absent. (The browser test renders the page for real.)"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger.api import graphiql
from ledger.cli import _loopback


@pytest.fixture
def no_shared_cache(monkeypatch):
    """Only the test's data dir is looked in (not the checkout's .cache/graphiql)."""
    monkeypatch.setattr(graphiql, "source_cache_dir", lambda: None)
    monkeypatch.delenv("LEDGER_GRAPHIQL_DIR", raising=False)
    monkeypatch.setattr(graphiql, "_fell_back", False)


def test_without_a_cache_the_page_falls_back_to_the_cdn_and_says_so(api, no_shared_cache, caplog):
    with caplog.at_level(logging.WARNING, logger="ledger.graphiql"):
        page = api.http.get("/graphql").text
        api.http.get("/graphql")
    warnings = [r for r in caplog.records if "public CDN" in r.getMessage()]
    assert len(warnings) == 1, "logged once per process"
    assert "ledger assets fetch" in warnings[0].getMessage()
    for name, asset in graphiql.ASSETS.items():
        # Pinned by version and by hash, so that the CDN cannot hand over anything else.
        assert f'{graphiql.CDN}/{asset.package.name}@{asset.package.version}/{asset.path}" ' \
               f'integrity="{asset.integrity}"' in page
    assert api.http.get(f"/graphiql/{next(iter(graphiql.ASSETS))}").status_code == 404


def test_the_page_sends_the_fragment_token_as_a_bearer_header(api, no_shared_cache):
    page = api.http.get("/graphql").text
    assert 'new URLSearchParams(window.location.hash.slice(1))' in page
    assert '"Bearer " + token' in page
    assert "history.replaceState" in page  # the token leaves the address bar


def test_a_cache_dir_named_by_the_environment_is_served(api, no_shared_cache, monkeypatch, tmp_path):
    for name in graphiql.ASSETS:
        (tmp_path / name).write_text(f"/* {name} */")
    monkeypatch.setenv("LEDGER_GRAPHIQL_DIR", str(tmp_path))
    page = api.http.get("/graphql").text
    assert graphiql.CDN not in page
    name = "graphiql-3.8.3.min.css"
    response = api.http.get(f"/graphiql/{name}")
    assert response.status_code == 200 and response.text == f"/* {name} */"
    assert response.headers["content-type"].startswith("text/css")
    assert "immutable" in response.headers["cache-control"]


def test_the_checkouts_fetched_assets_are_the_pinned_ones():
    """`make install` fetched them into .cache/graphiql (skipped where it could not)."""
    cache = graphiql.source_cache_dir()
    if cache is None or not (cache / "manifest.json").exists():
        pytest.skip("no fetched GraphiQL assets in this checkout (`make assets` fetches them)")
    assert graphiql.verify(cache) == []
    assert (Path(__file__).resolve().parents[1] / ".gitignore").read_text().count(".cache/") == 1


# ---------------------------------------------------------------------------- fetching


def _fake_npm(bin_dir: Path, script: str) -> dict:
    npm = bin_dir / "npm"
    npm.write_text(f"#!{sys.executable}\n{script}")
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_a_tarball_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    """Whatever the registry (or a proxy) hands over must match the pinned integrity."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = _fake_npm(bin_dir, """
import io, json, sys, tarfile
from pathlib import Path
dest = Path(sys.argv[sys.argv.index("--pack-destination") + 1])
name = sys.argv[2].rsplit("@", 1)[0]
buffer = io.BytesIO()
with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
    data = b"alert('not react')"
    info = tarfile.TarInfo("package/umd/react.production.min.js")
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))
(dest / f"{name}-0.tgz").write_bytes(buffer.getvalue())
print(json.dumps([{"filename": f"{name}-0.tgz"}]))
""")
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(graphiql.FetchFailed, match="does not match its pinned integrity"):
        graphiql.fetch_assets(tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("*.js"))


def test_assets_fetch_without_npm_or_network_fails_clearly_and_fast(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = _fake_npm(bin_dir, "import sys\nprint('npm error code ENOTFOUND', file=sys.stderr)\nsys.exit(1)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "ledger.cli", "assets", "fetch", "--dest", str(tmp_path / "c")],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert "could not fetch the GraphiQL assets" in result.stderr and "ENOTFOUND" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_serve_fetching_in_the_background_never_raises(tmp_path, monkeypatch, no_shared_cache, caplog):
    def offline(dest, **kw):
        raise graphiql.FetchFailed("the registry cannot be reached")

    monkeypatch.setattr(graphiql, "fetch_assets", offline)

    class Settings:
        data_dir = tmp_path / "data"

    with caplog.at_level(logging.INFO, logger="ledger.graphiql"):
        thread = graphiql.ensure_assets(Settings())
        thread.join(10)
    assert any("falls back to the public CDN" in r.getMessage() for r in caplog.records)


def test_serve_fetches_nothing_when_a_cache_holds_them(tmp_path, monkeypatch, no_shared_cache):
    cache = tmp_path / "data" / "graphiql"
    cache.mkdir(parents=True)
    for name in graphiql.ASSETS:
        (cache / name).write_text("x")
    monkeypatch.setattr(graphiql, "fetch_assets", lambda *a, **k: pytest.fail("fetched again"))

    class Settings:
        data_dir = tmp_path / "data"

    assert graphiql.ensure_assets(Settings()) is None


def test_pins_are_consistent():
    for name, asset in graphiql.ASSETS.items():
        assert asset.package.version in name
        assert asset.integrity.startswith("sha384-") and asset.package.integrity.startswith("sha512-")
    assert set(graphiql.ROLES.values()) == set(graphiql.ASSETS)
    # Not a tarball's member name that could escape the cache directory.
    assert all(".." not in a.path and not a.path.startswith("/") for a in graphiql.ASSETS.values())
    assert json.dumps(sorted(p.name for p in graphiql.PACKAGES)) == '["graphiql", "react", "react-dom"]'


# ---------------------------------------------------------------------------- the printed URL


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                            ("[::1]", True), ("127.0.0.2", True), ("0.0.0.0", False),
                                            ("192.0.2.1", False), ("example.org", False), ("::", False)])
def test_the_admin_token_url_is_printed_for_loopback_only(host, loopback):
    assert _loopback(host) is loopback
