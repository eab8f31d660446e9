"""Tests of the Anthropic Messages API stub: the documented request checks and reply shapes.

The project does not depend on the ``anthropic`` client (only the capture app of
tests/instrumentations does), so these speak HTTP with the standard library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from .anthropic_stub import MESSAGES_PATH, AnthropicStub, ToolUse

HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
QUESTION = {"role": "user", "content": "How long does a refund take?"}


@pytest.fixture
def stub() -> Iterator[AnthropicStub]:
    with AnthropicStub() as running:
        yield running


def post(
    stub: AnthropicStub, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(
        stub.url + MESSAGES_PATH,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(HEADERS if headers is None else headers)},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 256, "messages": list(messages or [QUESTION])}


def test_a_scripted_text_turn_is_a_message_that_ends_the_turn(stub: AnthropicStub) -> None:
    stub.script("Refunds take 5 business days [1].")
    status, reply, headers = post(stub, body())
    assert status == 200
    assert reply["type"] == "message" and reply["role"] == "assistant"
    assert reply["id"].startswith("msg_") and reply["model"] == "claude-test"
    assert reply["content"] == [{"type": "text", "text": "Refunds take 5 business days [1]."}]
    assert reply["stop_reason"] == "end_turn" and reply["stop_sequence"] is None
    assert reply["usage"]["input_tokens"] >= 1 and reply["usage"]["output_tokens"] >= 1
    assert headers["request-id"].startswith("req_")


def test_a_scripted_tool_use_then_its_result_then_the_answer(stub: AnthropicStub) -> None:
    stub.script(ToolUse("search", {"query": "refunds"}), "Done.")
    status, first, _ = post(stub, body())
    assert status == 200 and first["stop_reason"] == "tool_use"
    (call,) = first["content"]
    assert call["type"] == "tool_use" and call["id"].startswith("toolu_")
    assert (call["name"], call["input"]) == ("search", {"query": "refunds"})
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "[...]"}],
    }
    status, second, _ = post(stub, body(QUESTION, {"role": "assistant", "content": [call]}, result))
    assert status == 200 and second["content"][0]["text"] == "Done."
    assert len(stub.requests) == 2 and stub.pending_script == 0


def test_the_key_may_come_as_a_bearer_token(stub: AnthropicStub) -> None:
    stub.script("ok")
    headers = {"Authorization": "Bearer sk-ant-test", "anthropic-version": "2023-06-01"}
    status, reply, _ = post(stub, body(), headers)
    assert (status, reply["content"][0]["text"]) == (200, "ok")


def test_a_tool_use_without_its_result_is_refused(stub: AnthropicStub) -> None:
    stub.script("never sent")
    call = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}
    status, reply, _ = post(
        stub,
        body(QUESTION, {"role": "assistant", "content": [call]}, {"role": "user", "content": "?"}),
    )
    assert status == 400
    assert reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"
    assert "toolu_1" in reply["error"]["message"]
    assert stub.pending_script == 1  # a refused request consumes no scripted turn


@pytest.mark.parametrize(
    ("headers", "request_body", "status", "kind"),
    [
        ({"anthropic-version": "2023-06-01"}, body(), 401, "authentication_error"),
        ({"x-api-key": "sk-ant-test"}, body(), 400, "invalid_request_error"),
        (None, {"model": "claude-test", "messages": [QUESTION]}, 400, "invalid_request_error"),
        (None, {"max_tokens": 5, "messages": [QUESTION]}, 400, "invalid_request_error"),
        (
            None,
            {"model": "claude-test", "max_tokens": 5, "messages": []},
            400,
            "invalid_request_error",
        ),
        (
            None,
            body({"role": "system", "content": "Be brief."}, QUESTION),
            400,
            "invalid_request_error",
        ),
    ],
    ids=["no-api-key", "no-version", "no-max-tokens", "no-model", "no-messages", "system-role"],
)
def test_the_documented_errors(
    stub: AnthropicStub,
    headers: dict[str, str] | None,
    request_body: dict[str, Any],
    status: int,
    kind: str,
) -> None:
    stub.script("never sent")
    got, reply, _ = post(stub, request_body, headers)
    assert (got, reply["type"], reply["error"]["type"]) == (status, "error", kind)
    assert stub.pending_script == 1


def test_nothing_scripted_is_a_server_error(stub: AnthropicStub) -> None:
    status, reply, _ = post(stub, body())
    assert (status, reply["error"]["type"]) == (500, "api_error")
