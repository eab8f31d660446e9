"""What every instrumented app shares: the model stub, the first stage, the reranker, the prompt.

Stdlib and the project's test fakes only; each app (``generate.py``'s own, and one module
per app under ``apps/``) imports its library inside its ``run`` function, in the child
process ``generate.py`` starts for it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fakes.openai_stub import OpenAIStub, _Reply
from tests.instrumentations.scenarios import CHUNKS, SCENARIOS, Scenario

__all__ = [
    "CHUNKS",
    "MODEL",
    "SCENARIOS",
    "SYSTEM_PROMPT",
    "TOOL_CALL",
    "WORK_S",
    "ToolCallingStub",
    "candidates",
    "chat_messages",
    "cross_encoder",
    "numbered",
    "rerank_ids",
    "scenario_for",
    "user_prompt",
]

MODEL = "gpt-4o-mini"
# Searches and reranks take this long: observation times have millisecond precision, and
# instant steps would all start in the same millisecond, which no real app does.
WORK_S = 0.015
TOOL_CALL = "TOOL_CALL:"
SYSTEM_PROMPT = (
    "Answer from the numbered sources only. Cite the n-th source as [n] after each claim."
)


class ToolCallingStub(OpenAIStub):
    """The OpenAI stub, answering ``TOOL_CALL:{"name", "arguments"}`` with a tool call."""

    def _completion(self, request: dict[str, Any], content: str, number: int) -> _Reply:
        reply = super()._completion(request, content, number)
        if content.startswith(TOOL_CALL):
            call = json.loads(content[len(TOOL_CALL) :])
            choice = reply.body["choices"][0]
            choice["message"]["content"] = None
            choice["message"]["tool_calls"] = [
                {
                    "id": f"call_{number:04d}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                }
            ]
            choice["finish_reason"] = "tool_calls"
        return reply


# ---- shared app pieces -----------------------------------------------------------------------


def scenario_for(question: str) -> Scenario:
    return next(s for s in SCENARIOS if s.question == question)


def candidates(question: str) -> list[tuple[str, float]]:
    """The first stage: 5 candidates with their similarity (a search takes a few ms)."""
    time.sleep(WORK_S)
    return list(scenario_for(question).candidates)


def cross_encoder(question: str, chunk_id: str) -> float:
    """A fixed cross-encoder: the scenario's rerank score (0 for a chunk it never saw)."""
    return scenario_for(question).rerank.get(chunk_id, 0.0)


def rerank_ids(question: str, chunk_ids: list[str]) -> list[tuple[str, float]]:
    time.sleep(WORK_S)  # a cross-encoder takes a few ms too
    scored = sorted(((c, cross_encoder(question, c)) for c in chunk_ids), key=lambda p: -p[1])
    return scored[: scenario_for(question).keep]


def numbered(texts: list[str]) -> str:
    return "\n".join(f"[{i}] {text}" for i, text in enumerate(texts, 1))


def user_prompt(question: str, texts: list[str]) -> str:
    return f"Sources:\n{numbered(texts)}\n\nQuestion: {question}"


def chat_messages(question: str, texts: list[str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_prompt(question, texts)},
    ]
