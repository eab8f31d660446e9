"""The resolver in the daemon: a page's lookup, counted in the metrics.

Thin glue between the pipeline (which asks for a page of new and changed
traces at once) and `Resolver` (batches, cache, one store): the findings per
trace in order, and the resolver's counters turned into metrics as they grow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from observer.model import RagRecord, Signals
from observer.resolver.core import ResolverFindings
from observer.resolver.front import Resolver, ResolverStats
from observer.telemetry.metrics import Metrics


class ResolverLookup:
    def __init__(self, resolver: Resolver, metrics: Metrics) -> None:
        self.resolver = resolver
        self.metrics = metrics
        self._seen = ResolverStats()
        for reason in self._seen.errors:
            metrics.resolver_errors.labels(reason=reason)
        for source in ("cache", "store"):
            metrics.resolver_ids.labels(source=source)

    def __call__(self, page: Sequence[tuple[RagRecord, Signals]]) -> list[ResolverFindings | None]:
        resolutions = self.resolver.resolve_records(page)
        self._count()
        for (record, _), resolution in zip(page, resolutions, strict=True):
            found = resolution.findings
            if found is None:
                continue
            env, kind = self.metrics.quality_labels(record.environment, record.query_type)
            fresh = max(0, found.looked_up - len(found.missing) - len(found.stale))
            for finding, count in (
                ("missing", len(found.missing)),
                ("stale", len(found.stale)),
                ("unverifiable", found.unverifiable),
                ("fresh", fresh),
            ):
                self.metrics.resolver_findings.labels(
                    environment=env, query_type=kind, finding=finding
                ).inc(count)
        return [r.findings for r in resolutions]

    def _count(self) -> None:
        now = self.resolver.stats
        seen = self._seen
        self.metrics.resolver_lookups.inc(now.lookups - seen.lookups)
        self.metrics.resolver_ids.labels(source="cache").inc(now.cache_hits - seen.cache_hits)
        self.metrics.resolver_ids.labels(source="store").inc(
            now.ids_cited - now.cache_hits - (seen.ids_cited - seen.cache_hits)
        )
        for reason, count in now.errors.items():
            self.metrics.resolver_errors.labels(reason=reason).inc(count - seen.errors[reason])
        self._seen = replace(now, errors=dict(now.errors))

    def close(self) -> None:
        self.resolver.close()
