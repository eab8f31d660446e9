"""The judge's I/O: two chat completions per trace against any OpenAI-compatible endpoint.

Temperature 0, `response_format` json_schema (`observer_claims`, then
`observer_verdicts`); an endpoint that rejects json_schema is remembered and
asked for json_object with the schema in the prompt instead. 429 waits for
`Retry-After`; timeouts, connection errors and 5xx back off with jitter; all
bounded by `max_retries`. Call 2's output that breaks the protocol gets one
repair call; anything still wrong is a judge error: counted, logged, no score.

Each request's data tags end in a fresh random code (observer.judge.protocol,
spotlighting). No claims for an answer that states facts is a `protocol` error.
An answer that is not a chat completion (a proxy's HTML page with a 200) is a
`protocol` error, an unexpected failure an `internal` one: `judge` never
raises. Every error text passes through observer.redaction with the endpoint's
key, so a gateway that echoes the key it was sent puts it in no log or output.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat
from opentelemetry.trace import NoOpTracer, Tracer

from observer.errors import Misdirected, TooLarge, Unreachable
from observer.http_bounds import bounded_client, module_of
from observer.judge.funnel import route
from observer.judge.outcome import JudgeResult
from observer.judge.protocol import (
    CLAIMS_SCHEMA,
    CLAIMS_SCHEMA_NAME,
    VERDICTS_SCHEMA,
    VERDICTS_SCHEMA_NAME,
    Claim,
    ProtocolError,
    Verdict,
    claims_expected,
    claims_messages,
    delimiter,
    parse_claims,
    parse_verdicts,
    repair_messages,
    response_format,
    verdicts_messages,
)
from observer.judge.tracing import judge_trace, llm_call
from observer.model import RagRecord, Signals
from observer.redaction import redact
from observer.resolver.core import ResolverFindings
from observer.retry import call_with_retries, parse_retry_after
from observer.signals.abstention import refusal_phrase
from observer.signals.params import DEFAULT_REFUSAL_PHRASES

if TYPE_CHECKING:
    from langfuse import Langfuse


JUDGE_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


def judge_http_client(timeout_s: float) -> Any:
    """The openai client's HTTP client, bounded as Langfuse's is (observer.http_bounds): a
    completion is kilobytes, so 8 MiB, twice the timeout in all, no redirect of the POST."""
    return bounded_client(
        timeout_s=timeout_s,
        max_bytes=JUDGE_MAX_RESPONSE_BYTES,
        deadline_s=2 * timeout_s,
        limit_name="the judge's answer limit (8 MiB)",
        deadline_name="twice judge.timeout_s",
        fix="set OBSERVER_JUDGE_BASE_URL to the address the endpoint itself answers on",
        http=module_of(openai.DefaultHttpxClient),
    )


class JudgeCallError(Exception):
    """A call failed for good (after retries); `reason` is the counted error kind."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _Usage:
    calls: int = 0
    prompt: int = 0
    completion: int = 0


def _retry_after(error: openai.APIStatusError) -> float | None:
    return parse_retry_after(error.response.headers.get("retry-after"))


class _Transient(Exception):
    """A failure worth another try (429, timeout, connection, 5xx)."""

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class _SchemaRejected(Exception):
    """The endpoint does not take `json_schema` response formats: ask for json_object."""


def _rejects_json_schema(error: openai.BadRequestError) -> bool:
    text = str(error).lower()
    return "response_format" in text or "json_schema" in text


class JudgeClient:
    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        max_retries: int = 3,
        max_tokens: int = 2000,
        price_prompt_per_1k: float = 0.0,
        price_completion_per_1k: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        langfuse: Langfuse | None = None,
        tracer: Tracer | None = None,
        refusal_phrases: tuple[str, ...] = DEFAULT_REFUSAL_PHRASES,
        redacted: tuple[str | None, ...] = (),
        draw_code: Callable[[], str] = lambda: secrets.token_hex(4),
    ) -> None:
        """`redacted` (the endpoint's key) is kept out of every error text; `draw_code`
        draws each request's tag code."""
        self._client = client
        self._refusals = refusal_phrases
        self._secrets = redacted
        self._draw_code = draw_code
        self.model = model
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self._prices = (price_prompt_per_1k, price_completion_per_1k)
        self._sleep = sleep
        self.json_schema = True
        # Telemetry's judge_langfuse: every call also a generation in Langfuse (observer-judge).
        self.langfuse = langfuse
        # Telemetry's tracer: every call an `observer.judge_call` span for the collector.
        self.tracer = tracer or NoOpTracer()

    def judge(
        self, record: RagRecord, signals: Signals, findings: ResolverFindings | None = None
    ) -> JudgeResult:
        """Claims, then verdicts: at most 2 calls, 3 with a repair. Never raises.

        With the resolver's `findings`, the funnel decides the claims citing only
        missing or stale chunks and keeps those chunks out of the verdicts call.
        """
        with judge_trace(self.langfuse, record.trace_id) as traced:
            result = self._judge(record, signals, findings)
            traced.done(
                {
                    "claims": len(result.claims),
                    "faithfulness": result.faithfulness,
                    "citation_accuracy": result.citation_accuracy,
                    "critical_unsupported": result.critical_unsupported,
                    "calls": result.calls,
                },
                result.error,
            )
            return result

    def _judge(
        self, record: RagRecord, signals: Signals, findings: ResolverFindings | None
    ) -> JudgeResult:
        usage = _Usage()
        try:
            return self._protocol(record, signals, findings, usage)
        except Exception as error:  # never raises: a judge error, counted like any other
            return self._result(record, usage, error=f"internal: {type(error).__name__}")

    def _protocol(
        self,
        record: RagRecord,
        signals: Signals,
        findings: ResolverFindings | None,
        usage: _Usage,
    ) -> JudgeResult:
        sentences = signals.citations.sentences
        try:
            texts = (record.question, *(s.text for s in sentences))
            content = self._call(
                lambda schema: claims_messages(
                    record, sentences, schema, delimiter(self._draw_code, *texts)
                ),
                CLAIMS_SCHEMA_NAME,
                CLAIMS_SCHEMA,
                usage,
            )
            claims = parse_claims(content, sentences, len(record.sources))
            stated = 0 if signals.abstained else claims_expected(sentences, self._is_refusal)
            if not claims and stated:
                raise ProtocolError(
                    f"no claims, though the answer states {stated} substantive "
                    f"sentence{'s' if stated > 1 else ''}"
                )
            routed = route(claims, record, findings)
            verdicts = list(routed.decided)
            if routed.asked:
                verdicts += self._verdicts(record, list(routed.asked), routed.keep, usage)
            verdicts.sort(key=lambda v: v.id)
        except JudgeCallError as error:
            message = redact(str(error), self._secrets)
            return self._result(record, usage, error=f"{error.reason}: {message}")
        except ProtocolError as error:
            message = redact(str(error), self._secrets)
            return self._result(record, usage, error=f"protocol: {message}")
        return self._result(record, usage, claims=tuple(claims), verdicts=tuple(verdicts))

    def _is_refusal(self, text: str) -> bool:
        return refusal_phrase(text, self._refusals) is not None

    def _verdicts(
        self,
        record: RagRecord,
        claims: list[Claim],
        keep: tuple[int, ...] | None,
        usage: _Usage,
    ) -> list[Verdict]:
        texts = (record.context or "", *(s.text for s in record.sources), *(c.text for c in claims))

        def build(schema: bool) -> list[dict[str, str]]:
            code = delimiter(self._draw_code, *texts)
            return verdicts_messages(record, claims, schema, code, keep)

        content = self._call(build, VERDICTS_SCHEMA_NAME, VERDICTS_SCHEMA, usage)
        try:
            return parse_verdicts(content, claims)
        except ProtocolError as problem:
            why = str(problem)
        # One repair: call 2 again with its own messages, the faulty output and why.
        repaired = self._call(
            lambda schema: repair_messages(build(schema), content or "", why),
            VERDICTS_SCHEMA_NAME,
            VERDICTS_SCHEMA,
            usage,
        )
        return parse_verdicts(repaired, claims)

    # -- one call, with retries -------------------------------------------------

    def _call(
        self,
        build: Callable[[bool], list[dict[str, str]]],
        name: str,
        schema: dict[str, Any],
        usage: _Usage,
    ) -> str | None:
        """One call of the protocol, retried per observer.retry (429, timeouts, 5xx)."""
        while True:
            json_schema = self.json_schema

            def attempt(js: bool = json_schema) -> ChatCompletion:
                return self._create(build(js), name, schema, js)

            try:
                response = call_with_retries(
                    attempt,
                    attempts=self.max_retries + 1,
                    base_s=0.5,
                    max_s=30.0,
                    retryable=lambda e: isinstance(e, _Transient),
                    retry_after=lambda e: e.retry_after if isinstance(e, _Transient) else None,
                    sleep=self._sleep,
                )
            except _SchemaRejected:
                self.json_schema = False  # remembered: later traces ask for json_object
                continue
            except _Transient as error:
                raise JudgeCallError(error.reason, str(error)[:300]) from None
            usage.calls += 1
            if response.usage is not None:
                usage.prompt += response.usage.prompt_tokens
                usage.completion += response.usage.completion_tokens
            if not response.choices:
                return None
            content: str | None = response.choices[0].message.content
            return content

    def _create(
        self, messages: list[dict[str, str]], name: str, schema: dict[str, Any], json_schema: bool
    ) -> ChatCompletion:
        """One request; the openai client's errors as retryable or final ones, their texts
        redacted before anything (the call's span included) sees them."""
        with llm_call(
            self.tracer,
            step=name,
            model=self.model,
            messages=messages,
            temperature=0,
            max_tokens=self.max_tokens,
            response_format="json_schema" if json_schema else "json_object",
            base_url=str(self._client.base_url),
            prices_per_1k=self._prices,
        ) as call:
            try:
                response: object = self._client.chat.completions.create(
                    model=self.model,
                    messages=cast(list[ChatCompletionMessageParam], messages),
                    temperature=0,
                    max_tokens=self.max_tokens,
                    response_format=cast(
                        ResponseFormat, response_format(name, schema, json_schema)
                    ),
                )
            except openai.OpenAIError as error:
                raise self._translated(error, json_schema) from None
            if not isinstance(response, ChatCompletion):  # a proxy's page with a 200, ...
                shown = redact(" ".join(str(response).split())[:120], self._secrets)
                raise JudgeCallError(
                    "protocol", f"the endpoint's answer is not a chat completion: {shown!r}"
                )
            call.completed(response)
            return response

    def _translated(self, error: openai.OpenAIError, json_schema: bool) -> Exception:
        """The client's error as observer's, its text redacted and its type kept (the span's
        `error.type`)."""
        translated = self._translation(error, json_schema)
        translated.error_type = type(error).__name__  # type: ignore[attr-defined]
        return translated

    def _translation(self, error: openai.OpenAIError, json_schema: bool) -> Exception:
        text = redact(str(error), self._secrets)
        if isinstance(error, openai.BadRequestError):
            if json_schema and _rejects_json_schema(error):
                return _SchemaRejected()
            return JudgeCallError("bad_request", text[:300])
        if isinstance(error, openai.AuthenticationError):
            return JudgeCallError(
                "auth", f"the judge endpoint rejected the key ({error.status_code})"
            )
        if isinstance(error, openai.RateLimitError):
            return _Transient("rate_limited", text, _retry_after(error))
        if isinstance(error, openai.APITimeoutError):
            return _Transient("timeout", text)
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__  # observer.http_bounds' bounds raise inside the transport
            if isinstance(cause, Misdirected | TooLarge):
                return JudgeCallError("protocol", redact(str(cause), self._secrets)[:300])
            if isinstance(cause, Unreachable):
                return _Transient("timeout", redact(str(cause), self._secrets))
            return _Transient("unreachable", text)
        if isinstance(error, openai.APIStatusError):
            if error.status_code >= 500 or error.status_code in (408, 409):
                return _Transient("server_error", text)
            return JudgeCallError("bad_request", text[:300])
        return JudgeCallError("protocol", text[:300])  # an answer openai could not read

    def _result(self, record: RagRecord, usage: _Usage, **fields: Any) -> JudgeResult:
        cost = usage.prompt / 1000 * self._prices[0] + usage.completion / 1000 * self._prices[1]
        return JudgeResult(
            trace_id=record.trace_id,
            calls=usage.calls,
            prompt_tokens=usage.prompt,
            completion_tokens=usage.completion,
            cost_usd=cost,
            **fields,
        )
