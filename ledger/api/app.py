"""The ASGI application factory: one per server process (uvicorn `--workers` imports it in each)."""

from __future__ import annotations

import contextlib

from starlette.applications import Starlette

from ..app_services import Services
from ..config import Settings
from .http import build_app


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()
    if not settings.database_url:
        raise RuntimeError("create_app needs LEDGER_DATABASE_URL; `ledger serve` sets it")
    services = Services.open(settings, settings.database_url)
    app = build_app(services)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        try:
            yield
        finally:
            services.close()

    app.router.lifespan_context = lifespan
    app.state.services = services
    return app
