"""The event path measured: the real Langfuse SDK exports answers to `observer run`'s OTLP
receiver, and the time from each trace's end to its scores in (the fake) Langfuse is taken.

    .venv/bin/python bench/otlp.py --rate 50 --seconds 60
    .venv/bin/python bench/otlp.py --rate 200 --seconds 600     # memory over 10 minutes

- observer: `observer run` as a subprocess with `[otlp]` on (defaults otherwise: settle_s
  2, the poller as backstop), scores to the fake Langfuse of tests/fakes in this process,
  self-hosted (no rate limit; `source.requests_per_minute` 6000, as bench/soak.py);
- the app: Langfuse SDK 5 (its OTLP exporter, `flush_interval` as given, 0.5 s by
  default) sending answers (a root SPAN, a RETRIEVER with two sources, a GENERATION citing
  them) at `--rate` traces a second from `--threads` threads, to observer's
  `/api/public/otel/v1/traces` as it would to Langfuse;
- trace end -> scores: from the moment the root span ended (this process's clock) to the
  moment the fake Langfuse stored the trace's last score (same clock);
- lost: traces without their scores 60 s after the feed ended;
- memory: observer's RSS every 5 s (/proc), its growth after the first minute;
- CPU: observer's user + system time (/proc) over the run, per trace scored, and the share
  of one core it took; the machine's load average, sampled every 5 s (min-max).
Prints one table; the README's Figures hold a run's.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.langfuse_server import FakeLangfuse  # noqa: E402
from tests.otlp.harness import ANSWER, CHUNKS, PROMPT, QUESTION  # noqa: E402


class TimedFake(FakeLangfuse):
    """The fake Langfuse, noting when each trace's latest score was stored."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def _store_score(self, score: dict[str, Any], received_at: datetime, **kw: Any) -> None:
        super()._store_score(score, received_at, **kw)
        trace = str(score.get("traceId"))
        self.stored[trace] = time.time()
        self.count[trace] = self.count.get(trace, 0) + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_observer(
    fake: FakeLangfuse,
    port: int,
    state: Path,
    settle_s: float,
    root_grace_s: float,
    log: Path,
    extra: dict[str, str] | None = None,
) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env.update(
        LANGFUSE_PUBLIC_KEY=fake.public_key,
        LANGFUSE_SECRET_KEY=fake.secret_key,
        LANGFUSE_BASE_URL=fake.url,
        OBSERVER_OTLP__LISTEN=f"127.0.0.1:{port}",
        OBSERVER_OTLP__SETTLE_S=str(settle_s),
        OBSERVER_OTLP__ROOT_GRACE_S=str(root_grace_s),
        OBSERVER_HTTP__ENABLED="false",
        OBSERVER_STATE__PATH=str(state),
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="6000",
        OBSERVER_LOG__LEVEL="warning",
        OBSERVER_LOG__FORMAT="json",
    )
    env.update(extra or {})
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "observer"), "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - lives with the process
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit("observer did not open its OTLP port")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory (/proc/<pid>/status), or one part of it: `RssAnon`
    (the heap), `RssFile` and `RssShmem` (mapped files: SQLite's WAL index)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far (/proc/<pid>/stat, fields 14-15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def feed(client: Any, rate: float, seconds: float, threads: int, ends: dict[str, float]) -> None:
    stop_at = time.monotonic() + seconds
    per_thread = rate / threads
    lock = threading.Lock()

    def one() -> None:
        with client.start_as_current_observation(
            as_type="span", name="rag-query", input={"question": QUESTION}
        ) as root:
            with client.start_as_current_observation(
                as_type="retriever", name="retrieve", input=QUESTION
            ) as retriever:
                retriever.update(output=CHUNKS)
            with client.start_as_current_observation(
                as_type="generation", name="generate", model="gpt-4o-mini", input=PROMPT
            ) as generation:
                generation.update(output=ANSWER)
            root.update(output=ANSWER)
            trace_id = root.trace_id
        with lock:
            ends[trace_id] = time.time()

    def loop() -> None:
        next_at = time.monotonic()
        while next_at < stop_at:
            one()
            next_at += 1 / per_thread
            time.sleep(max(0.0, next_at - time.monotonic()))

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def anon_minutes(samples: list[tuple[float, float]]) -> list[float]:
    """The sample nearest each whole minute."""
    if not samples:
        return []
    return [
        min(samples, key=lambda sample: abs(sample[0] - 60 * k))[1]
        for k in range(1, int(samples[-1][0] // 60) + 1)
    ]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--settle-s", type=float, default=2.0)
    parser.add_argument("--root-grace-s", type=float, default=0.3)
    parser.add_argument("--log", metavar="FILE", help="observer's log (warnings) here")
    parser.add_argument(
        "--set",
        metavar="VARIABLE=VALUE",
        action="append",
        default=[],
        help="a setting of observer's, e.g. OBSERVER_ALERTS__DEFAULTS=false (repeatable)",
    )
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="sample observer with py-spy (in the venv) while fed; its collapsed stacks here",
    )
    parser.add_argument("--flush-interval", type=float, default=0.5)
    args = parser.parse_args()

    from langfuse import Langfuse
    from opentelemetry.sdk.trace import TracerProvider

    with TimedFake() as fake, tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        state = Path(tmp) / "state.sqlite"
        log = Path(args.log) if args.log else state.with_suffix(".log")
        extra = dict(item.split("=", 1) for item in args.set)
        proc = start_observer(fake, port, state, args.settle_s, args.root_grace_s, log, extra)
        client = Langfuse(
            public_key=fake.public_key,
            secret_key=fake.secret_key,
            base_url=f"http://127.0.0.1:{port}",
            tracer_provider=TracerProvider(),
            flush_interval=args.flush_interval,
            environment="production",
        )
        rss: list[tuple[float, float]] = []
        anon: list[tuple[float, float]] = []
        loads: list[float] = []
        sampling = threading.Event()

        def sample() -> None:
            began = time.monotonic()
            while not sampling.wait(5):
                at = time.monotonic() - began
                rss.append((at, rss_mb(proc.pid)))
                anon.append((at, rss_mb(proc.pid, "RssAnon")))
                loads.append(os.getloadavg()[0])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        load = os.getloadavg()
        ends: dict[str, float] = {}
        cpu_began, mine_began, fed_at = cpu_s(proc.pid), time.process_time(), time.monotonic()
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(proc.pid),
                 "--format", "raw", "--output", args.py_spy, "--rate", "50", "--nonblocking",
                 "--duration", str(int(args.seconds))],
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
        feed(client, args.rate, args.seconds, args.threads, ends)
        if spy is not None:
            spy.wait()
        client.flush()
        deadline = time.time() + 60
        while time.time() < deadline and any(t not in fake.stored for t in ends):
            time.sleep(0.5)
        time.sleep(2)  # a late re-score would show here
        cpu = cpu_s(proc.pid) - cpu_began
        mine, wall = time.process_time() - mine_began, time.monotonic() - fed_at
        sampling.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        lags = [fake.stored[t] - end for t, end in ends.items() if t in fake.stored]
        lost = sum(1 for t in ends if t not in fake.stored)
        warm = [m for at, m in rss if at >= 60] or [m for _, m in rss]
        print(f"rate {args.rate:g}/s for {args.seconds:g} s, settle_s {args.settle_s:g}, "
              f"SDK flush_interval {args.flush_interval:g} s, load {load[0]:.2f}")  # fmt: skip
        print(f"traces sent {len(ends)} ({len(ends) / args.seconds:.1f}/s), scored "
              f"{len(lags)}, lost {lost}")  # fmt: skip
        if lags:
            print(f"trace end -> scores stored: p50 {statistics.median(lags):.2f} s, "
                  f"p95 {quantile(lags, 0.95):.2f} s, p99 {quantile(lags, 0.99):.2f} s, "
                  f"max {max(lags):.2f} s")  # fmt: skip
        counts = list(fake.count.values()) or [0]
        print(f"scores stored {sum(counts)} (per trace {min(counts)}-{max(counts)})")
        if lags:
            print(f"observer CPU {cpu:.1f} s: {1000 * cpu / len(lags):.2f} ms per trace scored, "
                  f"{100 * cpu / wall:.0f} % of one core; this bench (the SDK app and the "
                  f"fake Langfuse) {100 * mine / wall:.0f} %")  # fmt: skip
        if loads:
            print(f"load average during the run: {min(loads):.1f}-{max(loads):.1f}")
        if warm:
            peak = max(m for _, m in rss)
            print(f"observer RSS: after 1 min {warm[0]:.0f} MB, end {warm[-1]:.0f} MB, "
                  f"peak {peak:.0f} MB, load at end {os.getloadavg()[0]:.2f}")  # fmt: skip
            minutes = [  # the sample nearest each minute
                min(rss, key=lambda sample: abs(sample[0] - 60 * k))[1]
                for k in range(1, int(rss[-1][0] // 60) + 1)
            ]
            print("observer RSS a minute apart: " + ", ".join(f"{m:.0f}" for m in minutes))
            print(
                "  of it the heap (RssAnon): " + ", ".join(f"{m:.0f}" for m in anon_minutes(anon))
            )


if __name__ == "__main__":
    main()
