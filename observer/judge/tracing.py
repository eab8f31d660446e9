"""The judge's LLM calls as spans, for observer's collector and in the user's Langfuse.

`llm_call(tracer, ...)`: an `observer.judge_call` span on `Telemetry.tracer` with the
GenAI semantic conventions (model, tokens, error type; never the text). Inside
`judge_trace(Telemetry.judge_langfuse, ...)` each call is also a generation (model,
parameters, input, output, usage, cost) of one `observer.judge` trace, made with the
Langfuse SDK's observation API in environment `observer-judge`: a root of its own,
never a child of observer's spans, skipped by observer's mapping (`observer.` names).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from langfuse import Langfuse, LangfuseGeneration, LangfuseSpan
    from openai.types.chat import ChatCompletion

JUDGE_TRACE_NAME = "observer.judge"
JUDGE_CALL_SPAN = "observer.judge_call"

# The Langfuse root of the judged trace in flight in this thread.
_root: ContextVar[LangfuseSpan | None] = ContextVar("observer_judge_root", default=None)


class JudgeTrace:
    """One judged trace in Langfuse (a no-op without a Langfuse client)."""

    def __init__(self, root: LangfuseSpan | None) -> None:
        self._root = root

    def done(self, summary: Mapping[str, Any], error: str | None = None) -> None:
        if self._root is not None:
            self._root.update(output=dict(summary))
        if self._root is not None and error:
            self._root.update(level="ERROR", status_message=error[:300])


@contextmanager
def judge_trace(langfuse: Langfuse | None, judged_trace_id: str) -> Iterator[JudgeTrace]:
    """Around the judging of one trace: with a Langfuse client, its LLM calls (`llm_call`)
    become generations of one `observer.judge` trace."""
    if langfuse is None:
        yield JudgeTrace(None)
        return
    from langfuse import propagate_attributes

    detached = otel_context.attach(otel_context.Context())  # a root, not a child of ours
    try:
        with (
            propagate_attributes(
                trace_name=JUDGE_TRACE_NAME, metadata={"judged_trace_id": judged_trace_id}
            ),
            langfuse.start_as_current_observation(
                name=JUDGE_TRACE_NAME, as_type="span", end_on_exit=False
            ) as root,
        ):
            trace.get_current_span().set_attribute("observer.trace_id", judged_trace_id)
    finally:
        otel_context.detach(detached)
    token = _root.set(root)
    try:
        yield JudgeTrace(root)
    finally:
        _root.reset(token)
        root.end()


def _server(base_url: str | None) -> dict[str, AttributeValue]:
    parts = urlsplit(base_url or "")
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    found = {"server.address": parts.hostname, "server.port": port}
    return {key: value for key, value in found.items() if value}


class LlmCall:
    """One chat completion, as a GenAI client span and (when on) a Langfuse generation."""

    def __init__(
        self,
        span: trace.Span,
        generation: LangfuseGeneration | None,
        generation_span: trace.Span | None,
        prices_per_1k: tuple[float, float],
    ) -> None:
        self._span = span
        self._generation = generation
        self._spans = [span] if generation_span is None else [span, generation_span]
        self._prices = prices_per_1k

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
        for span in self._spans:
            span.set_attributes(attributes)
        if self._generation is None:
            return
        cost: dict[str, float] | None = None
        if usage is not None and any(self._prices):
            cost_in = usage.prompt_tokens / 1000 * self._prices[0]
            cost_out = usage.completion_tokens / 1000 * self._prices[1]
            cost = {"input": cost_in, "output": cost_out, "total": cost_in + cost_out}
        self._generation.update(
            output=response.choices[0].message.content if response.choices else None,
            usage_details={"input": usage.prompt_tokens, "output": usage.completion_tokens}
            if usage is not None
            else None,
            cost_details=cost,
        )

    def failed(self, error: BaseException) -> None:
        kind = type(error).__name__
        message = f"{kind}: {error}"[:300]
        for span in self._spans:
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, message))
        if self._generation is not None:
            self._generation.update(level="ERROR", status_message=message)


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
    """One LLM call of the judge: an `observer.judge_call` span and, inside a `judge_trace`
    with Langfuse on, a generation. An exception leaving the block marks both failed."""
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
    root = _root.get()
    with ExitStack() as generation_open:
        generation = generation_span = None
        if root is not None:
            generation = generation_open.enter_context(
                root.start_as_current_observation(
                    name=step,
                    as_type="generation",
                    model=model,
                    model_parameters={
                        "temperature": temperature,
                        "max_tokens": max_tokens,
                        "response_format": response_format,
                    },
                    input=list(messages),
                )
            )
            generation_span = trace.get_current_span()
            generation_span.set_attributes(request)
        call = LlmCall(span, generation, generation_span, prices_per_1k)
        try:
            yield call
        except BaseException as error:
            call.failed(error)
            raise
        finally:
            span.end()
