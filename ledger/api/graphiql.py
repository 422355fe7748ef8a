"""The GraphiQL page. It reads a bearer token from the URL fragment (`#token=...`), never sent to the
server in a URL, and sends it as `Authorization` on every request.

Assets come from the local cache (`<data dir>/graphiql/`) when present; otherwise from the public CDN,
which is logged because it renders blank on a machine without internet.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("ledger.graphiql")

ASSETS = {
    "react.js": ("react", "18.2.0", "umd/react.production.min.js"),
    "react-dom.js": ("react-dom", "18.2.0", "umd/react-dom.production.min.js"),
    "graphiql.js": ("graphiql", "3.8.3", "graphiql.min.js"),
    "graphiql.css": ("graphiql", "3.8.3", "graphiql.min.css"),
}
_warned = False

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8" />
  <title>Ledger GraphiQL</title>
  <style>body {{ margin: 0; height: 100vh; }} #graphiql {{ height: 100vh; }}</style>
  <link rel="stylesheet" href="{css}" />
</head>
<body>
  <div id="graphiql">Loading GraphiQL...</div>
  <script crossorigin src="{react}"></script>
  <script crossorigin src="{react_dom}"></script>
  <script crossorigin src="{graphiql}"></script>
  <script>
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
  </script>
</body>
</html>
"""


def asset_dir(services: Any) -> Path:
    return Path(services.settings.data_dir) / "graphiql"


def graphiql_page(services: Any) -> str:
    global _warned
    local = asset_dir(services)
    if all((local / name).exists() for name in ASSETS):
        urls = {name: f"/graphiql/{name}" for name in ASSETS}
    else:
        if not _warned:
            log.warning("GraphiQL assets are not cached in %s; the page falls back to the public CDN", local)
            _warned = True
        urls = {name: f"https://unpkg.com/{pkg}@{ver}/{path}" for name, (pkg, ver, path) in ASSETS.items()}
    return _PAGE.format(css=urls["graphiql.css"], react=urls["react.js"], react_dom=urls["react-dom.js"],
                        graphiql=urls["graphiql.js"])
