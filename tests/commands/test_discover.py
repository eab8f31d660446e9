"""`observer discover` and `check`'s summary: a sample of traces per name, and a
[mapping] suggestion that, pasted into a config file, makes the unread ones score."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from observer.app.discover import Discovery, discover, rules_from_settings, since_start
from observer.app.explain import by_trace
from observer.cli import main
from observer.config import Settings, load_settings
from observer.mapping.convention import map_trace
from observer.mapping.rules import Skip
from observer.times import iso
from observer.views.discover import check_rows
from tests.daemon_helpers import configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse

ANSWER = "Refunds are open for 30 days after purchase [1]. The money is back within 5 days [2]."
DOCUMENTS = [
    {
        "chunk_id": "refunds#1",
        "text": "Refunds are open for 30 days after purchase.",
        "score": 0.91,
    },
    {"chunk_id": "refunds#2", "text": "Refunds reach the card within 5 days.", "score": 0.52},
]


def prompt(documents: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The chat messages the app sends: its documents numbered, then the question."""
    texts = [str(d.get("text") or d.get("body") or "") for d in documents]
    numbered = "\n".join(f"[{n}] {text}" for n, text in enumerate(texts, 1))
    return [
        {"role": "system", "content": "Answer from the sources; cite them as [n]."},
        {"role": "user", "content": f"Sources:\n{numbered}\n\nHow long are refunds open?"},
    ]


def rag_trace(
    trace_id: str,
    name: str,
    start: datetime,
    *,
    output: Any = ANSWER,
    documents: list[dict[str, Any]] | None = None,
    retriever_type: str = "RETRIEVER",
    llm_type: str = "GENERATION",
    llm_name: str = "llm",
) -> list[dict[str, Any]]:
    """A small RAG trace as the Observations API v2 returns it: root, search, LLM call."""
    root = f"{trace_id}-root"

    def at(seconds: float) -> str:
        return iso(start + timedelta(seconds=seconds))

    return [
        {
            "id": root,
            "traceId": trace_id,
            "type": "SPAN",
            "name": name,
            "isRootObservation": True,
            "startTime": at(0),
            "endTime": at(3),
            "input": json.dumps({"question": "How long are refunds open?"}),
            "output": None,
            "metadata": {},
        },
        {
            "id": f"{trace_id}-search",
            "traceId": trace_id,
            "parentObservationId": root,
            "isRootObservation": False,
            "type": retriever_type,
            "name": "search",
            "startTime": at(0.1),
            "endTime": at(0.4),
            "input": json.dumps({"query": "refunds"}),
            "output": json.dumps(DOCUMENTS if documents is None else documents),
            "metadata": {},
        },
        {
            "id": f"{trace_id}-llm",
            "traceId": trace_id,
            "parentObservationId": root,
            "isRootObservation": False,
            "type": llm_type,
            "name": llm_name,
            "startTime": at(0.5),
            "endTime": at(2.5),
            "input": json.dumps(prompt(DOCUMENTS if documents is None else documents)),
            "output": output if isinstance(output, str) else json.dumps(output),
            "metadata": {},
        },
    ]


def health_trace(trace_id: str, start: datetime) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{trace_id}-root",
            "traceId": trace_id,
            "type": "SPAN",
            "name": "health-check",
            "isRootObservation": True,
            "startTime": iso(start),
            "endTime": iso(start + timedelta(seconds=0.1)),
            "output": json.dumps({"status": "ok"}),
            "metadata": {},
        },
        {
            "id": f"{trace_id}-ping",
            "traceId": trace_id,
            "parentObservationId": f"{trace_id}-root",
            "isRootObservation": False,
            "type": "SPAN",
            "name": "ping-llm",
            "startTime": iso(start),
            "output": json.dumps({"ok": True, "latency_ms": 85}),
            "metadata": {},
        },
    ]


BODY = [{"chunk_id": d["chunk_id"], "body": d["text"], "score": d["score"]} for d in DOCUMENTS]
# name: (how many, how each is built); every one an answer but the health check.
SHAPES: dict[str, tuple[int, dict[str, Any]]] = {
    "support-chat": (4, {}),  # the default convention reads it
    "reply-bot": (3, {"output": {"reply": ANSWER, "model": "gpt-4o-mini"}}),  # no_answer_text
    "body-kb": (3, {"documents": BODY}),  # the RETRIEVER's text under "body": malformed
    "untyped-kb": (2, {"documents": BODY, "retriever_type": "SPAN"}),  # citations_without_sources
    "llm-span": (2, {"llm_type": "SPAN", "llm_name": "openai.chat"}),  # no_generation
}


def sample(now: datetime) -> list[dict[str, Any]]:
    """The mixed sample, every trace started within the last hour before `now`."""
    observations: list[dict[str, Any]] = []
    index = 0
    for name, (count, shape) in SHAPES.items():
        for number in range(count):
            start = now - timedelta(minutes=50) + timedelta(seconds=90 * index)
            observations += rag_trace(f"{name}-{number}", name, start, **shape)
            index += 1
    observations += health_trace("health-0", now - timedelta(minutes=5))
    return observations


ANSWERS = sum(count for count, _ in SHAPES.values())
TRACES = ANSWERS + 1


def run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


def discovered(observations: list[dict[str, Any]], settings: Settings) -> Discovery:
    return discover(by_trace(observations), settings.mapping_rules(), rules_from_settings(settings))


def scored_with(settings: Settings, observations: list[dict[str, Any]]) -> set[str]:
    rules = settings.mapping_rules()
    return {
        trace_id
        for trace_id, trace in by_trace(observations).items()
        if not isinstance(map_trace(trace_id, trace, rules), Skip)
    }


# -- the pure discovery ---------------------------------------------------------------------


def test_per_name_counts_reasons_and_where_each_part_was_found() -> None:
    found = discovered(sample(datetime.now(UTC)), Settings())
    names = {r.name: r for r in found.names}
    assert found.traces == TRACES and found.answers == ANSWERS - 2  # llm-span: no generation
    assert found.scored == 4
    chat = names["support-chat"]
    assert (chat.traces, chat.answers, chat.scored, dict(chat.skips)) == (4, 4, 4, {})
    assert chat.found["question"].most_common(1)[0] == ("input.question", 4)
    answer_rule, answers = chat.found["answer"].most_common(1)[0]
    assert answer_rule.startswith("the generation; output as ") and answers == 4
    assert chat.found["sources"].most_common(1)[0] == ("output: N documents", 4)
    assert chat.found_at[("sources", "output: N documents")] == {"search (RETRIEVER)": 4}
    assert chat.proposals == []
    assert dict(names["reply-bot"].skips) == {"no_answer_text": 3}
    assert dict(names["body-kb"].skips) == {"malformed_sources": 3}
    assert dict(names["untyped-kb"].skips) == {"citations_without_sources": 2}
    assert dict(names["llm-span"].skips) == {"no_generation": 2}
    assert names["llm-span"].answers == 0
    assert dict(names["health-check"].skips) == {"no_generation": 1}


def test_each_unread_shape_gets_the_key_that_reads_it_and_the_result_is_shown() -> None:
    found = discovered(sample(datetime.now(UTC)), Settings())
    names = {r.name: r for r in found.names}
    proposed = {name: {(p.key, p.value) for p in r.proposals} for name, r in names.items()}
    assert proposed["reply-bot"] == {("answer_keys", "reply")}
    assert proposed["body-kb"] == {("text_keys", "body")}
    assert proposed["untyped-kb"] == {("text_keys", "body")}
    assert proposed["llm-span"] == {("generation_names", "openai.chat")}
    assert proposed["health-check"] == set()  # a ping is no LLM answer: nothing to read
    assert names["health-check"].notes  # and it says no mapping key reads it
    for name in ("reply-bot", "body-kb", "untyped-kb", "llm-span"):
        assert names[name].scored_after == names[name].traces, name
    suggestion = found.suggestion
    assert suggestion is not None
    assert (suggestion.scored_before, suggestion.scored_after) == (4, ANSWERS)
    assert suggestion.lost == ()
    assert suggestion.mapping == {
        "answer_keys": ["content", "text", "answer", "response", "reply"],
        "text_keys": ["text", "content", "page_content", "body"],
        # names replace types: the generation read today stays one
        "generation_names": ["llm", "openai.chat"],
    }


def test_the_suggested_block_pasted_into_a_config_file_makes_them_score(tmp_path: Path) -> None:
    observations = sample(datetime.now(UTC))
    found = discovered(observations, Settings())
    assert found.suggestion is not None
    config = tmp_path / "observer.toml"
    config.write_text("[source]\npoll_interval_s = 30\n\n" + found.suggestion.toml)
    pasted = load_settings(config)
    assert len(scored_with(Settings(), observations)) == 4
    assert len(scored_with(pasted, observations)) == ANSWERS
    assert found.suggestion.toml.startswith("[mapping]\n")


def test_a_suggestion_keeps_the_mapping_already_configured(tmp_path: Path) -> None:
    config = tmp_path / "observer.toml"
    config.write_text('[mapping]\nquestion_keys = ["question", "ask"]\n')
    settings = load_settings(config)
    found = discovered(sample(datetime.now(UTC)), settings)
    assert found.suggestion is not None
    assert 'question_keys = ["question", "ask"]' in found.suggestion.toml
    config.write_text(found.suggestion.toml)  # in place of the section it had
    assert load_settings(config).mapping.question_keys == ["question", "ask"]


def test_the_default_convention_needs_no_suggestion_on_the_demo_traces() -> None:
    found = discovered(demo_observations(), Settings())
    assert found.suggestion is None
    # The demo's two answer skips are broken on purpose (a timed-out generation, a rerank
    # whose output is a string): no mapping reads them, and none is suggested.
    assert (found.skips["no_answer_text"], found.skips["malformed_sources"]) == (1, 1)
    assert (
        found.scored
        == found.answers - found.skips["no_answer_text"] - found.skips["malformed_sources"]
    )


def test_documents_under_an_unknown_key_of_an_object_are_read_and_said_where() -> None:
    now = datetime.now(UTC)
    observations = rag_trace("hits-0", "hits", now, documents=None)
    observations[1]["output"] = json.dumps({"hits": DOCUMENTS, "took_ms": 3})
    found = discovered(observations, Settings())
    report = found.names[0]
    assert (report.scored, dict(report.skips)) == (1, {})
    assert report.found["sources"].most_common(1)[0] == ("output.hits: N documents", 1)
    assert found.suggestion is None


def test_scores_and_ids_under_unknown_keys_are_suggested_without_changing_counts() -> None:
    documents = [
        {"uid": f"c{i}", "text": d["text"], "similarity": d["score"]}
        for i, d in enumerate(DOCUMENTS)
    ]
    found = discovered(
        rag_trace("sim-0", "sim", datetime.now(UTC), documents=documents), Settings()
    )
    assert found.suggestion is not None
    assert found.suggestion.mapping == {
        "chunk_id_keys": ["chunk_id", "id", "uid"],
        "score_keys": ["rerank_score", "relevance_score", "score", "similarity"],
    }
    assert (found.suggestion.scored_before, found.suggestion.scored_after) == (1, 1)


@pytest.mark.parametrize(
    ("text", "back"),
    [("1h", timedelta(hours=1)), ("30m", timedelta(minutes=30)), ("2d", timedelta(days=2))],
)
def test_since_as_a_duration(text: str, back: timedelta) -> None:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert since_start(text, now) == now - back


def test_since_as_an_iso_time_and_a_bad_one() -> None:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert since_start("2026-11-28T00:00:00Z", now) == datetime(2026, 11, 28, tzinfo=UTC)
    with pytest.raises(ValueError, match="not a duration or an ISO-8601 time"):
        since_start("yesterday", now)


def test_check_rows_give_the_counts_the_top_reasons_and_the_hint() -> None:
    rows = dict(check_rows(discovered(sample(datetime.now(UTC)), Settings()), "the last hour"))
    assert rows["traces read"] == (
        f"{TRACES} traces in the last hour, {ANSWERS - 2} answers, 4 scored"
    )
    assert rows["skipped"] == (
        "11 (malformed_sources 3, no_answer_text 3, no_generation 3, citations_without_sources 2)"
    )
    assert "run `observer discover`" in rows["hint"]
    demo = dict(check_rows(discovered(demo_observations(), Settings()), "the last hour"))
    assert "hint" not in demo
    # Five reasons, four shown: the row says there is one more rather than add up wrong.
    assert demo["skipped"].startswith("5 (") and demo["skipped"].endswith(", and 1 more reason)")


# -- the command, against the fake Langfuse and a file ----------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(sample(server.clock()))
        server.add_observations(demo_observations())  # days old: outside the last hour
        configure(monkeypatch, server)
        monkeypatch.setenv("COLUMNS", "400")  # check's table on one line per row
        yield server


def pasted_block(output: str) -> str:
    """The [mapping] block as discover printed it, up to the end of the output."""
    return output[output.index("[mapping]\n") :]


def test_discover_reads_the_last_hour_and_its_printed_block_works_pasted(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    result = run(["discover"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(f"observer discover: {TRACES} traces (")
    assert "reply-bot: 3 traces, 3 answers, 0 scored, 3 skipped (no_answer_text 3)" in out
    assert "suggest   answer_keys + 'reply': the generation 'llm' holds its answer" in out
    assert "tried     scored 0 -> 3" in out
    assert re.search(r"see       observer explain reply-bot-\d  \(a no_answer_text skip\)", out)
    assert f"scored 4 -> {ANSWERS} of {TRACES} traces" in out
    assert "rag-query" not in out  # the demo's traces are days old
    config = tmp_path / "observer.toml"
    config.write_text(pasted_block(out))
    assert len(scored_with(load_settings(config), sample(fake.clock()))) == ANSWERS
    again = run(["discover", "--config", str(config)])
    assert again.exit_code == 0, again.output
    assert f"{TRACES} traces" in again.stdout and f"{ANSWERS} scored" in again.stdout
    assert "no [mapping] suggestion" in again.stdout


def test_discover_json(fake: FakeLangfuse) -> None:
    result = run(["discover", "--json", "--since", "2h"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["traces"], out["scored"]) == (TRACES, 4)
    names = {n["name"]: n for n in out["names"]}
    assert names["body-kb"]["skips"] == {"malformed_sources": 3}
    assert names["body-kb"]["proposals"][0]["key"] == "text_keys"
    assert names["support-chat"]["found"]["sources"][0] == {
        "rule": "output: N documents",
        "traces": 4,
        "observations": {"search (RETRIEVER)": 4},
    }
    assert out["suggestion"]["scored_after"] == ANSWERS
    assert out["suggestion"]["toml"].startswith("[mapping]\n")


def test_discover_since_and_limit(fake: FakeLangfuse) -> None:
    limited = json.loads(run(["discover", "--json", "--limit", "3"]).stdout)
    assert limited["traces"] == 3 and "the newest 3" in limited["window"]
    wide = json.loads(run(["discover", "--json", "--since", "30d", "--limit", "1000"]).stdout)
    assert wide["traces"] == TRACES + len(by_trace(demo_observations()))
    assert run(["discover", "--since", "soon"]).exit_code == 2


def test_discover_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in sample(datetime.now(UTC))))
    result = run(["discover", "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert f"observer discover: {TRACES} traces ({path})" in result.stdout
    config = tmp_path / "observer.toml"
    config.write_text(pasted_block(result.stdout))
    assert len(scored_with(load_settings(config), sample(datetime.now(UTC)))) == ANSWERS


def test_discover_a_bad_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{nope")
    result = run(["discover", "--file", str(path)])
    assert result.exit_code == 2 and str(path) in result.stderr


def test_discover_against_an_unreachable_langfuse_exits_3(fake: FakeLangfuse) -> None:
    fake.stop()
    assert run(["discover"]).exit_code == 3


def test_check_prints_the_last_hours_summary_and_the_hint(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    result = run(["check", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(
        rf"traces read\s+│ {TRACES} traces in the last hour, {ANSWERS - 2} answers, 4 scored", out
    )
    assert re.search(
        r"skipped\s+│ 11 \(malformed_sources 3, no_answer_text 3, no_generation 3", out
    )
    assert "run `observer discover` to see why, and the [mapping] that reads them" in out
    assert "the last list of documents before the generation, of any type" in out


def test_check_without_skips_gives_no_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with FakeLangfuse() as server:
        now = server.clock()
        server.add_observations(rag_trace("ok-0", "support-chat", now - timedelta(minutes=9)))
        configure(monkeypatch, server)
        monkeypatch.setenv("COLUMNS", "400")
        result = run(["check", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert re.search(r"traces read\s+│ 1 trace in the last hour, 1 answer, 1 scored", result.stdout)
    assert "observer discover" not in result.stdout


# -- the content checks in discover (docs/trace-convention.md#checked-by-content) ----------


def test_a_configured_retriever_the_prompt_contradicts_gets_the_one_it_shows() -> None:
    now = datetime.now(UTC)
    observations = rag_trace("cfg-0", "cfg", now)
    other = [{"chunk_id": "x#1", "text": "Shipping takes two weeks by sea freight.", "score": 0.4}]
    observations.insert(
        1,
        {**observations[1], "id": "cfg-0-old", "name": "old-search", "output": json.dumps(other)},
    )
    settings = Settings(mapping={"retriever_names": ["old-search"]})  # type: ignore[arg-type]
    found = discovered(observations, settings)
    report = found.names[0]
    assert dict(report.skips) == {"sources_unverified": 1}
    assert [(p.key, p.value) for p in report.proposals] == [("retriever_names", "search")]
    assert found.suggestion is not None and found.suggestion.scored_after == 1


def test_checks_are_counted_per_name_and_in_checks_rows() -> None:
    found = discovered(sample(datetime.now(UTC)), Settings())
    chat = {r.name: r for r in found.names}["support-chat"]
    assert chat.checks == {"sources all": 4, "answer no_root_output": 4}
    rows = dict(check_rows(found, "the last hour"))
    assert rows["checked"].startswith("sources: all ")


def test_an_answer_key_holding_an_objects_repr_is_never_proposed() -> None:
    now = datetime.now(UTC)
    observations = rag_trace(
        "repr-0", "repr", now, output={"result": "<app.Response object at 0x7f00aa>"}
    )
    found = discovered(observations, Settings())
    assert dict(found.names[0].skips) == {"no_answer_text": 1}
    assert found.names[0].proposals == []


def test_a_score_under_a_key_no_rule_knows_is_proposed_from_a_tool_result_in_the_prompt() -> None:
    """docs/signals.md#unknown-is-not-zero: the documents reach the model as a tool's result,
    their scores under `relevance` are not read; discover proposes it."""
    now = datetime.now(UTC)
    observations = rag_trace("tool-0", "agent", now)
    documents = [
        {"chunk_id": d["chunk_id"], "text": d["text"], "relevance": d["score"]} for d in DOCUMENTS
    ]
    observations = [o for o in observations if o["name"] != "search"]
    llm = observations[-1]
    messages = json.loads(llm["input"])
    messages.append({"role": "tool", "tool_call_id": "c1", "content": json.dumps(documents)})
    llm["input"] = json.dumps(messages)
    found = discovered(observations, Settings())
    assert found.suggestion is not None
    assert found.suggestion.mapping == {
        "score_keys": ["rerank_score", "relevance_score", "score", "relevance"]
    }


def test_a_proposal_whose_records_the_checks_refute_is_never_shown() -> None:
    """A completion that echoes its prompt beside a short answer, both under keys no rule
    reads: the longest text is the echo, and proposing its key would make the prompt the
    answer. Tried first, refuted, not shown, and said why (docs/explain.md)."""
    now = datetime.now(UTC)
    echo = prompt(DOCUMENTS)[1]["content"]
    observations = rag_trace("echo-0", "llm-app", now, output={"echo": echo, "reply": "Yes [1]."})
    found = discovered(observations, Settings())
    report = found.names[0]
    assert report.proposals == []
    why = "its answer is the model's prompt, not its completion (1 of 1 traces)"
    assert report.refused == {"answer_keys + 'echo'": why}
    assert found.suggestion is None


def test_refuted_names_each_wrong_record() -> None:
    from observer.mapping import MappingRules, explain_trace
    from observer.mapping.proposals import refuted

    now = datetime.now(UTC)
    trace = rag_trace("r-0", "app", now, output={"model": "gpt-4o-mini", "reply": ANSWER})
    wrong_answer = explain_trace("r-0", trace, MappingRules(answer_keys=("model",)))
    assert refuted(trace, wrong_answer) == "its answer is not the text the model generated"
    right = explain_trace("r-0", trace, MappingRules(answer_keys=("reply",)))
    assert refuted(trace, right) is None
    # A tool call's arguments read as the only document.
    call = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "search", "arguments": "refunds open days"}}],
    }
    trace = rag_trace("r-1", "app", now, documents=[{"text": "refunds open days"}])
    trace.insert(
        1,
        {
            **trace[1],
            "id": "r-1-call",
            "type": "GENERATION",
            "name": "plan",
            "output": json.dumps(call),
        },
    )
    explained = explain_trace("r-1", trace, MappingRules(verify_sources=False))
    assert refuted(trace, explained) == "a source is a tool call's arguments"
