"""Daemon throughput: `python bench/pipeline.py` prints a table.

A fake Langfuse (its own process, real HTTP on loopback) serves N traces in
the default convention (the bundled demo traces, cloned with new ids and
times). Two timings side by side in the same run:

- bare I/O: what any pass must do at least: page every observation with the
  SDK API client and push the same number of scores in batches of 100;
- observer: `observer run --once` (a subprocess, fresh state) over the same
  traces: paging, mapping, signals, state, outbox, pushing, flushing.

Targets (issue 3): observer <= 2x bare I/O, >= 500 traces/s against an
instant fake, <= ceil(observations / 1000) + 5 observation requests per
pass, peak RSS < 200 MB.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.app import demo_traces_path  # noqa: E402
from observer.langfuse_api import NO_RETRIES, build_api  # noqa: E402
from observer.sources.langfuse import FIELDS  # noqa: E402
from observer.times import iso, parse_time  # noqa: E402


def make_traces(count: int, end: datetime) -> list[dict[str, Any]]:
    """`count` traces: the demo's scorable traces cloned with fresh ids, spread before `end`."""
    demo = [json.loads(line) for line in demo_traces_path().read_text().splitlines()]
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    templates = [
        obs
        for obs in by_trace.values()
        if any(o["type"] == "GENERATION" for o in obs)
        and all(o["environment"] != "langfuse-llm-as-a-judge" for o in obs)
    ]
    out: list[dict[str, Any]] = []
    spacing = timedelta(seconds=3000 / max(count, 1))
    for i in range(count):
        template = templates[i % len(templates)]
        root_start = min(parse_time(o["startTime"]) for o in template)  # type: ignore[type-var]
        new_root = end - spacing * (count - i)
        shift = new_root - root_start  # type: ignore[operator]
        trace_id = hashlib.sha256(f"bench-{i}".encode()).hexdigest()[:32]

        def new_id(old: str, trace_id: str = trace_id) -> str:
            return hashlib.sha256(f"{trace_id}/{old}".encode()).hexdigest()[:16]

        for observation in template:
            clone = copy.deepcopy(observation)
            clone["traceId"] = trace_id
            clone["id"] = new_id(observation["id"])
            if clone.get("parentObservationId"):
                clone["parentObservationId"] = new_id(observation["parentObservationId"])
            for key in ("startTime", "endTime", "createdAt", "updatedAt"):
                moment = parse_time(clone.get(key))
                if moment is not None:
                    clone[key] = iso(moment + shift)
            out.append(clone)
    return out


def _serve(conn: Connection, observations: list[dict[str, Any]]) -> None:
    from tests.fakes.langfuse_server import FakeLangfuse

    with FakeLangfuse() as fake:
        fake.add_observations(observations)
        conn.send((fake.url, fake.public_key, fake.secret_key))
        while True:
            command = conn.recv()
            if command == "stats":
                conn.send(
                    (
                        fake.observation_requests(),
                        len(fake.scores),
                        sum(len(p) for p in fake.score_posts),
                        len(fake.duplicates()),
                    )
                )
            elif command == "reset":
                fake.reset_requests()
                conn.send(True)
            else:
                return


def page_all(api: Any, start: datetime, end: datetime) -> int:
    """Every observation of the window paged with the SDK's API client, following the
    cursor to its end through cut and empty continuation pages; how many."""
    cursor = None
    seen = 0
    while True:
        page = api.observations.get_many(
            fields=FIELDS,
            limit=1000,
            cursor=cursor,
            from_start_time=start,
            to_start_time=end,
            request_options=NO_RETRIES,
        )
        seen += len(page.data)
        cursor = page.meta.cursor
        if not cursor:
            return seen


def bare_io(url: str, pk: str, sk: str, start: datetime, end: datetime, n_scores: int) -> float:
    from langfuse.api.scores.types.create_score_request import CreateScoreRequest

    api = build_api(url, pk, sk, 60)
    began = time.perf_counter()
    page_all(api, start, end)
    stamp = datetime.now(UTC)
    for offset in range(0, n_scores, 100):
        api.scores.create(
            request=[
                CreateScoreRequest(
                    id=f"bare-{offset + k}",
                    trace_id="bare",
                    name="bare",
                    value=0.5,
                    data_type="NUMERIC",
                    timestamp=stamp,
                )
                for k in range(min(100, n_scores - offset))
            ],
            request_options=NO_RETRIES,
        )
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=5000)
    args = parser.parse_args()

    now = datetime.now(UTC)
    end = now - timedelta(minutes=5)
    observations = make_traces(args.traces, end)
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child, observations), daemon=True)
    server.start()
    url, pk, sk = parent.recv()

    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
        env.update(
            LANGFUSE_PUBLIC_KEY=pk,
            LANGFUSE_SECRET_KEY=sk,
            LANGFUSE_BASE_URL=url,
            OBSERVER_SOURCE__LOOKBACK_S="7200",
            OBSERVER_LOG__LEVEL="warning",
            # The request budget on its defaults: adaptive from 25 a minute (the fake,
            # like a self-hosted Langfuse, sets no limit), score posts by body size.
        )
        began = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "observer",
                "run",
                "--once",
                "--state",
                str(Path(scratch) / "bench.sqlite"),
            ],
            env=env,
            capture_output=True,
            check=False,
        )
        observer_s = time.perf_counter() - began
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode()[-3000:])
        raise SystemExit(f"observer run --once failed with {proc.returncode}")
    peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    parent.send("stats")
    obs_requests, stored, pushed, duplicates = parent.recv()
    parent.send("reset")
    parent.recv()
    bare_s = bare_io(url, pk, sk, now - timedelta(hours=2), now, pushed)
    parent.send("stop")
    server.join(timeout=5)

    budget = math.ceil(len(observations) / 1000) + 5
    rate = args.traces / observer_s
    table = Table(
        title=f"observer run --once over {args.traces:,} traces "
        f"({len(observations):,} observations), fake Langfuse on loopback"
    )
    for column in ("measure", "value", "target", ""):
        table.add_column(column, justify="right")
    rows = [
        ("observer run --once", f"{observer_s:.2f} s", "", ""),
        ("bare I/O (page + push, SDK)", f"{bare_s:.2f} s", "", ""),
        (
            "observer / bare I/O",
            f"{observer_s / bare_s:.2f}x",
            "<= 2x",
            "ok" if observer_s <= 2 * bare_s else "MISSED",
        ),
        ("traces/s", f"{rate:,.0f}", ">= 500", "ok" if rate >= 500 else "MISSED"),
        (
            "observation requests",
            f"{obs_requests}",
            f"<= {budget}",
            "ok" if obs_requests <= budget else "MISSED",
        ),
        ("scores pushed", f"{pushed:,} ({stored:,} stored, {duplicates} duplicated)", "", ""),
        (
            "peak RSS (observer process)",
            f"{peak_rss_mb:.0f} MB",
            "< 200 MB",
            "ok" if peak_rss_mb < 200 else "MISSED",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
