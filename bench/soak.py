"""Soak: `python bench/soak.py` runs the daemon under faults against Langfuse as it is.

The daemon as deployed, against a live stream, for a bounded time (6 minutes of
feed and at most 3 of catch-up by default; `--quick` for about 2 in all):

- a fake Langfuse in its own process (real HTTP on 127.0.0.1, so its CPU does not
  count as the daemon's): `tests.fakes.langfuse_server.FakeLangfuse.service_like`,
  the service's habits on (docs/daemon.md): continuation pages (15 % of pages empty and
  35 % cut short while the cursor goes on), ingestion delay (every observation
  lands after its own seeded draw of up to 10 s), `isRootObservation` computed the
  server's way (app roots marked with `add_observations(..., app_roots=)`), the
  1 MiB body limit, and the `Date` header from the fake's clock (the real one: the
  daemon's now is Langfuse's). The fake is indexed (by the listing's keyset, and
  by trace for the daemon's reads of one trace) so that a page costs what the
  page holds: the same order, bounds, cursors, versions and landing times as the
  fake's full scan, and the fake's own page cuts;
- a stream fed through a pipe at a steady rate: the bundled demo traces cloned
  under new ids, each ending as it is sent, written by SDK 5 (its scope in the
  metadata, flattened as the API returns it), with a seeded mix on top
  (`Mix`): traces from an older SDK (`scope.name` "langfuse-sdk", `scope.version`
  "4.2.0") that land minutes late (the first ones within the regular overlap, as
  the daemon's contract needs; later ones up to 4 minutes, never past what the
  run's length lets land); traces from app clocks 2 hours ahead and 2 minutes
  behind; traces that get a second top-level subtree (another turn) under the
  same trace id 10 s to 5.5 min later, a quarter of them as an app root under a
  remote parent;
- `observer run` as a subprocess (`bench/soak_daemon.py`: `observer`'s command
  with a stopwatch on the alert evaluator's ticks, which nothing else times),
  polling every few seconds, with defaults otherwise (overlap, settle, sweeps,
  outbox, grace, the default alert rules);
- faults on a schedule: SIGTERM + restart twice (once while score posts fail, so
  the outbox crosses the restart) and one SIGKILL + restart, all in the first
  30 % so the last process runs long enough to show memory growth; then 5xx
  bursts on reads (within the retries, and beyond them), 5xx on score posts, 429
  storms with Retry-After, and a Langfuse outage (the port closed);
- every 2 s: the daemon's RSS (psutil, else /proc/<pid>/status),
  `observer_watermark_lag_seconds` from its /metrics (left out while it reads 0:
  a process knows no watermark before its first complete pass), and, as a
  cross-check, the lag by the watermark in the state file (a read-only read).

The daemon runs from a copy of the `observer` package taken at the start, and the
fake's check below imports the same copy, so edits made to the checkout during
the soak reach neither; the report names the commit and any uncommitted files in
that copy. `--set OBSERVER_X=V` changes a daemon setting (the check sees it too),
`--mix NAME=V` a share or bound of the mix (`--mix second_root=0`: no second turns).

At the end the feed stops, everything lands, and the daemon gets time to catch up
(until every trace holds its right score set, or a timeout); then SIGTERM. The
check, in the fake's process: each trace's final content, listed as the daemon
reads it (its field groups, its expanded metadata keys, parsed as the SDK's
`ObservationV2`), mapped by `observer.mapping.convention.map_trace` with
`Settings().mapping_rules()` and scored by `observer.signals.compute` and
`observer.scores.score_events`, against the trace's live scores in the fake
(`scores_by_trace()`: Langfuse's (id, name, day) key): lost = a score of the set
missing, duplicated = a name stored twice, stale = a value, comment, id or
observationId that differs from the final content's, or a score that no longer
applies. Exit 1 when any is found; the first cases are printed with each trace's
story. Logs, state file and samples stay in the printed directory.

Everything is bounded by timeouts, and everything talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import hashlib
import heapq
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a spawned fake keeps its parent's path: the snapshot first
    sys.path.insert(0, str(ROOT))

from observer.app import demo_traces_path  # noqa: E402
from observer.times import iso, parse_time  # noqa: E402
from tests.fakes.langfuse_server import (  # noqa: E402
    FIELD_GROUPS,
    OBSERVATIONS_PATH,
    SCORES_PATH,
    SERVICE_LIKE,
    Behaviour,
    FakeLangfuse,
    _Cursor,
    _parse_time,
    _SortKey,
    _StoredObservation,
    _to_us,
    _truncate_metadata,
)

HOST = "127.0.0.1"
SAMPLE_EVERY_S = 2.0
FEED_TICK_S = 0.25
WARMUP_S = 120.0
RSS_SPAN_S = 30.0
CHECK_EVERY_S = 10.0
SEED = 15
TIME_KEYS = ("startTime", "endTime", "createdAt", "updatedAt", "completionStartTime")
NEW_SDK = "5.0.4"  # writes directly: lands within seconds
OLD_SDK = "4.2.0"  # langfuse-python < 4.7.0: the queued path, up to 15 minutes late
JsonDict = dict[str, Any]


# -- the stream: demo traces under new ids, with a mix of Langfuse's realities ------------


@dataclass(frozen=True)
class Template:
    """One demo trace: its observations and each time field as an offset from its end."""

    observations: tuple[JsonDict, ...]
    offsets: tuple[dict[str, timedelta], ...]


def load_templates() -> list[Template]:
    observations = [json.loads(line) for line in demo_traces_path().read_text().splitlines()]
    by_trace: dict[str, list[JsonDict]] = {}
    for observation in observations:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    templates = []
    for trace in by_trace.values():
        moments = [parse_time(o.get(k)) for o in trace for k in TIME_KEYS]
        latest = max(m for m in moments if m is not None)
        offsets = tuple(
            {
                key: moment - latest
                for key in TIME_KEYS
                if (moment := parse_time(o.get(key))) is not None
            }
            for o in trace
        )
        templates.append(Template(tuple(trace), offsets))
    return templates


@dataclass(frozen=True)
class Mix:
    """Shares of the stream, and how late and how far off (seconds)."""

    old_sdk: float = 0.05  # from langfuse-python 4.2.0: minutes late
    ahead: float = 0.02  # app clock 2 h ahead
    behind: float = 0.02  # app clock 2 min behind
    second_root: float = 0.05  # a second top-level subtree, later
    remote_share: float = 0.25  # of those: an app root under a remote parent
    ahead_s: float = 7200.0
    behind_s: float = 120.0
    jitter_s: float = 10.0  # SDK 5: every observation lands within this (the fake's draw)
    old_first_bound_s: float = 120.0  # before the daemon can know of the older SDK
    old_max_s: float = 240.0
    land_by_s: float = 45.0  # nothing lands later than this after the feed ends


@dataclass(frozen=True)
class Second:
    """A second subtree: another demo trace, `after_s` after the first one ended."""

    after_s: float
    template: int
    remote: bool  # an app root under a parent Langfuse never sees
    delay_s: float | None


@dataclass(frozen=True)
class Plan:
    index: int
    template: int
    sdk: str
    offset_s: float  # the app's clock: + ahead, - behind
    delay_s: float | None  # base ingestion delay (older SDK); None: SDK 5's few seconds
    second: Second | None

    def story(self) -> str:
        parts = [f"template {self.template}", f"SDK {self.sdk}"]
        if self.offset_s:
            parts.append(f"app clock {self.offset_s:+.0f} s")
        if self.delay_s is not None:
            parts.append(f"lands {self.delay_s:.0f} s late")
        if self.second is not None:
            s = self.second
            parts.append(
                f"{'app root under a remote parent' if s.remote else 'second root'} "
                f"(template {s.template}) {s.after_s:.0f} s later"
                + (f", landing {s.delay_s:.0f} s late" if s.delay_s is not None else "")
            )
        return ", ".join(parts)


def trace_id_of(index: int) -> str:
    return hashlib.sha256(f"soak-{index}".encode()).hexdigest()[:32]


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Stream:
    """Trace `index` ends (on a right clock) at `start_unix + index / rate`, as it is sent."""

    templates: tuple[Template, ...]
    start_unix: float
    rate: float
    feed_s: float
    settle_s: float
    seed: int = SEED
    mix: Mix = Mix()

    def due(self, index: int) -> float:
        return self.start_unix + index / self.rate

    @property
    def old_first_until_s(self) -> float:
        """Older-SDK traces sent before this (from the feed's start) land within the
        regular overlap: the daemon learns of the older SDK from the first of them."""
        return self.first_bound_s + self.settle_s + 30.0

    @property
    def first_bound_s(self) -> float:
        return min(self.mix.old_first_bound_s, max(5.0, self.feed_s / 4))

    def _old_delay(self, rng: random.Random, sent_s: float) -> float:
        if sent_s < self.old_first_until_s:
            delay = rng.uniform(5.0, self.first_bound_s)
        else:
            delay = rng.uniform(30.0, self.mix.old_max_s)
        return max(5.0, min(delay, self.feed_s + self.mix.land_by_s - sent_s - self.mix.jitter_s))

    def plan(self, index: int) -> Plan:
        rng = random.Random(f"{self.seed}:plan:{index}")
        mix = self.mix
        template = index % len(self.templates)
        sent_s = index / self.rate
        old = rng.random() < mix.old_sdk
        draw = rng.random()
        offset = 0.0
        if not (old and sent_s < self.old_first_until_s):  # the first ones: a right clock
            if draw < mix.ahead:
                offset = mix.ahead_s
            elif draw < mix.ahead + mix.behind:
                offset = -mix.behind_s
        delay = self._old_delay(rng, sent_s) if old else None
        second = None
        if rng.random() < mix.second_root:
            kind = rng.random()
            if kind < 0.7:
                after = rng.uniform(10.0, 90.0)
            elif kind < 0.9:
                after = rng.uniform(120.0, 240.0)
            else:
                after = rng.uniform(300.0, 330.0)  # past the regular overlap
            if sent_s + after <= self.feed_s - 2:
                second = Second(
                    after_s=after,
                    template=rng.randrange(len(self.templates)),
                    remote=rng.random() < mix.remote_share,
                    delay_s=self._old_delay(rng, sent_s + after) if old else None,
                )
        return Plan(index, template, NEW_SDK if not old else OLD_SDK, offset, delay, second)

    def _clone(
        self, template: Template, trace_id: str, salt: str, ends_at: datetime, sdk: str
    ) -> tuple[list[JsonDict], set[str]]:
        """Shallow clones ending at `ends_at` (nested values shared, never mutated), and the
        ids of their roots (observations whose parent is not among them)."""

        def new_id(old: str) -> str:
            return _hex(f"{trace_id}/{salt}/{old}", 16)

        own = {o["id"] for o in template.observations}
        out, roots = [], set()
        for observation, offsets in zip(template.observations, template.offsets, strict=True):
            clone = dict(observation)
            clone["traceId"] = trace_id
            clone["id"] = new_id(observation["id"])
            parent = observation.get("parentObservationId")
            clone["parentObservationId"] = new_id(str(parent)) if parent in own else None
            if clone["parentObservationId"] is None:
                roots.add(clone["id"])
            clone.pop("isRootObservation", None)  # the fake computes it, as the server does
            for key, offset in offsets.items():
                clone[key] = iso(ends_at + offset)
            metadata = dict(observation.get("metadata") or {})
            scope = dict(metadata.get("scope") or {})
            scope.update(name="langfuse-sdk", version=sdk)
            metadata["scope"] = scope
            metadata["scope.name"] = "langfuse-sdk"  # as the API flattens them
            metadata["scope.version"] = sdk
            clone["metadata"] = metadata
            out.append(clone)
        return out, roots

    def _delays(
        self, observations: list[JsonDict], base: float | None, offset: float, salt: str
    ) -> Callable[[JsonDict], float] | None:
        """None: the fake's own seeded draw of up to 10 s, counted from when each observation
        was sent (its end). A clock behind or an older SDK: explicit, counted from now."""
        if base is None and offset >= 0:
            return None
        rng = random.Random(f"{self.seed}:delay:{salt}")
        delays = {
            o["id"]: (base or 0.0) + rng.uniform(0.0, self.mix.jitter_s) for o in observations
        }
        return lambda observation: delays[observation["id"]]

    def trace(self, plan: Plan) -> tuple[list[JsonDict], Callable[[JsonDict], float] | None]:
        trace_id = trace_id_of(plan.index)
        ends_at = datetime.fromtimestamp(self.due(plan.index) + plan.offset_s, UTC)
        observations, _ = self._clone(
            self.templates[plan.template], trace_id, "first", ends_at, plan.sdk
        )
        return observations, self._delays(observations, plan.delay_s, plan.offset_s, trace_id)

    def second(
        self, plan: Plan
    ) -> tuple[list[JsonDict], Callable[[JsonDict], float] | None, tuple[str, ...]]:
        second = plan.second
        assert second is not None
        trace_id = trace_id_of(plan.index)
        ends_at = datetime.fromtimestamp(self.due(plan.index) + second.after_s + plan.offset_s, UTC)
        observations, roots = self._clone(
            self.templates[second.template], trace_id, "second", ends_at, plan.sdk
        )
        app_roots: tuple[str, ...] = ()
        if second.remote:
            remote = _hex(f"{trace_id}/remote-parent", 16)
            for observation in observations:
                if observation["id"] in roots:
                    observation["parentObservationId"] = remote
            app_roots = tuple(sorted(roots))
        delays = self._delays(observations, second.delay_s, plan.offset_s, f"{trace_id}/second")
        return observations, delays, app_roots


# -- the fake Langfuse, in its own process --------------------------------------------------

_INDEXED_PARAMS = frozenset(
    {"fields", "expandMetadata", "limit", "cursor", "fromStartTime", "toStartTime", "traceId"}
)
_Entry = tuple[_SortKey, int]  # (the listing's key, which version of that observation id)


class SoakLangfuse(FakeLangfuse):
    """The service-like fake with an index, and bounded bookkeeping.

    Observations are added by the fake's own `add_observations` (roots computed, landing
    times drawn, versions kept); every version is also filed in a list sorted by the
    listing's keyset and in one per trace. The daemon's queries (a time window, a cursor,
    field groups, expanded metadata keys, a trace id) are answered from those with the
    fake's ordering, bounds, cursors, landing rule (the newest version that has landed)
    and its own seeded page cuts (`_page`); any other query goes to the fake's full scan.
    Requests are tallied, not kept.
    """

    def __init__(
        self,
        behaviour: Behaviour | None = None,
        *,
        seed: int = 0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(behaviour, seed=seed, clock=clock)
        self._index: list[_Entry] = []
        self._by_trace: dict[str, list[_Entry]] = {}
        self._tally: Counter[tuple[str, str, int]] = Counter()
        self._pages: Counter[str] = Counter()
        self._expected: dict[str, tuple[tuple[int, ...], Any]] = {}

    def add_observations(
        self,
        observations: Iterable[dict[str, Any]],
        *,
        delay_s: Any = None,
        app_roots: Iterable[str] = (),
    ) -> None:
        batch = list(observations)
        with self._lock:
            before = {str(o["id"]): len(self._observations.get(str(o["id"]), ())) for o in batch}
            super().add_observations(batch, delay_s=delay_s, app_roots=app_roots)
            for obs_id, first in before.items():
                versions = self._observations[obs_id]
                for number in range(first, len(versions)):
                    stored = versions[number][1]
                    entry = (stored.sort_key, number)
                    for entries in (self._index, self._by_trace.setdefault(stored.trace_id, [])):
                        if not entries or entry > entries[-1]:
                            entries.append(entry)
                        else:
                            bisect.insort(entries, entry)

    def clear_observations(self) -> None:
        with self._lock:
            super().clear_observations()
            self._index.clear()
            self._by_trace.clear()

    def _landed(self, entry: _Entry, now: datetime) -> _StoredObservation | None:
        """The entry's version when it is the one listed at `now`: landed, and no newer
        version of the same id has landed."""
        key, number = entry
        versions = self._observations[key[2]]
        visible_at, stored = versions[number]
        if visible_at > now:
            return None
        for later in range(number + 1, len(versions)):
            if versions[later][0] <= now:
                return None
        return stored

    def _list_observations(self, query: dict[str, list[str]]) -> JsonDict:
        if not set(query) <= _INDEXED_PARAMS or any(len(v) != 1 for v in query.values()):
            return super()._list_observations(query)
        one = {name: values[0] for name, values in query.items()}
        try:
            lower = _to_us(_parse_time(one["fromStartTime"])) if "fromStartTime" in one else None
            upper = _to_us(_parse_time(one["toStartTime"])) if "toStartTime" in one else None
        except ValueError:
            return super()._list_observations(query)  # its 400
        groups = self._parse_fields(one.get("fields"))
        expand = frozenset(
            k.strip() for k in (one.get("expandMetadata") or "").split(",") if k.strip()
        )
        limit = self._parse_limit(one.get("limit"))
        after = _Cursor.decode(one["cursor"]) if one.get("cursor") else None
        now = self.clock()
        with self._lock:
            by_trace = "traceId" in one
            entries = self._by_trace.get(one["traceId"], []) if by_trace else self._index
            lo = 0 if lower is None else bisect.bisect_left(entries, ((lower,),))
            hi = len(entries) if upper is None else bisect.bisect_left(entries, ((upper,),))
            if after is not None:
                hi = min(hi, bisect.bisect_left(entries, (after.key,)))
            matches: list[_StoredObservation] = []
            at = hi - 1
            while at >= lo and len(matches) <= limit:  # limit + 1 tells whether more follow
                stored = self._landed(entries[at], now)
                if stored is not None:
                    matches.append(stored)
                at -= 1
            page, cursor = self._page(matches, limit, after)
            kind = "full" if len(page) == min(limit, len(matches)) else "cut"
            self._pages["empty" if not page and cursor is not None else kind] += 1
        return {
            "data": [_project(obs.data, groups, expand) for obs in page],
            "meta": {"cursor": cursor.encode()} if cursor is not None else {},
        }

    def tally(self) -> JsonDict:
        """Requests by (method, route, status) so far (status 0: cut off by an outage), and
        the observation pages served by kind."""
        with self._lock:
            records, self._requests = self._requests, []
            self._score_posts = []  # kept by the fake for tests; not needed here
            pages = dict(self._pages)
        for record in records:
            route = {OBSERVATIONS_PATH: "observations", SCORES_PATH: "scores"}.get(
                record.path, record.path
            )
            self._tally[(record.method, route, record.status)] += 1
        return {"requests": dict(self._tally), "pages": pages}

    def counts(self) -> JsonDict:
        now = self.clock()
        with self._lock:
            versions = sum(len(v) for v in self._observations.values())
            pending = sum(
                1 for v in self._observations.values() for visible_at, _ in v if visible_at > now
            )
            return {
                "traces": len(self._by_trace),
                "versions": versions,
                "pending": pending,
                "scores": len(self._scores),
            }

    # -- the check: each trace's live scores against its final content -------------------

    def check(self, stories: dict[str, str], examples: int = 5) -> JsonDict:
        """Every trace's live score set against the pure core's for its content as listed
        now (read as the daemon reads it). The pure core's answer is kept per trace until
        its content changes, so a repeated check costs only the comparison."""
        from langfuse.api.commons.types.observation_v2 import ObservationV2
        from langfuse.api.core.pydantic_utilities import parse_obj_as

        from observer.config import Settings
        from observer.mapping.convention import map_trace
        from observer.mapping.rules import Skip
        from observer.scores import score_events
        from observer.signals import compute
        from observer.sources.langfuse import FIELDS, as_dict

        settings = Settings()
        rules, params = settings.mapping_rules(), settings.signal_params()
        groups = self._parse_fields(FIELDS)
        expand = frozenset(rules.metadata_keys)
        now = self.clock()
        with self._lock:
            content: dict[str, list[_StoredObservation]] = {}
            for trace_id, entries in self._by_trace.items():
                listed = [s for e in reversed(entries) if (s := self._landed(e, now)) is not None]
                content[trace_id] = listed
            live: dict[str, dict[str, list[JsonDict]]] = {}
            for score in self._scores.values():
                by_name = live.setdefault(str(score.get("traceId") or ""), {})
                by_name.setdefault(str(score["name"]), []).append(score)
        out: JsonDict = {
            "traces": len(content),
            "scorable": 0,
            "skipped": 0,
            "unlanded": 0,
            "right": 0,
            "lost": 0,
            "lost_all": 0,
            "duplicated": 0,
            "stale": 0,
            "scores_expected": 0,
            "live_scores": sum(len(s) for by in live.values() for s in by.values()),
            "examples": [],
            "problem_traces": [],
        }
        for trace_id, listed in content.items():
            signature = tuple(id(s) for s in listed)
            cached = self._expected.get(trace_id)
            if cached is None or cached[0] != signature:
                observations = [
                    as_dict(parse_obj_as(ObservationV2, _project(s.data, groups, expand)))
                    for s in listed
                ]
                mapped = map_trace(trace_id, observations, rules) if observations else None
                if mapped is None or isinstance(mapped, Skip):
                    expected: Any = mapped
                else:
                    expected = score_events(mapped, compute(mapped, params), params)
                cached = self._expected[trace_id] = (signature, expected)
            expected = cached[1]
            scores = live.get(trace_id, {})
            if expected is None:
                out["unlanded"] += 1
                continue
            if isinstance(expected, Skip):
                out["skipped"] += 1
                kinds = {"stale": [f"skipped ({expected.reason}) but scored: {sorted(scores)}"]}
                kinds = kinds if scores else {}
            else:
                out["scorable"] += 1
                out["scores_expected"] += len(expected)
                kinds = _problems(expected, scores)
            if not kinds:
                out["right"] += 1
                continue
            for kind in ("lost", "duplicated", "stale"):
                out[kind] += bool(kinds.get(kind))
            if not isinstance(expected, Skip) and len(kinds.get("lost", [])) == len(expected):
                out["lost_all"] += 1
            out["problem_traces"].append(trace_id)
            if len(out["examples"]) < examples:
                out["examples"].append(
                    {
                        "trace": trace_id,
                        "story": stories.get(trace_id, "?"),
                        "problems": [p for ps in kinds.values() for p in ps],
                        "observations": len(listed),
                        "roots": sum(1 for s in listed if s.data.get("isRootObservation")),
                    }
                )
        return out


def _same_value(live: Any, want: float | str) -> bool:
    if isinstance(want, str) or isinstance(live, str):
        return bool(live == want)
    try:
        return math.isclose(float(live), float(want), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _problems(expected: list[Any], live: dict[str, list[JsonDict]]) -> dict[str, list[str]]:
    """What is wrong with a trace's live scores (by name) against its expected set."""
    problems: dict[str, list[str]] = {}
    want = {s.name: s for s in expected}
    for name, scores in sorted(live.items()):
        if name not in want:
            problems.setdefault("stale", []).append(f"{name} live, no longer applies")
        elif len(scores) > 1:
            keys = sorted(FakeLangfuse.score_key(s) for s in scores)
            problems.setdefault("duplicated", []).append(f"{name} stored {len(scores)}x: {keys}")
    for name, score in want.items():
        got = live.get(name, [])
        if not got:
            problems.setdefault("lost", []).append(f"{name} missing")
            continue
        for stored in got:
            if stored.get("id") != score.id:
                problems.setdefault("stale", []).append(
                    f"{name} under id {stored.get('id')}, expected {score.id}"
                )
            if not _same_value(stored.get("value"), score.value) or stored.get("comment") != (
                score.comment
            ):
                problems.setdefault("stale", []).append(
                    f"{name} {stored.get('value')!r} ({stored.get('comment')!r}),"
                    f" expected {score.value!r} ({score.comment!r})"
                )
            if stored.get("observationId") != score.observation_id:
                problems.setdefault("stale", []).append(
                    f"{name} on {stored.get('observationId')}, expected {score.observation_id}"
                )
    return problems


def _project(data: JsonDict, groups: list[str], expand: frozenset[str]) -> JsonDict:
    """The fake's projection without its deep copies (the page is serialised at once)."""
    out: JsonDict = {}
    for group in groups:
        for key in FIELD_GROUPS[group]:
            value = data.get(key)
            out[key] = _truncate_metadata(value, expand) if key == "metadata" else value
    return out


class Feeder:
    """The fake's side of the stream: traces as they fall due, second subtrees later."""

    def __init__(self, fake: SoakLangfuse, stream: Stream) -> None:
        self.fake = fake
        self.stream = stream
        self.added = 0
        self.later: list[tuple[float, int]] = []  # (due unix time, trace index)
        self.plans: dict[int, Plan] = {}
        self.stories: dict[str, str] = {}
        self.log: dict[str, list[str]] = {}
        self.kinds: Counter[str] = Counter()

    def feed(self, until: int) -> int:
        """Traces up to index `until` (exclusive) and every second subtree now due."""
        stream, added = self.stream, 0
        for index in range(self.added, until):
            plan = stream.plan(index)
            observations, delays = stream.trace(plan)
            self.fake.add_observations(observations, delay_s=delays)
            added += len(observations)
            trace_id = trace_id_of(index)
            self.stories[trace_id] = plan.story()
            self._note(trace_id, f"sent at {time.time() - stream.start_unix:.1f} s")
            self.kinds["traces"] += 1
            self.kinds[f"from SDK {plan.sdk}"] += 1
            if plan.offset_s:
                ahead = plan.offset_s > 0
                self.kinds[
                    f"app clock {abs(plan.offset_s) / (3600 if ahead else 60):g} "
                    f"{'h ahead' if ahead else 'min behind'}"
                ] += 1
            if plan.second is not None:
                self.plans[index] = plan
                heapq.heappush(self.later, (stream.due(index) + plan.second.after_s, index))
        self.added = max(self.added, until)
        while self.later and self.later[0][0] <= time.time():
            _, index = heapq.heappop(self.later)
            plan = self.plans.pop(index)
            observations, delays, app_roots = stream.second(plan)
            self.fake.add_observations(observations, delay_s=delays, app_roots=app_roots)
            added += len(observations)
            self._note(
                trace_id_of(index),
                f"second subtree sent at {time.time() - stream.start_unix:.1f} s",
            )
            self.kinds["with a second subtree"] += 1
            self.kinds["  of them app roots under a remote parent"] += bool(app_roots)
        return added

    def _note(self, trace_id: str, what: str) -> None:
        self.log.setdefault(trace_id, []).append(what)

    def story_of(self) -> dict[str, str]:
        return {t: f"{s}; {'; '.join(self.log.get(t, []))}" for t, s in self.stories.items()}


def _serve(conn: Connection, seed: int) -> None:  # noqa: C901 - a dispatch over the controller's commands
    """The fake's process: serve, and obey the controller's commands until `quit`."""
    templates = tuple(load_templates())
    fake = SoakLangfuse(SERVICE_LIKE, seed=seed).start()  # FakeLangfuse.service_like's preset
    conn.send((fake.url, fake.public_key, fake.secret_key))
    feeder: Feeder | None = None
    try:
        while True:
            try:
                command, *args = conn.recv()
            except EOFError:  # the controller is gone
                return
            answer: Any = True
            if command == "stream":
                start_unix, rate, feed_s, settle_s, mix = args
                stream = Stream(templates, start_unix, rate, feed_s, settle_s, seed, mix)
                feeder = Feeder(fake, stream)
            elif command == "feed":
                assert feeder is not None
                answer = feeder.feed(*args)
            elif command == "later":
                answer = len(feeder.later) if feeder else 0
            elif command == "kinds":
                answer = dict(feeder.kinds) if feeder else {}
            elif command == "fail":
                fake.fail_next(*args)
            elif command == "clear":
                fake.clear_failures()
            elif command == "outage":
                fake.stop()
            elif command == "recover":
                fake.start()
            elif command == "tally":
                answer = fake.tally()
            elif command == "counts":
                answer = fake.counts()
            elif command == "check":
                answer = fake.check(feeder.story_of() if feeder else {}, *args)
            elif command == "quit":
                conn.send(True)
                return
            conn.send(answer)
    finally:
        fake.stop()


class FakeClient:
    """The controller's end of the pipe; one command at a time, from any thread."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def call(self, *command: Any, timeout_s: float = 120.0) -> Any:
        with self._lock:
            self._conn.send(command)
            if not self._conn.poll(timeout_s):
                raise RuntimeError(f"the fake Langfuse did not answer {command[0]!r}")
            return self._conn.recv()


# -- the daemon ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def daemon_env(
    url: str, public_key: str, secret_key: str, poll_interval_s: float
) -> dict[str, str]:
    """The daemon's environment: defaults but for keys, poll interval, request cap, port."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OBSERVER_", "LANGFUSE_", "OTEL_", "OPENAI_"))
    }
    env.update(
        LANGFUSE_PUBLIC_KEY=public_key,
        LANGFUSE_SECRET_KEY=secret_key,
        LANGFUSE_BASE_URL=url,
        OBSERVER_SOURCE__POLL_INTERVAL_S=str(poll_interval_s),
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="60000",
        OBSERVER_HTTP_HOST=HOST,
        OBSERVER_LOG__FORMAT="json",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


@dataclass
class Stop:
    """One stop of a daemon process."""

    how: str  # SIGTERM, SIGKILL, unexpected
    at_s: float
    seconds: float
    exit_code: int | None
    killed_after_grace: bool = False


class Daemon:
    """`observer run` as a subprocess, restarted on the same state file."""

    def __init__(self, env: dict[str, str], state: Path, log_path: Path, clock: Clock) -> None:
        self.env = env
        self.state = state
        self.log_path = log_path
        self.clock = clock
        self.grace_s = float(env.get("OBSERVER_RUN__SHUTDOWN_GRACE_S", "20"))
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.stopping = False
        self.starts = 0
        self.stops: list[Stop] = []

    def start(self) -> None:
        with self.lock:
            port = free_port()
            with self.log_path.open("ab") as log:
                log.write(f"=== soak: start #{self.starts + 1} at {self.clock():.1f} s\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "soak_daemon", "run", "--state", str(self.state)],
                    env={**self.env, "OBSERVER_HTTP_PORT": str(port)},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.state.parent,  # not the checkout: the snapshot is imported
                )
            self.port = port
            self.starts += 1
            self.stopping = False

    def target(self) -> tuple[int, int] | None:
        """(pid, metrics port) of the running process, or None between processes."""
        with self.lock:
            if self.proc is None or self.stopping or self.proc.poll() is not None:
                return None
            return self.proc.pid, self.port

    def stop(self, how: signal.Signals) -> Stop:
        with self.lock:
            self.stopping = True
            proc = self.proc
        assert proc is not None
        began = time.monotonic()
        at = self.clock()
        killed = False
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(how)
        try:
            proc.wait(timeout=self.grace_s + 15)
        except subprocess.TimeoutExpired:
            killed = True
            proc.kill()
            proc.wait(timeout=15)
        record = Stop(how.name, at, time.monotonic() - began, proc.returncode, killed)
        self.stops.append(record)
        return record

    def restart(self, how: signal.Signals) -> None:
        self.stop(how)
        self.start()

    def revive_if_dead(self) -> None:
        """A process that exited without being told to is recorded and started again."""
        with self.lock:
            proc = self.proc
            dead = proc is not None and not self.stopping and proc.poll() is not None
        if dead and proc is not None and len(self.stops) < 20:
            self.stops.append(Stop("unexpected", self.clock(), 0.0, proc.returncode))
            self.start()

    def kill_if_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)


class Clock:
    """Seconds since the soak began."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.began


# -- sampling -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at_s: float
    pid: int
    rss_mb: float | None
    lag_s: float | None  # the gauge; None while it reads 0 (no pass completed in this process)
    gauge_s: float | None  # the gauge as read
    passes: float  # observer_pass_duration_seconds_count (failed passes count too)
    state_lag_s: float | None  # now - the watermark in the state file
    outbox: float | None
    state_mb: float
    alert_evaluations: float  # observer_alert_evaluations_total, every rule and outcome


def rss_mb(pid: int) -> float | None:
    try:
        import psutil  # type: ignore[import-untyped, unused-ignore]

        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except ImportError:
        pass
    except Exception:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def scrape(port: int) -> dict[str, float]:
    """Unlabelled samples of the daemon's /metrics (labelled ones summed by name)."""
    with _OPENER.open(f"http://{HOST}:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0]
        with contextlib.suppress(ValueError):
            values[name] = values.get(name, 0.0) + float(value)
    return values


def state_mb(state: Path) -> float:
    total = 0
    for path in (state, state.with_name(state.name + "-wal")):
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total / 2**20


def state_lag_s(state: Path) -> float | None:
    """The lag by the watermark in the state file (read-only, a short read)."""
    try:
        db = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=1)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    moment = parse_time(row[0]) if row else None
    return None if moment is None else time.time() - moment.timestamp()


def sample_forever(daemon: Daemon, samples: list[Sample], stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_EVERY_S):
        daemon.revive_if_dead()
        target = daemon.target()
        if target is None:
            continue
        pid, port = target
        try:
            metrics = scrape(port)
        except OSError:
            metrics = {}
        lag = metrics.get("observer_watermark_lag_seconds")
        samples.append(
            Sample(
                at_s=daemon.clock(),
                pid=pid,
                rss_mb=rss_mb(pid),
                # After a good pass the lag is at least settle_s; 0 means no watermark yet.
                lag_s=lag if lag else None,
                gauge_s=lag,
                passes=metrics.get("observer_pass_duration_seconds_count", 0.0),
                state_lag_s=state_lag_s(daemon.state),
                outbox=metrics.get("observer_outbox_scores"),
                state_mb=state_mb(daemon.state),
                alert_evaluations=metrics.get("observer_alert_evaluations_total", 0.0),
            )
        )


# -- faults -------------------------------------------------------------------------------


@dataclass
class Fault:
    at_s: float  # from the start of the feed
    label: str
    action: Callable[[], None]
    injected: bool = True  # False: the end of a fault window
    done_at_s: float | None = None


def fault_schedule(
    fake: FakeClient, daemon: Daemon, feed_s: float, window_s: float, outage_s: float
) -> list[Fault]:
    """The faults at shares of the feed: restarts early, the rest after the warm-up."""
    faults: list[Fault] = []
    every = 10**6
    obs, scores = OBSERVATIONS_PATH, SCORES_PATH

    def at(share: float, label: str, action: Callable[[], None], injected: bool = True) -> None:
        faults.append(Fault(share * feed_s, label, action, injected))

    def window(share: float, seconds: float, label: str, begin: Callable[[], None]) -> None:
        at(share, label, begin)
        at(share + seconds / feed_s, f"end of: {label}", clear, injected=False)

    def fail(
        status: int, count: int, retry_after: float | None, path: str, method: str | None
    ) -> Callable[[], None]:
        def inject() -> None:
            fake.call("fail", status, count, retry_after, path, method)

        return inject

    def clear() -> None:
        fake.call("clear")

    def restart(how: signal.Signals) -> Callable[[], None]:
        return lambda: daemon.restart(how)

    def outage() -> None:
        fake.call("outage")

    def recover() -> None:
        fake.call("recover")

    w = f"{window_s:.0f} s"
    at(0.06, "5xx on reads: 3 x 503 (within the retries)", fail(503, 3, None, obs, "GET"))
    window(
        0.10, window_s, f"5xx on score posts: 503 for {w}", fail(503, every, None, scores, "POST")
    )
    at(
        0.10 + window_s / feed_s / 2,
        "SIGTERM + restart, score posts failing",
        restart(signal.SIGTERM),
    )
    at(0.20, "SIGTERM + restart", restart(signal.SIGTERM))
    at(0.30, "SIGKILL + restart", restart(signal.SIGKILL))
    window(
        0.55,
        window_s,
        f"429 storm, every route, Retry-After 2, for {w}",
        fail(429, every, 2.0, "/api/public", None),
    )
    window(
        0.63,
        window_s,
        f"5xx on reads: 502 for {w} (beyond the retries)",
        fail(502, every, None, obs, "GET"),
    )
    at(0.72, f"Langfuse outage: port closed for {outage_s:.0f} s", outage)
    at(0.72 + outage_s / feed_s, "end of the outage", recover, injected=False)
    window(
        0.82, window_s, f"5xx on score posts: 502 for {w}", fail(502, every, None, scores, "POST")
    )
    at(0.86, "5xx on reads: 4 x 503 (within the retries)", fail(503, 4, None, obs, "GET"))
    at(0.90, "429 on score posts: 5 x, Retry-After 5", fail(429, 5, 5.0, scores, "POST"))
    return sorted(faults, key=lambda f: f.at_s)


def run_faults(
    faults: list[Fault], feed_began_s: float, clock: Clock, stop: threading.Event
) -> None:
    for fault in faults:
        if stop.wait(max(0.0, feed_began_s + fault.at_s - clock())):
            return
        fault.done_at_s = clock() - feed_began_s
        try:
            fault.action()
        except Exception as error:  # report it; the soak goes on
            fault.label += f" (failed: {error!r})"


# -- the report ---------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISSED")


@dataclass
class Outcome:
    rows: list[tuple[str, str, str, str]]
    fault_rows: list[tuple[str, str, str, str, str]]
    examples: list[JsonDict]
    failed: bool


def median_rss(samples: list[Sample], start: float, end: float) -> float | None:
    values = [s.rss_mb for s in samples if start <= s.at_s < end and s.rss_mb is not None]
    return statistics.median(values) if values else None


def lags_between(
    samples: list[Sample], start: float, end: float, *, true: bool = False
) -> list[float]:
    """Lags sampled in [start, end): the gauge's, or (`true`) by the state file's watermark."""
    values = [s.state_lag_s if true else s.lag_s for s in samples if start <= s.at_s < end]
    return [v for v in values if v is not None]


@dataclass
class LogSummary:
    events: Counter[str] = field(default_factory=Counter)
    ticks: list[JsonDict] = field(default_factory=list)  # soak_alert_tick lines
    slow_detected_unix: list[float] = field(default_factory=list)


def read_log(log_path: Path) -> LogSummary:
    """The daemon's JSON log: events by name, `level:<level>` counts, skipped polls, the
    stopwatch's alert ticks, and when the older SDK was detected."""
    summary = LogSummary()
    with log_path.open("rb") as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            name = str(event.get("event", ""))
            if "maximum number of running instances reached" in name:
                name = "apscheduler: poll skipped, a pass still running"
            summary.events[name] += 1
            summary.events[f"level:{event.get('level')}"] += 1
            if name == "soak_alert_tick":
                summary.ticks.append(event)
            elif name == "slow_ingestion_detected":
                moment = parse_time(event.get("timestamp"))
                if moment is not None:
                    summary.slow_detected_unix.append(moment.timestamp())
    return summary


def report(
    *,
    args: argparse.Namespace,
    feed_s: float,
    added: int,
    kinds: dict[str, int],
    feed_began: float,
    feed_began_unix: float,
    feed_ended: float,
    caught_up_s: float | None,
    check: JsonDict,
    counts: JsonDict,
    tally: JsonDict,
    samples: list[Sample],
    daemon: Daemon,
    final_stop: Stop,
    final_pid: int | None,
    faults: list[Fault],
    state_end_mb: float,
    log: LogSummary,
) -> Outcome:
    requests: dict[tuple[str, str, int], int] = tally["requests"]
    pages: dict[str, int] = tally["pages"]
    events = log.events
    feed_lags = lags_between(samples, feed_began, feed_ended)
    all_lags = [s.lag_s for s in samples if s.lag_s is not None]
    blind = [s for s in samples if s.lag_s is None]
    true_lags = lags_between(samples, feed_began, feed_ended, true=True)
    all_true = [s.state_lag_s for s in samples if s.state_lag_s is not None]
    first = samples[0] if samples else None
    rss_start = next((s.rss_mb for s in samples if first and s.pid == first.pid and s.rss_mb), None)
    # The last process: the median RSS over RSS_SPAN_S after its warm-up, at the end of the
    # feed, and at its end (one sample moves by a few MB either way).
    final_samples = [s for s in samples if s.pid == final_pid and s.rss_mb is not None]
    warm_at = final_samples[0].at_s + min(WARMUP_S, 0.2 * feed_s) if final_samples else 0.0
    end_at = final_samples[-1].at_s - RSS_SPAN_S if final_samples else 0.0
    rss_warm = median_rss(final_samples, warm_at, warm_at + RSS_SPAN_S)
    rss_feed_end = median_rss(final_samples, feed_ended - RSS_SPAN_S, feed_ended)
    rss_end = median_rss(final_samples, end_at, math.inf)
    growth = None if rss_warm is None or rss_end is None else 100 * (rss_end - rss_warm) / rss_warm
    peak = max((s.rss_mb for s in samples if s.rss_mb is not None), default=None)
    state_peak = max((s.state_mb for s in samples), default=0.0)
    evaluations = max((s.alert_evaluations for s in samples if s.pid == final_pid), default=0.0)

    def count(route: str, test: Callable[[int], bool]) -> int:
        return sum(n for (_, r, status), n in requests.items() if r == route and test(status))

    ok_reads = count("observations", lambda s: s == 200)
    posts_ok = count("scores", lambda s: s == 202)
    injected_5xx = sum(n for (_, _, s), n in requests.items() if s in (502, 503))
    injected_429 = sum(n for (_, _, s), n in requests.items() if s == 429)
    crashed = sum(n for (_, _, s), n in requests.items() if s == 500)
    cut = sum(n for (_, _, s), n in requests.items() if s == 0)
    term_stops = [s for s in daemon.stops if s.how == "SIGTERM"]
    restarts = Counter(s.how for s in daemon.stops if s is not final_stop)
    grace = daemon.grace_s
    slowest_term = max((s.seconds for s in term_stops), default=None)
    bad_exits = [s for s in term_stops if s.exit_code != 0 or s.killed_after_grace]
    injected = [f for f in faults if f.injected]
    ticks = log.ticks
    slowest = max(ticks, key=lambda t: float(t.get("wall_s", 0.0)), default=None)
    busiest = max(ticks, key=lambda t: float(t.get("cpu_s", 0.0)), default=None)
    tick_walls = [float(t.get("wall_s", 0.0)) for t in ticks]
    detected = [u - feed_began_unix for u in log.slow_detected_unix]
    lost, duplicated, stale = check["lost"], check["duplicated"], check["stale"]

    mix = ", ".join(
        f"{n:,} {k}" for k, n in sorted(kinds.items()) if k != "traces" and not k.startswith(" ")
    )
    rows = [
        ("feed", f"{feed_s / 60:.1f} min at {args.rate:,.1f} traces/s (seed {args.seed})", "", ""),
        ("traces added", f"{added:,}", "", ""),
        ("  of them", mix, "", ""),
        (
            "  second subtrees as app roots under a remote parent",
            f"{kinds.get('  of them app roots under a remote parent', 0):,}",
            "",
            "",
        ),
        (
            "observations added / not landed at the end",
            f"{counts['versions']:,} / {counts['pending']:,}",
            "",
            "",
        ),
        (
            "traces scorable / skipped by the pure core",
            f"{check['scorable']:,} / {check['skipped']:,}",
            "",
            "",
        ),
        (
            "traces holding exactly their right score set",
            f"{check['right']:,}",
            f"{check['traces']:,}",
            verdict(check["right"] == check["traces"]),
        ),
        (
            "lost (a score of the set missing; all of it)",
            f"{lost:,} ({check['lost_all']:,})",
            "0",
            verdict(lost == 0),
        ),
        ("duplicated (a name stored twice)", f"{duplicated:,}", "0", verdict(duplicated == 0)),
        ("stale (differs from the final content)", f"{stale:,}", "0", verdict(stale == 0)),
        (
            "live scores / expected",
            f"{check['live_scores']:,} / {check['scores_expected']:,}",
            "",
            verdict(check["live_scores"] == check["scores_expected"]),
        ),
        (
            "catch-up after the feed stopped",
            "timed out" if caught_up_s is None else f"{caught_up_s:.0f} s",
            f"<= {args.catch_up_s:.0f} s",
            verdict(caught_up_s is not None),
        ),
        (
            "lag p50 / p95 during the feed (/metrics)",
            f"{fmt(percentile(feed_lags, 0.5))} / {fmt(percentile(feed_lags, 0.95))} s",
            "",
            "",
        ),
        (
            "lag max (/metrics); samples kept / reading 0",
            f"{fmt(max(all_lags, default=None))} s; {len(all_lags)} / {len(blind)}",
            "",
            "",
        ),
        (
            "lag p50 / p95 / max by the state file's watermark",
            f"{fmt(percentile(true_lags, 0.5))} / {fmt(percentile(true_lags, 0.95))} / "
            f"{fmt(max(all_true, default=None))} s",
            "",
            "",
        ),
        (
            "slowest alert evaluation (one tick: wall / its CPU)",
            "n/a"
            if slowest is None
            else f"{float(slowest['wall_s']):.3f} / {float(slowest['cpu_s']):.3f} s "
            f"({slowest.get('points')} points)",
            "",
            "",
        ),
        (
            "most CPU in one alert tick (wall / CPU)",
            "n/a"
            if busiest is None
            else f"{float(busiest['wall_s']):.3f} / {float(busiest['cpu_s']):.3f} s "
            f"({busiest.get('points')} points)",
            "",
            "",
        ),
        (
            "alert ticks: count, p50 / p95 wall",
            f"{len(ticks):,}, {fmt(percentile(tick_walls, 0.5), ' s', 3)} / "
            f"{fmt(percentile(tick_walls, 0.95), ' s', 3)}",
            "",
            "",
        ),
        (
            "group evaluations (/metrics, last process)",
            f"{evaluations:,.0f}",
            "",
            "",
        ),
        (
            "older SDK detected (slow_ingestion_detected)",
            ", ".join(f"{d:.0f} s" for d in detected) or "never",
            "",
            "",
        ),
        ("RSS at start", fmt(rss_start, " MB", 0), "", ""),
        (
            "RSS after warm-up (last process, median)",
            fmt(rss_warm, " MB", 0) + f" at {warm_at - feed_began:.0f}-"
            f"{warm_at - feed_began + RSS_SPAN_S:.0f} s",
            "",
            "",
        ),
        ("RSS at the end of the feed (median, 30 s)", fmt(rss_feed_end, " MB", 0), "", ""),
        ("RSS at the end (median, last 30 s)", fmt(rss_end, " MB", 0), "", ""),
        (
            "RSS growth after warm-up",
            fmt(growth, " %"),
            "< 10 %",
            verdict(None if growth is None else growth < 10),
        ),
        ("RSS peak (any process)", fmt(peak, " MB", 0), "", ""),
        (
            "state file (db + -wal) at the end / peak",
            f"{state_end_mb:.1f} / {state_peak:.1f} MB",
            "",
            "",
        ),
        (
            "daemon restarts",
            ", ".join(f"{n} {how}" for how, n in sorted(restarts.items())) or "none",
            "",
            "",
        ),
        (
            "SIGTERM: slowest exit",
            fmt(slowest_term, " s") + ("" if not bad_exits else f" ({len(bad_exits)} not clean)"),
            f"<= {grace + 2:.0f} s (grace + 2), exit 0",
            verdict(None if slowest_term is None else slowest_term <= grace + 2 and not bad_exits),
        ),
        ("faults injected", f"{len(injected)}", "", ""),
        ("  injected 5xx / 429 answered", f"{injected_5xx:,} / {injected_429:,}", "", ""),
        ("  requests cut by the outage", f"{cut:,}", "", ""),
        (
            "observation pages: full / cut short / empty (cursor on)",
            f"{pages.get('full', 0):,} / {pages.get('cut', 0):,} / {pages.get('empty', 0):,}",
            "",
            "",
        ),
        ("observation pages read / score posts accepted", f"{ok_reads:,} / {posts_ok:,}", "", ""),
        ("fake Langfuse errors (500)", f"{crashed:,}", "0", verdict(crashed == 0)),
        (
            "daemon log: poll_completed / poll_failed",
            f"{events['poll_completed']:,} / {events['poll_failed']:,}",
            "",
            "",
        ),
        (
            "daemon log: score pushes failed / polls skipped",
            f"{events['score_push_failed']:,} / "
            f"{events['apscheduler: poll skipped, a pass still running']:,}",
            "",
            "",
        ),
        (
            "daemon log: warnings / errors",
            f"{events['level:warning']:,} / {events['level:error'] + events['level:critical']:,}",
            "",
            "",
        ),
    ]

    fault_rows = []
    marks = [f.done_at_s for f in injected if f.done_at_s is not None]
    for fault in injected:
        if fault.done_at_s is None:
            fault_rows.append(("-", fault.label, "", "", "not run"))
            continue
        at = feed_began + fault.done_at_s
        later = [m for m in marks if m > fault.done_at_s]
        until = feed_began + later[0] if later else feed_ended
        cells = []
        for true in (False, True):
            earlier = lags_between(samples, 0.0, at, true=true)
            later_lags = lags_between(samples, at, until, true=true)
            cells.append(
                (
                    fmt(earlier[-1] if earlier else None, digits=0),
                    fmt(max(later_lags, default=None), digits=0),
                    fmt(later_lags[-1] if later_lags else None, digits=0),
                )
            )
        lag_before, lag_max, lag_then = (f"{m} / {s}" for m, s in zip(*cells, strict=True))
        fault_rows.append((f"{fault.done_at_s:.0f}", fault.label, lag_before, lag_max, lag_then))
    failed = bool(lost or duplicated or stale)
    return Outcome(rows, fault_rows, list(check["examples"]), failed)


def snapshot_observer(workdir: Path) -> tuple[Path, str]:
    """A copy of the observer package (and the stopwatch) the daemon and the check run
    from, whatever others edit meanwhile.

    Returns its directory (for PYTHONPATH) and what it is: the commit and the files under
    observer/ that differ from it.
    """
    src = workdir / "src"
    shutil.copytree(
        ROOT / "observer", src / "observer", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(ROOT / "bench" / "soak_daemon.py", src / "soak_daemon.py")

    def git(*command: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *command], capture_output=True, text=True, check=False
        )
        return done.stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "observer").splitlines()
    described = f"observer at {git('rev-parse', '--short', 'HEAD') or 'unknown commit'}"
    if changed:
        described += f" with uncommitted changes: {', '.join(c[3:] for c in changed)}"
    return src, described


def print_report(outcome: Outcome, title: str, workdir: Path, code: str) -> None:
    console = Console(width=140)
    table = Table(title=title)
    for column in ("measure", "value", "target", ""):
        table.add_column(column, justify="right")
    for row in outcome.rows:
        table.add_row(*row)
    console.print(table)
    faults = Table(title="faults: lag in s, from /metrics / by the state file's watermark")
    for column in ("at (s)", "fault", "lag before", "max until next fault", "lag then"):
        faults.add_column(column, justify="right" if column != "fault" else "left")
    for fault_row in outcome.fault_rows:
        faults.add_row(*fault_row)
    console.print(faults)
    for example in outcome.examples:
        console.print(
            f"[bold]trace {example['trace']}[/bold] ({example['observations']} observations, "
            f"{example['roots']} roots): {example['story']}"
        )
        for problem in example["problems"]:
            console.print(f"  - {problem}")
    console.print(f"daemon log, state file and samples: {workdir}")
    console.print(f"daemon code: {code}")


# -- the run ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None, help="feed duration (6)")
    parser.add_argument("--rate", type=float, default=None, help="traces/s (40)")
    parser.add_argument("--quick", action="store_true", help="1 minute at 20 traces/s")
    parser.add_argument("--poll-interval-s", type=float, default=None, help="daemon poll (3)")
    parser.add_argument("--catch-up-s", type=float, default=None, help="wait after the feed")
    parser.add_argument("--seed", type=int, default=SEED, help="the mix's and the fake's seed")
    parser.add_argument(
        "--mix",
        action="append",
        default=[],
        metavar="NAME=V",
        help="a share or bound of the stream's mix (see Mix), e.g. second_root=0",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="OBSERVER_X=V",
        help="a daemon setting, e.g. OBSERVER_SOURCE__OVERLAP_S=60 (also seen by the check)",
    )
    args = parser.parse_args(argv)
    for item in args.set:
        name, sep, _ = item.partition("=")
        if not sep or not name.startswith("OBSERVER_"):
            parser.error(f"--set wants OBSERVER_NAME=VALUE, got {item!r}")
    known = {f.name for f in dataclasses.fields(Mix)}
    mix: dict[str, float] = {}
    for item in args.mix:
        name, sep, value = item.partition("=")
        try:
            if not sep or name not in known:
                raise ValueError(name)
            mix[name] = float(value)
        except ValueError:
            parser.error(f"--mix wants NAME=NUMBER with NAME one of {sorted(known)}, got {item!r}")
    args.mix_items, args.mix = args.mix, Mix(**mix)
    args.minutes = args.minutes or (1.0 if args.quick else 6.0)
    args.rate = args.rate or (20.0 if args.quick else 40.0)
    args.poll_interval_s = args.poll_interval_s or (2.0 if args.quick else 3.0)
    args.catch_up_s = args.catch_up_s or (120.0 if args.quick else 180.0)
    if args.minutes <= 0 or args.rate <= 0:
        parser.error("--minutes and --rate must be positive")
    return args


@contextlib.contextmanager
def fake_langfuse(seed: int) -> Iterator[tuple[FakeClient, str, str, str]]:
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child, seed), daemon=True)
    server.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("the fake Langfuse did not start")
        url, pk, sk = parent.recv()
        client = FakeClient(parent)
        yield client, url, pk, sk
        with contextlib.suppress(Exception):
            client.call("quit", timeout_s=15)
    finally:
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()
            server.join(timeout=5)


def wait_ready(daemon: Daemon, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        target = daemon.target()
        if target is not None:
            with contextlib.suppress(OSError):
                scrape(target[1])
                return True
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    feed_s = args.minutes * 60
    rate = args.rate
    total = round(rate * feed_s)
    window_s = min(20.0, max(4.0, feed_s / 30))
    outage_s = min(30.0, max(5.0, feed_s / 20))
    workdir = Path(tempfile.mkdtemp(prefix="observer-soak-"))
    state = workdir / "state.sqlite"
    src, code = snapshot_observer(workdir)
    sys.path.insert(0, str(src))  # the spawned fake imports the snapshot (the check's core)
    for key in [k for k in os.environ if k.startswith("OBSERVER_")]:
        del os.environ[key]  # the check must see the daemon's settings
    overrides = dict(item.split("=", 1) for item in args.set)
    os.environ.update(overrides)
    settle_s = float(overrides.get("OBSERVER_SOURCE__SETTLE_S", "20"))
    clock = Clock()
    samples: list[Sample] = []
    stop_sampling = threading.Event()
    stop_faults = threading.Event()
    console = Console(stderr=True)

    with fake_langfuse(args.seed) as (fake, url, pk, sk):
        env = {**daemon_env(url, pk, sk, args.poll_interval_s), **overrides}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        daemon = Daemon(env, state, workdir / "daemon.log", clock)
        sampler = threading.Thread(
            target=sample_forever, args=(daemon, samples, stop_sampling), daemon=True
        )
        try:
            daemon.start()
            if not wait_ready(daemon, 60):
                raise SystemExit(f"the daemon did not serve /metrics; see {daemon.log_path}")
            sampler.start()
            feed_began = clock()
            start_unix = time.time()
            fake.call("stream", start_unix, rate, feed_s, settle_s, args.mix)
            faults = fault_schedule(fake, daemon, feed_s, window_s, outage_s)
            fault_thread = threading.Thread(
                target=run_faults, args=(faults, feed_began, clock, stop_faults), daemon=True
            )
            fault_thread.start()
            console.print(
                f"soak: {total:,} traces over {feed_s / 60:.1f} min into {url}, "
                f"daemon log {daemon.log_path}"
            )

            added = 0
            hard_stop = feed_began + feed_s + 60
            tallied = clock()
            while clock() < hard_stop and (added < total or clock() < feed_began + feed_s):
                due = min(total, math.floor((time.time() - start_unix) * rate) + 1)
                fake.call("feed", max(due, added))
                added = max(due, added)
                if clock() - tallied > 30:  # the fake keeps every request until tallied
                    fake.call("tally")
                    tallied = clock()
                time.sleep(FEED_TICK_S)
            feed_ended = clock()
            fault_thread.join(timeout=60)
            stop_faults.set()
            fault_thread.join(timeout=60)

            console.print(
                f"soak: feed done ({added:,} traces); waiting up to {args.catch_up_s:.0f} s "
                "for everything to land and every trace to hold its right score set"
            )
            caught_up_s: float | None = None
            deadline = clock() + args.catch_up_s
            while clock() < deadline:
                fake.call("feed", added)  # any second subtree still due
                fake.call("tally")
                if fake.call("later") == 0 and fake.call("counts")["pending"] == 0:
                    found = fake.call("check", 0, timeout_s=300)
                    if found["right"] == found["traces"]:
                        caught_up_s = clock() - feed_ended
                        break
                time.sleep(CHECK_EVERY_S)
            time.sleep(SAMPLE_EVERY_S * 1.5)  # one more sample of the settled daemon
            target = daemon.target()
            final_pid = target[0] if target else None
            stop_sampling.set()
            sampler.join(timeout=10)
            final_stop = daemon.stop(signal.SIGTERM)
            console.print("soak: checking every trace's scores against the pure core ...")
            check = fake.call("check", 5, timeout_s=300)
            counts = fake.call("counts")
            kinds = fake.call("kinds")
            tally = fake.call("tally")
        finally:
            stop_faults.set()
            stop_sampling.set()
            daemon.kill_if_alive()

    log = read_log(daemon.log_path)
    outcome = report(
        args=args,
        feed_s=feed_s,
        added=added,
        kinds=kinds,
        feed_began=feed_began,
        feed_began_unix=start_unix,
        feed_ended=feed_ended,
        caught_up_s=caught_up_s,
        check=check,
        counts=counts,
        tally=tally,
        samples=samples,
        daemon=daemon,
        final_stop=final_stop,
        final_pid=final_pid,
        faults=faults,
        state_end_mb=state_mb(state),
        log=log,
    )
    (workdir / "samples.json").write_text(
        json.dumps(
            {
                "feed_began_s": feed_began,
                "feed_ended_s": feed_ended,
                "samples": [asdict(s) for s in samples],
                "stops": [asdict(s) for s in daemon.stops],
                "faults": [
                    {"at_s": f.done_at_s, "label": f.label, "injected": f.injected} for f in faults
                ],
                "tally": [[*key, n] for key, n in sorted(tally["requests"].items(), key=str)],
                "pages": tally["pages"],
                "check": {k: v for k, v in check.items()},
                "alert_ticks": log.ticks,
            },
            indent=1,
        )
    )
    changes = "".join(", " + item for item in args.set + args.mix_items)
    title = (
        f"observer run, soak of {added:,} traces over {feed_s / 60:.1f} min with faults "
        f"(poll {args.poll_interval_s:g} s{changes}, "
        "service-like fake Langfuse on loopback)"
    )
    print_report(outcome, title, workdir, code)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
