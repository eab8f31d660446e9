"""Mapping golden check: `python bench/mapping_golden.py --write FILE`, then `--check FILE`.

Guards a change that must not change behaviour (a speed-up of the mapping): every bundled
demo trace and every captured trace of tests/instrumentations, as captured, shuffled, under
each metamorphic transform of tests/mapping/metamorphic.py (and pairs of them), under the
rule sets the tests use, and seeded random mutations of them (fields deleted or replaced by
strange JSON), each read by `explain_trace` (record or skip, provenance, trail) and by
`read_trace` and `map_trace`, twice (a cache must not change a second reading). `--write`
stores one line per case; `--check` compares and prints the first cases that differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.mapping import MappingRules, explain_trace, map_trace, read_trace  # noqa: E402
from tests.mapping.metamorphic import TRANSFORMS  # noqa: E402

DEMO = ROOT / "observer" / "data" / "demo_traces.jsonl"
CAPTURES = ROOT / "tests" / "instrumentations" / "fixtures"

Trace = list[dict[str, Any]]

# The rule sets the tests use (tests/mapping, tests/instrumentations).
RULE_SETS: dict[str, MappingRules] = {
    "default": MappingRules(),
    "lenient": MappingRules(verify_sources=False),
    "retrieve_rerank": MappingRules(retriever_names=("retrieve", "rerank")),
    "retrieve": MappingRules(retriever_names=("retrieve",)),
    "named": MappingRules(generation_names=("final-answer",), retriever_names=("search",)),
    "answer_model": MappingRules(answer_keys=("model",)),
    "answer_reply": MappingRules(answer_keys=("reply",)),
    "small": MappingRules(max_answer_chars=50, max_sources=3, max_observations=10),
    "staging": MappingRules(environments=("staging",)),
    "tags": MappingRules(tags=("rag",), trace_names=("rag-query",)),
}


def _grouped(observations: Iterator[dict[str, Any]]) -> list[tuple[str, Trace]]:
    traces: dict[str, Trace] = defaultdict(list)
    for observation in observations:
        traces[observation["traceId"]].append(observation)
    return list(traces.items())


def corpus() -> list[tuple[str, Trace]]:
    demo = _grouped(json.loads(line) for line in DEMO.read_text().splitlines())
    captured: list[tuple[str, Trace]] = []
    for path in sorted(CAPTURES.glob("*.observations.json")):
        captured += [
            (f"{path.name.split('.')[0]}:{t}", o) for t, o in _grouped(json.loads(path.read_text()))
        ]
    return [(f"demo:{t}", o) for t, o in demo] + captured


_STRANGE: list[Any] = [
    None,
    "",
    "null",
    "[]",
    "{}",
    7,
    "not json {",
    '"a string"',
    '[{"text": "x"}]',
    '{"documents": [{"content": "y", "score": "0.4"}]}',
    [{"role": "tool", "content": "[1] a passage"}],
    {"nested": {"deeper": [1, 2]}},
    "[1] one\n[2] two",
    '[{"text": "a lone \\ud800 half", "score": 0.5}]',
    '"an answer with a lone \\udc00 half [1]"',
    "caf\u00e9 \u2014 na\u00efve",
    "2026-11-20T08:30:00.000Z",
    "GENERATION",
    "RETRIEVER",
    "TOOL",
]
_FIELDS = (
    "input",
    "output",
    "metadata",
    "startTime",
    "endTime",
    "type",
    "id",
    "parentObservationId",
    "name",
    "isRootObservation",
)


def mutants(trace: Trace, seed: str, count: int) -> Iterator[tuple[str, Trace]]:
    """Seeded random mutations: one to three fields of the trace deleted or replaced."""
    rng = random.Random(seed)
    for n in range(count):
        out = [dict(o) for o in trace]
        for _ in range(rng.randint(1, 3)):
            observation = rng.choice(out)
            field = rng.choice(_FIELDS)
            if rng.random() < 0.3:
                observation.pop(field, None)
            else:
                observation[field] = rng.choice(_STRANGE)
        yield f"mutant{n}", out


def variants(trace: Trace, key: str) -> Iterator[tuple[str, Trace]]:
    yield "as_is", trace
    shuffled = list(trace)
    random.Random(key).shuffle(shuffled)
    yield "shuffled", shuffled
    yield "reversed", list(reversed(trace))
    names = sorted(TRANSFORMS)
    for name in names:
        yield name, _safe(TRANSFORMS[name], trace)
    rng = random.Random(f"pairs:{key}")
    for _ in range(6):
        first, second = rng.sample(names, 2)
        yield f"{first}+{second}", _safe(TRANSFORMS[second], _safe(TRANSFORMS[first], trace))
    yield from mutants(trace, key, 12)


def _safe(transform: Callable[[Trace], Trace], trace: Trace) -> Trace:
    try:
        return transform(trace)
    except Exception:  # a transform that does not apply to this trace (a demo's shape)
        return trace


def _reading(trace_id: str, trace: Trace, rules: MappingRules) -> str:
    explained = explain_trace(trace_id, trace, rules)
    read = read_trace(trace_id, trace, rules)
    mapped = map_trace(trace_id, trace, rules)
    return repr((explained, read, mapped))


def readings() -> Iterator[tuple[str, str]]:
    for key, trace in corpus():
        trace_id = trace[0].get("traceId") or "t"
        for name, variant in variants(trace, key):
            sets = RULE_SETS if name in ("as_is", "shuffled") else {"default": RULE_SETS["default"]}
            for rules_name, rules in sets.items():
                first = _reading(trace_id, variant, rules)
                second = _reading(trace_id, variant, rules)
                if first != second:
                    first += f" SECOND READING DIFFERS: {second}"
                yield f"{key} {name} {rules_name}", first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--check", type=Path)
    args = parser.parse_args()
    lines = [f"{case}\t{reading}" for case, reading in readings()]
    digest = hashlib.sha256("\n".join(lines).encode("utf-8", "backslashreplace")).hexdigest()
    if args.write:
        args.write.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="backslashreplace")
        print(f"{len(lines)} cases written, sha256 {digest}")
        return
    stored = args.check.read_text(encoding="utf-8").splitlines()
    now = "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8").splitlines()
    differ = [(a, b) for a, b in zip(stored, now, strict=False) if a != b]
    if len(stored) != len(now):
        print(f"{len(stored)} cases stored, {len(now)} now")
    for was, got in differ[:5]:
        print(f"- {was[:600]}\n+ {got[:600]}\n")
    print(f"{len(now)} cases, {len(differ)} differ, sha256 {digest}")
    sys.exit(1 if differ or len(stored) != len(now) else 0)


if __name__ == "__main__":
    main()
