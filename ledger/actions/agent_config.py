"""The config of an action of kind `agent` (DESIGN 13), checked when it is written.

    {model: {provider, name, temperature?, maxOutputTokens?}, instructions,
     harness: {maxRounds: 8, budget: {toolCalls: 64, tokens: 200000},
               context: {offload: {over_tokens: 2000}, history: 20}}}

An omitted harness key keeps its default; the stored config has every key, so that a reader of a
version sees exactly what its turns run with. The provider is server configuration and is checked when
the agent is called (`model_unavailable`), never here: providers can change without a write.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

MAX_INSTRUCTIONS_BYTES = 64 * 1024

DEFAULT_HARNESS = {
    "maxRounds": 8,
    "budget": {"toolCalls": 64, "tokens": 200_000},
    "context": {"offload": {"over_tokens": 2000}, "history": 20},
}

# Each harness value: its path under `harness`, and the inclusive range it may take. The bounds keep a
# turn inside the call tree's limits (1,024 calls) and a context a model can hold.
_RANGES: dict[tuple[str, ...], tuple[int, int]] = {
    ("maxRounds",): (1, 100),
    ("budget", "toolCalls"): (1, 1000),
    ("budget", "tokens"): (1, 10_000_000),
    ("context", "offload", "over_tokens"): (1, 1_000_000),
    ("context", "history"): (0, 1000),
}
MAX_OUTPUT_TOKENS = 1_000_000


def check_agent_config(config: Any, add: Callable[[str, str], None]) -> dict | None:
    """The normalized config, or None after `add(path, message)` for every problem."""
    if not isinstance(config, dict):
        add("config", "an agent needs config {model: {provider, name}, instructions, harness?}")
        return None
    problems_before = _Counter(add)
    extra = sorted(set(config) - {"model", "instructions", "harness"})
    if extra:
        problems_before.add("config", f"unknown config field(s) {', '.join(extra)}; an agent's config is "
                                      "{model, instructions, harness}")
    model = _check_model(config.get("model"), problems_before.add)
    instructions = config.get("instructions")
    if not isinstance(instructions, str):
        problems_before.add("config.instructions", "the instructions are a string: what the model is told to do")
    elif len(instructions.encode()) > MAX_INSTRUCTIONS_BYTES:
        problems_before.add("config.instructions",
                            f"the instructions are {len(instructions.encode())} bytes; the limit is 64 KiB")
    elif "\x00" in instructions:
        problems_before.add("config.instructions", "a NUL character (\\u0000) cannot be stored; remove it")
    harness = _check_harness(config.get("harness"), problems_before.add)
    if problems_before.count:
        return None
    return {"model": model, "instructions": instructions, "harness": harness}


class _Counter:
    def __init__(self, add: Callable[[str, str], None]) -> None:
        self._add, self.count = add, 0

    def add(self, path: str, message: str) -> None:
        self.count += 1
        self._add(path, message)


def _check_model(model: Any, add: Callable[[str, str], None]) -> dict | None:
    if not isinstance(model, dict):
        add("config.model", "the model is {provider, name, temperature?, maxOutputTokens?}: provider names a "
                            "table of the server's models file")
        return None
    extra = sorted(set(model) - {"provider", "name", "temperature", "maxOutputTokens"})
    if extra:
        add("config.model", f"unknown model field(s) {', '.join(extra)}; it takes provider, name, temperature "
                            "and maxOutputTokens")
    out: dict[str, Any] = {}
    for key in ("provider", "name"):
        value = model.get(key)
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            add(f"config.model.{key}", f"the model's {key} is a non-empty string of at most 200 characters")
        else:
            out[key] = value
    temperature = model.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
            add("config.model.temperature", "the temperature is a number from 0 to 2")
        else:
            out["temperature"] = temperature
    max_tokens = model.get("maxOutputTokens")
    if max_tokens is not None:
        if not _whole(max_tokens) or not 1 <= max_tokens <= MAX_OUTPUT_TOKENS:
            add("config.model.maxOutputTokens", f"maxOutputTokens is a whole number from 1 to {MAX_OUTPUT_TOKENS}")
        else:
            out["maxOutputTokens"] = max_tokens
    return out


def _check_harness(harness: Any, add: Callable[[str, str], None]) -> dict:
    merged = copy.deepcopy(DEFAULT_HARNESS)
    if harness is None:
        return merged
    _merge(harness, merged, DEFAULT_HARNESS, ("harness",), add)
    return merged


def _merge(given: Any, into: dict, defaults: dict, path: tuple[str, ...], add: Callable[[str, str], None]) -> None:
    where = "config." + ".".join(path)
    if not isinstance(given, dict):
        add(where, f"must be an object with the keys {', '.join(defaults)} (each optional)")
        return
    for key, value in given.items():
        if key not in defaults:
            add(f"{where}.{key}", f"is not a harness setting here; the keys are {', '.join(defaults)}")
            continue
        if isinstance(defaults[key], dict):
            _merge(value, into[key], defaults[key], path + (key,), add)
            continue
        low, high = _RANGES[path[1:] + (key,)]
        if not _whole(value) or not low <= value <= high:
            add(f"{where}.{key}", f"must be a whole number from {low} to {high} (default {defaults[key]})")
        else:
            into[key] = value


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
