"""The ``anthropic`` app's tool-use loop traced through OpenInference instead
(``openinference-instrumentation-anthropic``'s ``AnthropicInstrumentor``, with the Langfuse
SDK's ``get_client()``: Langfuse's JS/TS Anthropic guide uses OpenInference's instrumentor,
its Python guide OpenLLMetry's). OpenInference records the request as sent (``input.value``:
the Messages API body, its ``tool_result`` blocks holding the tool's JSON text).
"""

from __future__ import annotations

from typing import Any

from tests.instrumentations.apps.anthropic import run_instrumented
from tests.instrumentations.kit import ToolCallingStub

DESCRIPTION = (
    "The anthropic app (Anthropic Python SDK tool-use loop under an @observe root, the tool's "
    "JSON text in a tool_result block) through openinference-instrumentation-anthropic"
)


def run(stub: ToolCallingStub) -> list[dict[str, Any]]:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    return run_instrumented(AnthropicInstrumentor().instrument)
