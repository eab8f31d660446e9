"""The soak's lag with second turns, reduced: `python bench/watermark_hold.py`
(half a minute, simulated clock).

bench/soak.py's stream has a share of traces that get a second top-level subtree
(another turn under the same trace id) minutes after the first. While that new
subtree settles the pass counts the trace as unsettled and holds the watermark.
It used to hold it at the trace's *earliest* root, the one the state file
remembers from the first turn, far below the watermark, which never moves back:
the watermark stopped until the second turn had settled, and with a second turn
in some trace more often than once a settle time it stayed stopped, every pass
reading everything since (lag 32 -> 146 s and 239 -> 1,174 observations a pass
with the defaults below). Now a trace the state file knows waits at the last
root the pass read, the settling turn's (`Pipeline._handle`), and the table
shows a flat lag of about settle time plus a poll. Nothing is lost or doubled
either way: the remembered root is what makes the next pass read the trace whole
by its id.

The run: `--traces` traces, one every `--every-s` seconds, each scored at once;
each gets a second turn `--after-s` after its first; SDK 5 traffic beside them
(`--rate` single-turn traces a second); the daemon polls every 3 s. The table
shows a pass every 15 s of simulated time: the watermark's lag and how many
observations the pass read. With `--traces 1` it is one trace's freeze.

The daemon is wired as `observer run` wires it (`app.build` and its poll tick)
against the fake Langfuse with every service habit off but roots computed
(`FakeLangfuse.kind(compute_roots=True)`: pages whole, data landing at once), on
a simulated clock that is Langfuse's (the daemon reads it from the `Date` header).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from soak import Mix, Plan, Second, Stream, load_templates, trace_id_of  # noqa: E402

from observer import app  # noqa: E402
from observer.background import Deadline  # noqa: E402
from observer.config import load_settings  # noqa: E402
from observer.telemetry.logging import configure_logging  # noqa: E402
from tests.fakes.clock import SimulatedClock  # noqa: E402
from tests.fakes.langfuse_server import FakeLangfuse  # noqa: E402

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
POLL_S = 3.0
SDK = "5.0.4"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--traces", type=int, default=12, help="traces with a second turn")
    parser.add_argument("--every-s", type=float, default=10.0, help="between two such traces")
    parser.add_argument("--after-s", type=float, default=120.0, help="second turn, later")
    parser.add_argument("--rate", type=float, default=2.0, help="single-turn traces a second")
    args = parser.parse_args(argv)
    configure_logging("console", "error")
    clock = SimulatedClock(T0)
    fake = FakeLangfuse.kind(compute_roots=True)
    fake.clock = clock
    fake.start()
    workdir = Path(tempfile.mkdtemp(prefix="observer-hold-"))
    for key in [k for k in os.environ if k.startswith(("OBSERVER_", "LANGFUSE_"))]:
        del os.environ[key]
    os.environ.update(
        LANGFUSE_PUBLIC_KEY=fake.public_key,
        LANGFUSE_SECRET_KEY=fake.secret_key,
        LANGFUSE_BASE_URL=fake.url,
        OBSERVER_SOURCE__POLL_INTERVAL_S=str(POLL_S),
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="1000000",
        OBSERVER_HTTP__ENABLED="false",
        OBSERVER_LOG__LEVEL="error",
        NO_PROXY="127.0.0.1,localhost",
    )
    parts = app.build(load_settings(), state_path=workdir / "state.sqlite")
    templates = tuple(load_templates())
    last_turn_s = args.after_s + (args.traces - 1) * args.every_s
    total_s = last_turn_s + 60.0
    # Trace k (k < traces) ends at T0 + k * every_s; its second turn after_s later.
    turns = Stream(templates, T0.timestamp(), 1 / args.every_s, total_s, 20.0, mix=Mix())
    plans = [
        Plan(k, 3 + k % 7, SDK, 0.0, None, Second(args.after_s, 5 + k % 5, False, None))
        for k in range(args.traces)
    ]
    # Beside them: single-turn traces (ids after theirs), landing at once.
    traffic = Stream(templates, T0.timestamp() + 0.5 - args.traces / args.rate, args.rate, 0, 0)
    first_traffic = args.traces
    sent_first = sent_second = 0
    added = first_traffic
    table = Table(
        title=f"{args.traces} trace(s) one every {args.every_s:g} s, each with a second turn "
        f"{args.after_s:g} s after its first; polls every {POLL_S:g} s"
    )
    for column in ("t (s)", "second turns sent", "watermark lag (s)", "observations read"):
        table.add_column(column, justify="right")
    try:
        while (elapsed := (clock() - T0).total_seconds()) <= total_s:
            while sent_first < len(plans) and turns.due(sent_first) <= clock().timestamp():
                fake.add_observations(turns.trace(plans[sent_first])[0])
                sent_first += 1
            while sent_second < sent_first and (
                turns.due(sent_second) + args.after_s <= clock().timestamp()
            ):
                fake.add_observations(turns.second(plans[sent_second])[0])
                sent_second += 1
            due = first_traffic + int(elapsed * args.rate)
            for index in range(added, due):
                plan = Plan(index, (index + 11) % len(templates), SDK, 0.0, None, None)
                fake.add_observations(traffic.trace(plan)[0])
            added = max(added, due)
            result = parts.pipeline.poll(parts.clock())
            parts.dispatcher.flush(10)
            watermark = parts.state.watermark()
            lag = None if watermark is None else (clock() - watermark).total_seconds()
            if round(elapsed) % 15 == 0:
                table.add_row(
                    f"{elapsed:.0f}",
                    f"{sent_second}",
                    "n/a" if lag is None else f"{lag:.0f}",
                    f"{result.observations:,}" + (" (a sweep)" if result.sweep else ""),
                )
            clock.advance(POLL_S)
        live = fake.scores_by_trace()
    finally:
        parts.dispatcher.shutdown(Deadline.within(5))
        parts.state.close()
        fake.stop()
    console = Console(width=110)
    console.print(table)
    doubled = sum(
        1 for k in range(args.traces) for s in live.get(trace_id_of(k), {}).values() if len(s) > 1
    )
    scored = sum(1 for k in range(args.traces) if live.get(trace_id_of(k)))
    console.print(
        f"two-turn traces with scores: {scored} of {args.traces}; names stored twice: {doubled}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
