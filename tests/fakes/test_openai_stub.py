"""Tests of the OpenAI stub itself, driven by the real ``openai`` client."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, cast

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from .openai_stub import (
    CLAIMS_SCHEMA,
    JSON_SCHEMA_REJECTION,
    VERDICTS_SCHEMA,
    OpenAIStub,
    claims_json,
    default_judge,
    schema_name_of,
    verdicts_json,
)

MODEL = "gpt-test-mini"

CLAIMS_SYSTEM = "You split answers into claims. Reply with JSON (schema observer_claims)."
VERDICTS_SYSTEM = "You check claims against sources. Reply with JSON (schema observer_verdicts)."

SENTENCES = """Split these sentences.
<answer_sentences>
[0] The Eiffel Tower is 330 metres tall [1].
[1] [2][3]
[2] It opened in 1889 [1][2] and is in Paris.
</answer_sentences>"""

SOURCES_AND_CLAIMS = """Check each claim.
<sources>
[1] Eiffel Tower
The tower is 330 metres tall.

[2] History of Paris
The tower opened in 1889 for the World's Fair.
</sources>
<claims>
{"id": 1, "text": "The Eiffel Tower is 330 metres tall.", "sentence": 0, "citations": [1]}
{"id": 2, "text": "It opened in 1889.", "sentence": 1, "citations": [1]}
{"id": 3, "text": "It is in Paris.", "sentence": 1, "citations": []}
{"id": 4, "text": "It has 1665 steps.", "sentence": 2, "citations": [1, 2]}
{"id": 5, "text": "It is UNSUPPORTED by anything.", "sentence": 2, "citations": [2]}
</claims>"""


def schema_format(name: str) -> ResponseFormat:
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "strict": True, "schema": {"type": "object"}},
    }


def messages(system: str, user: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        yield running


def make_client(stub: OpenAIStub, timeout: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=stub.url + "/v1", api_key="sk-test", max_retries=0, timeout=timeout
    )


@pytest.fixture
def client(stub: OpenAIStub) -> Iterator[openai.OpenAI]:
    with make_client(stub) as running:
        yield running


def ask(
    client: openai.OpenAI,
    user: str = "Say hi in JSON.",
    *,
    system: str = CLAIMS_SYSTEM,
    response_format: ResponseFormat | None = None,
) -> str:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=messages(system, user),
        temperature=0,
        response_format=response_format or schema_format(CLAIMS_SCHEMA),
    )
    content = completion.choices[0].message.content
    assert content is not None
    return content


# ---- the default judge ------------------------------------------------------------------


def test_default_judge_splits_sentences_into_claims(client: openai.OpenAI) -> None:
    content = ask(client, SENTENCES, response_format=schema_format(CLAIMS_SCHEMA))
    assert json.loads(content) == {
        "claims": [
            {"id": 1, "text": "The Eiffel Tower is 330 metres tall.", "sentence": 0},
            {"id": 2, "text": "It opened in 1889 and is in Paris.", "sentence": 2},
        ]
    }


def test_default_judge_checks_numbers_against_sources(client: openai.OpenAI) -> None:
    content = ask(
        client,
        SOURCES_AND_CLAIMS,
        system=VERDICTS_SYSTEM,
        response_format=schema_format(VERDICTS_SCHEMA),
    )
    assert json.loads(content) == {
        "verdicts": [
            {"id": 1, "supported": True, "cited_support": True},
            {"id": 2, "supported": True, "cited_support": False},  # 1889 is only in [2]
            {"id": 3, "supported": True, "cited_support": None},
            {"id": 4, "supported": False, "cited_support": False},
            {"id": 5, "supported": False, "cited_support": False},  # the test hook
        ]
    }


def test_json_object_requests_name_the_schema_in_the_system_message(
    client: openai.OpenAI,
) -> None:
    json_object: ResponseFormat = {"type": "json_object"}
    claims = ask(client, SENTENCES, system=CLAIMS_SYSTEM, response_format=json_object)
    verdicts = ask(client, SOURCES_AND_CLAIMS, system=VERDICTS_SYSTEM, response_format=json_object)
    assert len(json.loads(claims)["claims"]) == 2
    assert len(json.loads(verdicts)["verdicts"]) == 5


def test_default_judge_edge_cases() -> None:
    empty: dict[str, Any] = {
        "messages": messages(CLAIMS_SYSTEM, "<answer_sentences>\n</answer_sentences>")
    }
    assert json.loads(default_judge(CLAIMS_SCHEMA, empty)) == {"claims": []}
    # The number of a "[n]" source marker is not source text; "5" is not in "15".
    user = (
        '<sources>\n[3] t\n15 apples\n</sources>\n<claims>\n{"id": 7, "text": "3 or 5"}\n</claims>'
    )
    request: dict[str, Any] = {"messages": messages("JSON please", user)}
    assert schema_name_of(request) == VERDICTS_SCHEMA  # inferred from the <claims> block
    assert json.loads(default_judge(VERDICTS_SCHEMA, request)) == {
        "verdicts": [{"id": 7, "supported": False, "cited_support": None}]
    }
    with pytest.raises(ValueError, match="unknown schema"):
        default_judge("something_else", request)
    with pytest.raises(ValueError, match="no user message has a <answer_sentences>"):
        default_judge(CLAIMS_SCHEMA, request)


def test_a_repair_turn_is_answered_from_the_earlier_blocks(client: openai.OpenAI) -> None:
    turns = [
        *messages(VERDICTS_SYSTEM, SOURCES_AND_CLAIMS),
        {"role": "assistant", "content": "not json"},
        {"role": "user", "content": "That reply is invalid. Reply again with the JSON only."},
    ]
    completion = client.chat.completions.create(
        model=MODEL,
        messages=cast(list[ChatCompletionMessageParam], turns),
        response_format={"type": "json_object"},
    )
    content = completion.choices[0].message.content
    assert content is not None
    assert [v["id"] for v in json.loads(content)["verdicts"]] == [1, 2, 3, 4, 5]


# ---- scripted answers and faults --------------------------------------------------------


def test_scripted_answers_come_before_the_judge(stub: OpenAIStub, client: openai.OpenAI) -> None:
    stub.script("plain text", claims_json([(1, "A claim.", 0)]))
    assert ask(client) == "plain text"
    assert ask(client) == '{"claims": [{"id": 1, "text": "A claim.", "sentence": 0}]}'
    assert stub.pending_script == 0
    assert json.loads(ask(client, SENTENCES))["claims"][0]["id"] == 1  # judge again
    assert verdicts_json([(1, True, None)]) == (
        '{"verdicts": [{"id": 1, "supported": true, "cited_support": null}]}'
    )


def test_scripted_500_is_an_internal_server_error(stub: OpenAIStub, client: openai.OpenAI) -> None:
    stub.script(500, 503)
    with pytest.raises(openai.InternalServerError) as first:
        ask(client)
    assert first.value.status_code == 500
    assert first.value.type == "server_error"
    with pytest.raises(openai.InternalServerError) as second:
        ask(client)
    assert second.value.status_code == 503
    assert stub.calls == 2


def test_scripted_429_carries_retry_after(stub: OpenAIStub, client: openai.OpenAI) -> None:
    stub.script((429, 1.5), (429, 2))
    with pytest.raises(openai.RateLimitError) as err:
        ask(client)
    assert err.value.response.headers["retry-after"] == "1.5"
    assert err.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.RateLimitError) as again:
        ask(client)
    assert again.value.response.headers["retry-after"] == "2"


def test_reject_json_schema_while_json_object_works(
    stub: OpenAIStub, client: openai.OpenAI
) -> None:
    stub.reject_json_schema = True
    stub.script("scripted")
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, response_format=schema_format(CLAIMS_SCHEMA))
    assert err.value.body == {
        "message": JSON_SCHEMA_REJECTION,
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }
    assert err.value.param == "response_format"
    # The rejection did not consume the scripted answer; the fallback request gets it.
    assert ask(client, response_format={"type": "json_object"}) == "scripted"


def test_json_object_without_the_word_json_is_rejected(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="must contain the word 'json'"):
        ask(client, "hello", system="observer_claims", response_format={"type": "json_object"})


def test_scripted_sleep_times_the_client_out(stub: OpenAIStub) -> None:
    stub.script(("sleep", 5.0))  # the stub's stop() cuts it short
    with make_client(stub, timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            ask(client, SENTENCES)
        assert time.monotonic() - started < 4.0  # the client's 0.3 s, not the stub's 5 s
    assert stub.calls == 1


def test_finish_reason_is_settable(stub: OpenAIStub, client: openai.OpenAI) -> None:
    stub.finish_reason = "length"
    stub.script('{"claims": [')
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "json"}],
        response_format={"type": "json_object"},
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content == '{"claims": ['


def test_completion_shape_and_usage(stub: OpenAIStub, client: openai.OpenAI) -> None:
    stub.script("x" * 40)
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "s" * 10},
            {"role": "user", "content": [{"type": "text", "text": "u" * 30}]},
        ],
        temperature=0,
    )
    assert completion.object == "chat.completion"
    assert completion.model == MODEL
    assert completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 10  # (10 + 30) // 4
    assert completion.usage.completion_tokens == 10
    assert completion.usage.total_tokens == 20
    assert stub.requests[0]["temperature"] == 0
    assert stub.request_headers[0]["authorization"] == "Bearer sk-test"

    stub.script("")
    tiny = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ""}])
    assert tiny.usage is not None
    assert (tiny.usage.prompt_tokens, tiny.usage.completion_tokens) == (1, 1)


def test_judge_errors_are_500s() -> None:
    def broken(schema_name: str, request: dict[str, Any]) -> str:
        raise RuntimeError("boom")

    with OpenAIStub(judge=broken) as stub, make_client(stub) as client:
        with pytest.raises(openai.InternalServerError, match="boom"):
            ask(client)
        assert [str(e) for e in stub.judge_errors] == ["boom"]


def test_script_rejects_nonsense(stub: OpenAIStub) -> None:
    with pytest.raises(ValueError):
        stub.script(200)
    with pytest.raises(TypeError):
        stub.script(("nap", 1.0))
    assert stub.pending_script == 0


# ---- raw HTTP -----------------------------------------------------------------------------


def raw_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            answer = json.loads(response.read())
            return int(response.status), cast(dict[str, Any], answer)
    except urllib.error.HTTPError as err:
        return err.code, cast(dict[str, Any], json.loads(err.read()))


def test_auth_is_required_and_other_paths_are_404(stub: OpenAIStub) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    status, answer = raw_post(stub.url + "/v1/chat/completions", body, {})
    assert status == 401
    assert answer["error"]["type"] == "invalid_request_error"
    status, _ = raw_post(stub.url + "/v1/completions", body, {"Authorization": "Bearer sk-x"})
    assert status == 404
    assert stub.calls == 0


def test_latency_does_not_serialize_requests(stub: OpenAIStub, client: openai.OpenAI) -> None:
    stub.latency_s = 1.0  # long against the requests' own cost, which a busy machine stretches
    results: list[str] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        content = ask(client, f"<answer_sentences>\n[0] Sentence {index}.\n</answer_sentences>")
        with lock:
            results.append(content)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    elapsed = time.monotonic() - started
    assert len(results) == 4
    assert elapsed < 3.0  # serialized, 4 x 1 s would be at least 4 s (0.3 s: 1.1 s under load)
    assert stub.calls == 4
