"""Judge cost and throughput: `python bench/judge.py` prints two tables.

1. Calls and tokens per judged trace over the bundled examples: observer's
   judge measured against the OpenAI-compatible stub (tokens counted the
   stub's way, characters / 4), side by side with the call patterns of RAGAS
   faithfulness (2 calls: statements, then verdicts), DeepEval faithfulness
   (4: truths from the context, claims, verdicts, reason) and TruLens
   groundedness (1 + one per sentence), whose prompt tokens are estimated
   from what each call must carry (context, answer, statements) plus the
   same instruction overhead as observer's prompts, by the same rule.
2. The funnel's savings: the examples judged with and without the citation
   resolver's findings, against a chunk store made of the chunks the examples
   cite, of which a share was deleted or re-written after the answers (chosen
   by a hash of the chunk id; half deleted, half re-written). Claims citing
   only such chunks are decided without the LLM and those chunks stay out of
   the verdicts call; the table shows the calls and tokens that saves.
3. Judged traces per second through the daemon's worker pool (JudgeService)
   with the stub answering every call in 300 ms, at concurrency 4 and 16.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.background import Deadline  # noqa: E402
from observer.judge.client import JudgeClient  # noqa: E402
from observer.judge.protocol import CLAIMS_SYSTEM, VERDICTS_SYSTEM, context_of  # noqa: E402
from observer.judge.sampler import SamplerParams, hash_fraction  # noqa: E402
from observer.judge.service import JudgeService  # noqa: E402
from observer.model import RagRecord, Signals, answer_basis  # noqa: E402
from observer.records import parse_record  # noqa: E402
from observer.resolver import (  # noqa: E402
    ResolverFindings,
    StoredChunk,
    cited_chunks,
    findings,
)
from observer.signals import SignalParams, compute  # noqa: E402
from observer.state import State  # noqa: E402
from observer.telemetry.logging import configure_logging  # noqa: E402
from observer.telemetry.metrics import Metrics  # noqa: E402
from tests.fakes.openai_stub import OpenAIStub  # noqa: E402


def tokens(text: str) -> int:
    return max(1, len(text) // 4)


def load() -> list[tuple[RagRecord, Signals]]:
    params = SignalParams()
    with (ROOT / "examples" / "records.jsonl").open("rb") as handle:
        records = [parse_record(line) for line in handle if line.strip()]
    return [(r, compute(r, params)) for r in records]


def peers(record: RagRecord, signals: Signals) -> dict[str, tuple[int, int]]:
    """(calls, estimated prompt tokens) of each peer's faithfulness pattern."""
    context = tokens(context_of(record))
    answer = tokens(record.answer)
    question = tokens(record.question)
    overhead = (tokens(CLAIMS_SYSTEM) + tokens(VERDICTS_SYSTEM)) // 2
    statements = answer  # extracted statements restate the answer
    sentences = max(1, sum(1 for s in signals.citations.sentences if s.substantive))
    return {
        "RAGAS": (2, (overhead + question + answer) + (overhead + context + statements)),
        "DeepEval": (
            4,
            (overhead + context)
            + (overhead + answer)
            + (overhead + context + statements)
            + (overhead + statements),
        ),
        "TruLens": (
            1 + sentences,
            (overhead + answer) + sentences * (overhead + context + answer // sentences),
        ),
    }


def cost_table(pairs: list[tuple[RagRecord, Signals]]) -> Table:
    with OpenAIStub() as stub:
        api = openai.OpenAI(base_url=stub.url + "/v1", api_key="sk-bench", max_retries=0)
        client = JudgeClient(api, "stub")
        results = [client.judge(r, s) for r, s in pairs]
    judged = [res for res in results if res.error is None]
    ours_calls = statistics.mean(r.calls for r in judged)
    ours_prompt = statistics.mean(r.prompt_tokens for r in judged)
    ours_total = statistics.mean(r.tokens for r in judged)
    peer_rows: dict[str, list[tuple[int, int]]] = {}
    for record, signals in pairs:
        for name, row in peers(record, signals).items():
            peer_rows.setdefault(name, []).append(row)
    table = Table(title=f"LLM calls and tokens per judged trace ({len(judged)} example records)")
    for column in (
        "judge",
        "calls / trace",
        "max calls",
        "prompt tokens / trace",
        "total tokens / trace",
        "how counted",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        "observer",
        f"{ours_calls:.2f}",
        str(max(r.calls for r in judged)),
        f"{ours_prompt:,.0f}",
        f"{ours_total:,.0f}",
        "measured (stub)",
    )
    for name, rows in peer_rows.items():
        table.add_row(
            name,
            f"{statistics.mean(c for c, _ in rows):.2f}",
            str(max(c for c, _ in rows)),
            f"{statistics.mean(t for _, t in rows):,.0f}",
            "",
            "estimated",
        )
    return table


def reindexed_store(pairs: list[tuple[RagRecord, Signals]], share: float) -> dict[str, StoredChunk]:
    """Every chunk the examples carry, as the answers saw it, then `share` of them
    deleted (the first half of the share) or re-written (the second half)."""
    store: dict[str, StoredChunk] = {}
    for record, _ in pairs:
        for source in record.sources:
            if not source.chunk_id:
                continue
            draw = hash_fraction(source.chunk_id)
            if draw < share / 2:
                continue  # deleted
            text = source.text + " (re-written)" if draw < share else source.text
            store[source.chunk_id] = StoredChunk(text=text)
    return store


def funnel_table(pairs: list[tuple[RagRecord, Signals]], shares: list[float]) -> Table:
    with OpenAIStub() as stub:
        api = openai.OpenAI(base_url=stub.url + "/v1", api_key="sk-bench", max_retries=0)
        client = JudgeClient(api, "stub")
        plain = [client.judge(r, s) for r, s in pairs]
        table = Table(
            title=f"The funnel: judging the {len(pairs)} examples with the resolver's findings, "
            "chunks deleted or re-written after the answers"
        )
        for column in (
            "chunks changed",
            "traces flagged",
            "claims decided w/o LLM",
            "calls / trace",
            "prompt tokens / trace",
            "tokens / trace",
            "saved, all traces",
            "saved, flagged traces",
        ):
            table.add_column(column, justify="right")
        for share in shares:
            store = reindexed_store(pairs, share)
            found: list[ResolverFindings] = [findings(cited_chunks(r, s), store) for r, s in pairs]
            results = [client.judge(r, s, f) for (r, s), f in zip(pairs, found, strict=True)]
            ok = [
                (p, f, res)
                for p, f, res in zip(plain, found, results, strict=True)
                if p.error is None and res.error is None
            ]
            before = sum(p.tokens for p, _, _ in ok)
            after = sum(res.tokens for _, _, res in ok)
            flagged_before = sum(p.tokens for p, f, _ in ok if f.flagged)
            flagged_after = sum(res.tokens for _, f, res in ok if f.flagged)
            decided = sum(len(res.decided) for *_, res in ok)
            table.add_row(
                f"{share:.0%}",
                f"{sum(f.flagged for f in found)}/{len(pairs)}",
                f"{decided}/{sum(len(res.claims) for *_, res in ok)}",
                f"{statistics.mean(res.calls for *_, res in ok):.2f}",
                f"{statistics.mean(res.prompt_tokens for *_, res in ok):,.0f}",
                f"{after / len(ok):,.0f}",
                f"{1 - after / before:.1%}" if before else "-",
                f"{1 - flagged_after / flagged_before:.1%}" if flagged_before else "-",
            )
    return table


def throughput(
    pairs: list[tuple[RagRecord, Signals]], concurrency: int, count: int
) -> tuple[float, int]:
    with OpenAIStub() as stub, tempfile.TemporaryDirectory() as scratch:
        stub.latency_s = 0.3
        api = openai.OpenAI(base_url=stub.url + "/v1", api_key="sk-bench", max_retries=0)
        state = State(Path(scratch) / "bench.sqlite")
        service = JudgeService(
            JudgeClient(api, "stub"),
            state,
            Metrics(),
            SamplerParams(enabled=True, rate=1.0, max_judged_per_hour=10**9),
            concurrency=concurrency,
            queue_size=count,
        )
        service.start()
        began = time.perf_counter()
        for i in range(count):
            record, signals = pairs[i % len(pairs)]
            record = dataclasses.replace(record, trace_id=f"{record.trace_id}-{i}")
            # As a pass does it: the sample decided, written, then queued for the pool.
            taken = service.reservation(record, signals, None, answer_basis(record))
            if taken is not None:
                state.judge.write(taken.write)
                service.queued(taken)
        service.drain(Deadline.within(600))
        elapsed = time.perf_counter() - began
        service.shutdown(Deadline.within(5))
        state.close()
        return count / elapsed, stub.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=96, help="traces per throughput run")
    args = parser.parse_args()
    configure_logging("console", "error")
    pairs = load()
    console = Console(width=120)
    console.print(cost_table(pairs))
    console.print(funnel_table(pairs, [0.0, 0.1, 0.25, 0.5]))
    table = Table(title="judged traces/s through the worker pool, stub answering in 300 ms")
    for column in ("concurrency", "traces", "LLM calls", "traces/s", "ideal (2 calls x 300 ms)"):
        table.add_column(column, justify="right")
    for concurrency in (4, 16):
        rate, calls = throughput(pairs, concurrency, args.traces)
        table.add_row(
            str(concurrency),
            str(args.traces),
            str(calls),
            f"{rate:.1f}",
            f"{concurrency / 0.6:.1f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
