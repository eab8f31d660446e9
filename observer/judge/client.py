"""The judge's I/O: two chat completions per trace against any OpenAI-compatible endpoint.

Temperature 0, `response_format` json_schema (`observer_claims`, then
`observer_verdicts`); an endpoint that rejects json_schema is remembered and
asked for json_object with the schema in the prompt instead. 429 waits for
`Retry-After`; timeouts, connection errors and 5xx back off with jitter; all
bounded by `max_retries`. Call 2's output that breaks the protocol gets one
repair call; anything still wrong is a judge error: counted, logged, no score.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat
from opentelemetry.trace import Tracer

from observer.judge.outcome import JudgeResult
from observer.judge.protocol import (
    CLAIMS_SCHEMA,
    CLAIMS_SCHEMA_NAME,
    VERDICTS_SCHEMA,
    VERDICTS_SCHEMA_NAME,
    Claim,
    ProtocolError,
    Verdict,
    claims_messages,
    parse_claims,
    parse_verdicts,
    repair_messages,
    response_format,
    verdicts_messages,
)
from observer.model import RagRecord, Signals
from observer.telemetry.otel import judge_trace, llm_call


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
    value = error.response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


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
        langfuse_tracer: Tracer | None = None,
    ) -> None:
        self._client = client
        self.model = model
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self._prices = (price_prompt_per_1k, price_completion_per_1k)
        self._sleep = sleep
        self.json_schema = True
        # Telemetry's judge_tracer: every call also a generation in Langfuse (observer-judge).
        self.langfuse_tracer = langfuse_tracer

    def judge(self, record: RagRecord, signals: Signals) -> JudgeResult:
        """Claims, then verdicts: at most 2 calls, 3 with a repair. Never raises."""
        with judge_trace(self.langfuse_tracer, record.trace_id) as traced:
            result = self._judge(record, signals)
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

    def _judge(self, record: RagRecord, signals: Signals) -> JudgeResult:
        usage = _Usage()
        sentences = signals.citations.sentences
        try:
            content = self._call(
                lambda schema: claims_messages(record, sentences, schema),
                CLAIMS_SCHEMA_NAME,
                CLAIMS_SCHEMA,
                usage,
            )
            claims = parse_claims(content, sentences, len(record.sources))
            verdicts: list[Verdict] = []
            if claims:
                verdicts = self._verdicts(record, claims, usage)
        except JudgeCallError as error:
            return self._result(record, usage, error=f"{error.reason}: {error}")
        except ProtocolError as error:
            return self._result(record, usage, error=f"protocol: {error}")
        return self._result(record, usage, claims=tuple(claims), verdicts=tuple(verdicts))

    def _verdicts(self, record: RagRecord, claims: list[Claim], usage: _Usage) -> list[Verdict]:
        def build(schema: bool) -> list[dict[str, str]]:
            return verdicts_messages(record, claims, schema)

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
        attempt = 0
        while True:
            json_schema = self.json_schema
            messages = build(json_schema)
            try:
                with llm_call(
                    step=name,
                    model=self.model,
                    messages=messages,
                    temperature=0,
                    max_tokens=self.max_tokens,
                    response_format="json_schema" if json_schema else "json_object",
                    base_url=str(self._client.base_url),
                    prices_per_1k=self._prices,
                ) as call:
                    response: ChatCompletion = self._client.chat.completions.create(
                        model=self.model,
                        messages=cast(list[ChatCompletionMessageParam], messages),
                        temperature=0,
                        max_tokens=self.max_tokens,
                        response_format=cast(
                            ResponseFormat, response_format(name, schema, json_schema)
                        ),
                    )
                    call.completed(response)
            except openai.BadRequestError as error:
                if json_schema and _rejects_json_schema(error):
                    self.json_schema = False  # remembered: later traces ask for json_object
                    continue
                raise JudgeCallError("bad_request", str(error)[:300]) from None
            except openai.AuthenticationError as error:
                raise JudgeCallError(
                    "auth", f"the judge endpoint rejected the key ({error.status_code})"
                ) from None
            except openai.RateLimitError as error:
                attempt = self._wait(attempt, "rate_limited", str(error), _retry_after(error))
                continue
            except openai.APITimeoutError as error:
                attempt = self._wait(attempt, "timeout", str(error), None)
                continue
            except openai.APIConnectionError as error:
                attempt = self._wait(attempt, "unreachable", str(error), None)
                continue
            except openai.APIStatusError as error:
                if error.status_code >= 500 or error.status_code in (408, 409):
                    attempt = self._wait(attempt, "server_error", str(error), None)
                    continue
                raise JudgeCallError("bad_request", str(error)[:300]) from None
            usage.calls += 1
            if response.usage is not None:
                usage.prompt += response.usage.prompt_tokens
                usage.completion += response.usage.completion_tokens
            if not response.choices:
                return None
            content: str | None = response.choices[0].message.content
            return content

    def _wait(self, attempt: int, reason: str, message: str, retry_after: float | None) -> int:
        if attempt >= self.max_retries:
            raise JudgeCallError(reason, message[:300])
        backoff = min(30.0, 0.5 * 2.0**attempt) * (0.5 + random.random() / 2)
        self._sleep(retry_after if retry_after is not None else backoff)
        return attempt + 1

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
