"""The providers a process may call: server configuration, never database rows (DESIGN 13).

A TOML file (`LEDGER_MODELS`, `--models`), one table per provider:

    [local]
    type = "openai"                       # openai | anthropic | scripted
    base_url = "http://localhost:11434/v1"
    api_key_env = "OLLAMA_API_KEY"        # optional: the environment variable holding the key
    tenants = ["<tenant uuid>", ...]      # optional: who may use it (default: every tenant)

    [test]
    type = "scripted"
    script = "agent-script.json"          # relative to this file

It is read once per process; an invalid file stops the process at startup, naming the file and key.
"""

from __future__ import annotations

import os
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .anthropic_messages import AnthropicProvider
from .failures import ModelUnavailable, ModelsConfigInvalid
from .openai_chat import OpenAIProvider
from .scripted import ScriptedProvider
from .types import ModelProvider

TYPES = ("openai", "anthropic", "scripted")
_KEYS = {
    "openai": {"type", "base_url", "api_key_env", "tenants", "strict"},
    "anthropic": {"type", "base_url", "api_key_env", "tenants"},
    "scripted": {"type", "script", "tenants"},
}


@dataclass(frozen=True)
class ModelProviders:
    providers: dict[str, ModelProvider]
    # None: open to every tenant.
    tenants: dict[str, frozenset[uuid.UUID] | None]
    path: Path | None = None

    @classmethod
    def empty(cls) -> "ModelProviders":
        return cls({}, {}, None)

    def for_tenant(self, provider: str, tenant_id: uuid.UUID) -> ModelProvider:
        """The provider `provider` if it is configured and open to the tenant; else `model_unavailable`."""
        found = self.providers.get(provider)
        allowed = self.tenants.get(provider)
        if found is None or (allowed is not None and tenant_id not in allowed):
            where = (f"the models file {self.path}" if self.path is not None
                     else "a models file (none is configured: set LEDGER_MODELS or --models)")
            state = "is not configured" if found is None else "is not open to this tenant"
            raise ModelUnavailable(f"the model provider {provider!r} {state}",
                                   hint=f"the server's operator configures providers in {where}"
                                        + ("" if found is None else " (its tenants list)"))
        return found


def load_models(path: Path | str | None, *, environ: dict[str, str] | None = None,
                sleep: Callable[[float], None] | None = None) -> ModelProviders:
    """The providers of the models file at `path` (none without one); `ModelsConfigInvalid` if invalid."""
    if path is None or str(path) == "":
        return ModelProviders.empty()
    path = Path(path).expanduser().resolve()
    environ = os.environ if environ is None else environ

    def bad(key: str | None, message: str) -> ModelsConfigInvalid:
        at = f" at {key}" if key else ""
        return ModelsConfigInvalid(f"the models file {path}{at}: {message}",
                                   hint="see README \"Agents\" for the models file; the server starts once it is valid")

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise bad(None, f"cannot be read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise bad(None, f"is not TOML ({exc})") from None
    providers: dict[str, ModelProvider] = {}
    tenants: dict[str, frozenset[uuid.UUID] | None] = {}
    for name, table in document.items():
        if not isinstance(table, dict):
            raise bad(name, "must be a table ([name]) describing one provider")
        kind = table.get("type")
        if kind not in TYPES:
            raise bad(f"{name}.type", f"must be one of {', '.join(TYPES)}, not {kind!r}")
        unknown = set(table) - _KEYS[kind]
        if unknown:
            raise bad(f"{name}.{sorted(unknown)[0]}",
                      f"is not a key of a {kind} provider (it takes {', '.join(sorted(_KEYS[kind]))})")
        tenants[name] = _tenants(table, name, bad)
        providers[name] = _provider(name, kind, table, path, environ, bad, sleep)
    return ModelProviders(providers, tenants, path)


def _tenants(table: dict, name: str, bad: Callable[..., ModelsConfigInvalid]) -> frozenset[uuid.UUID] | None:
    if "tenants" not in table:
        return None
    raw = table["tenants"]
    if not isinstance(raw, list):
        raise bad(f"{name}.tenants", "must be a list of tenant ids")
    out = set()
    for i, item in enumerate(raw):
        try:
            out.add(uuid.UUID(str(item)))
        except ValueError:
            raise bad(f"{name}.tenants[{i}]", f"{item!r} is not a tenant id (a UUID)") from None
    return frozenset(out)


def _string(table: dict, key: str, name: str, bad: Callable[..., ModelsConfigInvalid], *, required: bool) -> str | None:
    value = table.get(key)
    if value is None:
        if required:
            raise bad(f"{name}.{key}", "is missing")
        return None
    if not isinstance(value, str) or not value.strip():
        raise bad(f"{name}.{key}", "must be a non-empty string")
    return value


def _provider(name: str, kind: str, table: dict, path: Path, environ: Any,
              bad: Callable[..., ModelsConfigInvalid], sleep: Callable[[float], None] | None) -> ModelProvider:
    if kind == "scripted":
        script = Path(_string(table, "script", name, bad, required=True)).expanduser()
        script = script if script.is_absolute() else path.parent / script
        try:
            return ScriptedProvider(name, script)
        except FileNotFoundError:
            raise bad(f"{name}.script", f"names {script}, which does not exist") from None
        except ModelsConfigInvalid as exc:
            raise bad(f"{name}.script", exc.message) from None
    base_url = _string(table, "base_url", name, bad, required=False)
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise bad(f"{name}.base_url", f"must be an http:// or https:// URL, not {base_url!r}")
    key_env = _string(table, "api_key_env", name, bad, required=False)
    api_key = None
    if key_env is not None:
        api_key = environ.get(key_env)
        if not api_key:
            raise bad(f"{name}.api_key_env", f"names the environment variable {key_env}, which is not set")
    extra: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    if kind == "openai":
        strict = table.get("strict", True)
        if not isinstance(strict, bool):
            raise bad(f"{name}.strict", "must be true or false")
        return OpenAIProvider(name, base_url=base_url, api_key=api_key, strict=strict, **extra)
    return AnthropicProvider(name, base_url=base_url, api_key=api_key, **extra)
