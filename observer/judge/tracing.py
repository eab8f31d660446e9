"""The judge's LLM calls as spans: GenAI client spans for observer's collector and,
with `telemetry.judge_to_langfuse`, generations in the user's Langfuse.

`llm_call(tracer, ...)` makes an `observer.judge_call` span on observer's own tracer
(injected: `Telemetry.tracer`), following the GenAI semantic conventions (model,
tokens, error type; never the text). Inside `judge_trace(langfuse, ...)` the same call
is also a generation (model, parameters, input, output, usage, cost) of one
`observer.judge` trace in environment `observer-judge`, made with the Langfuse tracer
(`Telemetry.judge_provider`'s, exported by observer's own `LangfuseSpanExporter`).
observer's own mapping skips those traces (root names starting with `observer.`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

JUDGE_ENVIRONMENT = "observer-judge"
JUDGE_TRACE_NAME = "observer.judge"
JUDGE_CALL_SPAN = "observer.judge_call"

# The Langfuse tracer and the root of the judged trace in flight in this thread.
_judge_root: ContextVar[tuple[trace.Tracer, trace.Span] | None] = ContextVar(
    "observer_judge_root", default=None
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class JudgeTrace:
    """One judged trace in Langfuse (a no-op without a Langfuse tracer)."""

    def __init__(self, root: trace.Span | None) -> None:
        self._root = root

    def done(self, summary: Mapping[str, Any], error: str | None = None) -> None:
        if self._root is None:
            return
        self._root.set_attribute("langfuse.observation.output", _json(dict(summary)))
        if error:
            self._root.set_attribute("langfuse.observation.level", "ERROR")
            self._root.set_attribute("langfuse.observation.status_message", error[:300])
            self._root.set_status(Status(StatusCode.ERROR, error[:300]))


@contextmanager
def judge_trace(langfuse: trace.Tracer | None, judged_trace_id: str) -> Iterator[JudgeTrace]:
    """Around the judging of one trace: with a Langfuse tracer, its LLM calls (`llm_call`)
    become generations of one `observer.judge` trace in environment `observer-judge`."""
    if langfuse is None:
        yield JudgeTrace(None)
        return
    root = langfuse.start_span(
        JUDGE_TRACE_NAME,
        context=otel_context.Context(),  # its own trace, never a child of observer's spans
        attributes={
            "langfuse.trace.name": JUDGE_TRACE_NAME,
            "langfuse.environment": JUDGE_ENVIRONMENT,
            "langfuse.observation.type": "span",
            "langfuse.trace.metadata.judged_trace_id": judged_trace_id,
            "observer.trace_id": judged_trace_id,
        },
    )
    token = _judge_root.set((langfuse, root))
    try:
        yield JudgeTrace(root)
    finally:
        _judge_root.reset(token)
        root.end()


def _server(base_url: str | None) -> dict[str, AttributeValue]:
    if not base_url:
        return {}
    parts = urlsplit(base_url)
    out: dict[str, AttributeValue] = {}
    if parts.hostname:
        out["server.address"] = parts.hostname
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    if port:
        out["server.port"] = port
    return out


class LlmCall:
    """One chat completion, as a GenAI client span and (when on) a Langfuse generation."""

    def __init__(
        self,
        span: trace.Span,
        generation: trace.Span | None,
        prices_per_1k: tuple[float, float],
    ) -> None:
        self._span = span
        self._generation = generation
        self._prices = prices_per_1k

    def _spans(self) -> list[trace.Span]:
        return [self._span] if self._generation is None else [self._span, self._generation]

    def completed(self, response: ChatCompletion) -> None:
        """The response's model, id, finish reason and token usage (and its text, to Langfuse)."""
        if not self._span.is_recording() and self._generation is None:
            return
        attributes: dict[str, AttributeValue] = {"gen_ai.response.model": response.model}
        if response.id:
            attributes["gen_ai.response.id"] = response.id
        reasons = [c.finish_reason for c in response.choices if c.finish_reason]
        if reasons:
            attributes["gen_ai.response.finish_reasons"] = reasons
        usage = response.usage
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        for span in self._spans():
            span.set_attributes(attributes)
        if self._generation is None:
            return
        if response.choices:
            content = response.choices[0].message.content
            if content is not None:
                self._generation.set_attribute("langfuse.observation.output", content)
        if usage is not None:
            self._generation.set_attribute(
                "langfuse.observation.usage_details",
                _json({"input": usage.prompt_tokens, "output": usage.completion_tokens}),
            )
            if any(self._prices):
                cost_in = usage.prompt_tokens / 1000 * self._prices[0]
                cost_out = usage.completion_tokens / 1000 * self._prices[1]
                self._generation.set_attribute(
                    "langfuse.observation.cost_details",
                    _json({"input": cost_in, "output": cost_out, "total": cost_in + cost_out}),
                )

    def failed(self, error: BaseException) -> None:
        kind = type(error).__name__
        message = f"{kind}: {error}"[:300]
        for span in self._spans():
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, message))
        if self._generation is not None:
            self._generation.set_attribute("langfuse.observation.level", "ERROR")
            self._generation.set_attribute("langfuse.observation.status_message", message)


@contextmanager
def llm_call(
    tracer: trace.Tracer,
    *,
    step: str,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    temperature: float,
    max_tokens: int,
    response_format: str,
    base_url: str | None = None,
    prices_per_1k: tuple[float, float] = (0.0, 0.0),
) -> Iterator[LlmCall]:
    """One LLM call of the judge: an `observer.judge_call` span following the GenAI
    semantic conventions (model, tokens, error type; never the text), and inside a
    `judge_trace` with Langfuse on, a generation with input and output in Langfuse.

    An exception leaving the block marks both failed and goes on.
    """
    request: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": temperature,
        "gen_ai.request.max_tokens": max_tokens,
        "gen_ai.output.type": "json",
        "observer.judge.step": step,
        **_server(base_url),
    }
    span = tracer.start_span(JUDGE_CALL_SPAN, kind=SpanKind.CLIENT, attributes=request)
    generation: trace.Span | None = None
    root = _judge_root.get()
    if root is not None:
        langfuse, parent = root
        generation = langfuse.start_span(
            step,
            context=trace.set_span_in_context(parent, otel_context.Context()),
            kind=SpanKind.CLIENT,
            attributes={
                **request,
                "langfuse.observation.type": "generation",
                "langfuse.environment": JUDGE_ENVIRONMENT,
                "langfuse.observation.model.name": model,
                "langfuse.observation.model.parameters": _json(
                    {
                        "temperature": temperature,
                        "max_tokens": max_tokens,
                        "response_format": response_format,
                    }
                ),
                "langfuse.observation.input": _json(list(messages)),
            },
        )
    call = LlmCall(span, generation, prices_per_1k)
    try:
        yield call
    except BaseException as error:
        call.failed(error)
        raise
    finally:
        span.end()
        if generation is not None:
            generation.end()
