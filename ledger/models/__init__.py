"""Model providers (DESIGN 13): one small interface (`ModelProvider.complete`) over the `openai`,
`anthropic` and `scripted` adapters, the models file that configures them, and the JSON Schema dialects
of model clients (DESIGN 16)."""

from .dialects import Change, Conversion, dialect_changes, dialect_problems, restore_optional, to_gemini, to_openai
from .failures import (ModelDeadline, ModelRequestRejected, ModelResponseInvalid, ModelUnavailable,
                       ModelsConfigInvalid, scrub)
from .registry import ModelProviders, load_models
from .types import (AssistantMessage, ForcedTool, Message, ModelProvider, ModelRequest, ModelResponse, ToolCall,
                    ToolResult, ToolSpec, Usage, UserMessage)

__all__ = [
    "AssistantMessage", "Change", "Conversion", "ForcedTool", "Message", "ModelDeadline", "ModelProvider", "ModelProviders",
    "ModelRequest", "ModelRequestRejected", "ModelResponse", "ModelResponseInvalid", "ModelUnavailable",
    "ModelsConfigInvalid", "ToolCall", "ToolResult", "ToolSpec", "Usage", "UserMessage", "dialect_changes",
    "dialect_problems", "load_models", "restore_optional", "scrub", "to_gemini", "to_openai",
]
