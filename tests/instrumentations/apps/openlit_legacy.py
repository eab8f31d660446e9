"""The ``openlit`` app on OpenLIT 1.33.8, the last release that records the placeholder
"Function called with tools" as the completion of every chat call made with ``tools``.

Traced exactly as Langfuse's OpenLIT guide says (``openlit.init(tracer=langfuse._otel_tracer,
disable_batch=True)`` after ``get_client()``: this release still takes ``tracer``). An agent
sends ``tools`` on every call, the answering one included, so no generation of the trace
holds the answer: only the ``@observe`` root's output does. The completion is a span event
(``gen_ai.content.completion``), the prompt another (``gen_ai.content.prompt``, the
messages flattened into ``role: content`` lines).
"""

from __future__ import annotations

from typing import Any

from tests.instrumentations.apps.openlit import run_loop
from tests.instrumentations.kit import ToolCallingStub

DESCRIPTION = (
    "The openlit app (an OpenAI function-calling loop under an @observe root, the tool's JSON "
    "text in a tool message) on OpenLIT 1.33.8 with Langfuse's guide's openlit.init(tracer="
    "langfuse._otel_tracer): every generation's completion is 'Function called with tools'"
)


def run(stub: ToolCallingStub) -> None:
    import openlit

    def init(langfuse: Any) -> None:
        openlit.init(tracer=langfuse._otel_tracer, disable_batch=True)

    run_loop(stub, init)
