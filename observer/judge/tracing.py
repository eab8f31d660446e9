"""The judge's LLM calls as spans, for observer's collector and in the user's Langfuse.

`llm_call`: an `observer.judge_call` span on `Telemetry.tracer`, GenAI conventions (model,
tokens, error type; never the text). Inside `judge_trace(Telemetry.judge_langfuse, ...)`,
also a generation (model, parameters, input, output, usage, cost) of one `observer.judge`
trace in environment `observer-judge`, its own root, skipped by observer's mapping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from langfuse import Langfuse, LangfuseGeneration, LangfuseSpan
    from openai.types.chat import ChatCompletion

JUDGE_TRACE_NAME = "observer.judge"
JUDGE_CALL_SPAN = "observer.judge_call"

# The Langfuse root of the judged trace in flight in this thread.
_root: ContextVar[LangfuseSpan | None] = ContextVar("observer_judge_root", default=None)


@dataclass
class JudgeTrace:
    """One judged trace in Langfuse (a no-op without a Langfuse client)."""

    root: LangfuseSpan | None

    def done(self, summary: Mapping[str, Any], error: str | None = None) -> None:
        if self.root is not None:
            self.root.update(output=dict(summary))
            if error:
                self.root.update(level="ERROR", status_message=error[:300])


@contextmanager
def judge_trace(langfuse: Langfuse | None, judged_trace_id: str) -> Iterator[JudgeTrace]:
    """Around the judging of one trace: with a Langfuse client, its LLM calls (`llm_call`)
    become generations of one `observer.judge` trace."""
    if langfuse is None:
        yield JudgeTrace(None)
        return
    from langfuse import propagate_attributes

    with (
        trace.use_span(trace.INVALID_SPAN),  # no current span: a root, not a child of ours
        propagate_attributes(
            trace_name=JUDGE_TRACE_NAME, metadata={"judged_trace_id": judged_trace_id}
        ),
        langfuse.start_as_current_observation(
            name=JUDGE_TRACE_NAME, as_type="span", end_on_exit=False
        ) as root,
    ):
        trace.get_current_span().set_attribute("observer.trace_id", judged_trace_id)
    token = _root.set(root)
    try:
        yield JudgeTrace(root)
    finally:
        _root.reset(token)
        root.end()


@dataclass
class LlmCall:
    """One chat completion, as a GenAI client span and (when on) a Langfuse generation."""

    spans: list[trace.Span]  # ours, then the generation's
    generation: LangfuseGeneration | None
    prices_per_1k: tuple[float, float]

    def completed(self, response: ChatCompletion) -> None:
        """The response's model, id, finish reason and token usage (and its text, to Langfuse)."""
        attributes: dict[str, AttributeValue] = {"gen_ai.response.model": response.model}
        if response.id:
            attributes["gen_ai.response.id"] = response.id
        if reasons := [c.finish_reason for c in response.choices if c.finish_reason]:
            attributes["gen_ai.response.finish_reasons"] = reasons
        tokens: dict[str, int] | None = None
        if (usage := response.usage) is not None:
            tokens = {"input": usage.prompt_tokens, "output": usage.completion_tokens}
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        for span in self.spans:
            span.set_attributes(attributes)
        if self.generation is None:
            return
        cost: dict[str, float] | None = None
        if tokens is not None and any(self.prices_per_1k):
            cost_in = tokens["input"] / 1000 * self.prices_per_1k[0]
            cost_out = tokens["output"] / 1000 * self.prices_per_1k[1]
            cost = {"input": cost_in, "output": cost_out, "total": cost_in + cost_out}
        self.generation.update(
            output=response.choices[0].message.content if response.choices else None,
            usage_details=tokens,
            cost_details=cost,
        )


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
    }
    server = urlsplit(base_url or "")
    if server.hostname:
        request["server.address"] = server.hostname
    if port := server.port or {"https": 443, "http": 80}.get(server.scheme):
        request["server.port"] = port
    span = tracer.start_span(JUDGE_CALL_SPAN, kind=trace.SpanKind.CLIENT, attributes=request)
    with ExitStack() as generation_open:
        call = LlmCall([span], None, prices_per_1k)
        if (root := _root.get()) is not None:
            call.generation = generation_open.enter_context(
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
            call.spans.append(trace.get_current_span())
            call.spans[-1].set_attributes(request)
        try:
            yield call
        except BaseException as error:
            # The client's own error, where a translated one names it (its text redacted).
            kind = getattr(error, "error_type", None) or type(error).__name__
            message = f"{kind}: {error}"[:300]
            for failed in call.spans:
                failed.set_attribute("error.type", kind)
                failed.set_status(trace.Status(trace.StatusCode.ERROR, message))
            if call.generation is not None:
                call.generation.update(level="ERROR", status_message=message)
            raise
        finally:
            span.end()
