"""Tests of the Gemini ``generateContent`` stub: the documented request checks and replies.

The project does not depend on the ``google-genai`` client (only the capture app of
tests/instrumentations does), so these speak HTTP with the standard library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from .gemini_stub import FunctionCall, GeminiStub

PATH = "/v1beta/models/gemini-test:generateContent"
QUESTION = {"role": "user", "parts": [{"text": "How long does a refund take?"}]}
CALL = {"role": "model", "parts": [{"functionCall": {"name": "search", "args": {"q": "x"}}}]}
RESPONSE = {
    "role": "user",
    "parts": [{"functionResponse": {"name": "search", "response": {"result": []}}}],
}


@pytest.fixture
def stub() -> Iterator[GeminiStub]:
    with GeminiStub() as running:
        yield running


def post(
    stub: GeminiStub, body: Any, *, key: str | None = "test-key", path: str = PATH
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["x-goog-api-key"] = key
    request = urllib.request.Request(
        stub.url + path, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_scripted_text_turn(stub: GeminiStub) -> None:
    stub.script("Refunds take 5 business days [1].")
    status, reply = post(stub, {"contents": [QUESTION]})
    assert status == 200
    (candidate,) = reply["candidates"]
    assert candidate["content"] == {
        "role": "model",
        "parts": [{"text": "Refunds take 5 business days [1]."}],
    }
    assert candidate["finishReason"] == "STOP"
    assert reply["modelVersion"] == "gemini-test"
    usage = reply["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]


def test_a_function_call_then_its_response_then_the_answer(stub: GeminiStub) -> None:
    stub.script(FunctionCall("search", {"q": "x"}), "Done.")
    status, first = post(stub, {"contents": [QUESTION]})
    assert status == 200
    assert first["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "search", "args": {"q": "x"}}}
    ]
    status, second = post(stub, {"contents": [QUESTION, CALL, RESPONSE]})
    assert status == 200 and second["candidates"][0]["content"]["parts"] == [{"text": "Done."}]
    assert len(stub.requests) == 2 and stub.pending_script == 0


def test_the_key_may_come_in_the_query(stub: GeminiStub) -> None:
    stub.script("ok")
    status, _ = post(stub, {"contents": [QUESTION]}, key=None, path=PATH + "?key=test-key")
    assert status == 200


@pytest.mark.parametrize(
    ("key", "contents", "code", "status"),
    [
        (None, [QUESTION], 403, "PERMISSION_DENIED"),
        ("test-key", [], 400, "INVALID_ARGUMENT"),
        (
            "test-key",
            [{"role": "system", "parts": [{"text": "Be brief."}]}],
            400,
            "INVALID_ARGUMENT",
        ),
        ("test-key", [QUESTION, RESPONSE], 400, "INVALID_ARGUMENT"),
        (
            "test-key",
            [QUESTION, CALL, {"role": "user", "parts": [RESPONSE["parts"][0]] * 2}],
            400,
            "INVALID_ARGUMENT",
        ),
    ],
    ids=["no-key", "no-contents", "system-role", "response-without-call", "more-responses"],
)
def test_the_documented_errors(
    stub: GeminiStub, key: str | None, contents: list[Any], code: int, status: str
) -> None:
    stub.script("never sent")
    got, reply = post(stub, {"contents": contents}, key=key)
    assert (got, reply["error"]["code"], reply["error"]["status"]) == (code, code, status)
    assert stub.pending_script == 1  # a refused request consumes no scripted turn


def test_nothing_scripted_is_a_server_error(stub: GeminiStub) -> None:
    status, reply = post(stub, {"contents": [QUESTION]})
    assert (status, reply["error"]["status"]) == (500, "INTERNAL")


def test_another_route_is_not_found(stub: GeminiStub) -> None:
    status, reply = post(stub, {"contents": [QUESTION]}, path="/v1beta/models/x:countTokens")
    assert (status, reply["error"]["status"]) == (404, "NOT_FOUND")
