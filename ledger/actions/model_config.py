"""The config of an action that calls a model (DESIGN 13): `model {provider, name, temperature?,
maxOutputTokens?}` and `instructions` (at most 64 KiB). Kind `model` takes exactly these two; an agent
takes them beside its harness. The provider is only named here: providers are server configuration
and are checked when the action is called (`model_unavailable`), not when it is written.
"""

from __future__ import annotations

from typing import Any, Callable

MAX_INSTRUCTIONS_BYTES = 64 * 1024
MODEL_KEYS = ("provider", "name", "temperature", "maxOutputTokens")
MAX_TEMPERATURE = 2.0
# Above every current model's output limit; a provider refuses what its model cannot do.
MAX_OUTPUT_TOKENS = 1_000_000

# (path, message): how a problem is reported (validation's Problems.add).
Report = Callable[[str, str], None]


def _text(value: Any, path: str, what: str, add: Report) -> bool:
    if not isinstance(value, str) or not value.strip():
        add(path, f"{what} is missing: give a non-empty string")
        return False
    if "\x00" in value:
        add(path, "a NUL character (\\u0000) cannot be stored; remove it")
        return False
    return True


def check_model(value: Any, path: str, add: Report) -> dict | None:
    """The normalized `model` object, or None after reporting its problems."""
    if not isinstance(value, dict):
        add(path, 'model is an object {provider, name, temperature?, maxOutputTokens?}, e.g. '
                  '{"provider": "local", "name": "llama3.1"}')
        return None
    ok = True
    unknown = sorted(set(value) - set(MODEL_KEYS))
    if unknown:
        add(path, f"unknown field(s) {', '.join(unknown)}; model takes {', '.join(MODEL_KEYS)}")
        ok = False
    ok &= _text(value.get("provider"), f"{path}.provider",
                "the provider (a table name in the server's models file)", add)
    ok &= _text(value.get("name"), f"{path}.name", "the model's name (as the provider calls it)", add)
    temperature = value.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= MAX_TEMPERATURE):
        add(f"{path}.temperature", f"must be a number from 0 to {MAX_TEMPERATURE:g}")
        ok = False
    tokens = value.get("maxOutputTokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                               or not 1 <= tokens <= MAX_OUTPUT_TOKENS):
        add(f"{path}.maxOutputTokens", f"must be an integer from 1 to {MAX_OUTPUT_TOKENS:,}")
        ok = False
    if not ok:
        return None
    out = {"provider": value["provider"], "name": value["name"]}
    if temperature is not None:
        out["temperature"] = temperature
    if tokens is not None:
        out["maxOutputTokens"] = tokens
    return out


def check_instructions(value: Any, path: str, add: Report) -> str | None:
    if not _text(value, path, "the instructions (what the model is to do)", add):
        return None
    size = len(value.encode())
    if size > MAX_INSTRUCTIONS_BYTES:
        add(path, f"the instructions are {size} bytes; the limit is 64 KiB")
        return None
    return value


def check_model_tool_config(config: Any, add: Report) -> dict | None:
    """Kind `model`: exactly {model, instructions}."""
    if not isinstance(config, dict):
        add("config", 'a model action needs config {model: {provider, name}, instructions: "..."}')
        return None
    unknown = sorted(set(config) - {"model", "instructions"})
    if unknown:
        add("config", f"unknown config field(s) {', '.join(unknown)}; a model action's config is exactly "
                      "{model, instructions}")
    model = check_model(config.get("model"), "config.model", add)
    instructions = check_instructions(config.get("instructions"), "config.instructions", add)
    if unknown or model is None or instructions is None:
        return None
    return {"model": model, "instructions": instructions}
