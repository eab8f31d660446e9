"""A fleet member's own metrics, declared beside what they measure
(docs/operating.md#running-a-fleet): registered when the daemon joins a fleet."""

from __future__ import annotations

from observer.telemetry.metrics import Declarations, counter, gauge, histogram


class FleetMetrics(Declarations):
    """A fleet member's own (docs/operating.md#running-a-fleet), summed across members in
    Prometheus. Registered when the daemon joins a fleet (`Metrics.fleet`), so a single
    daemon's /metrics is as it always was."""

    # fmt: off
    reader = gauge("observer_fleet_reader", "1 while this member holds the reader's lease")
    entries = counter("observer_fleet_entries_total",
        "Stream entries by event ({zero})", ("event",),
        zero="published read acknowledged claimed failed dead")
    pending = gauge("observer_fleet_pending_entries",
        "Entries delivered to this member and not yet acknowledged")
    lease_changes = counter("observer_fleet_lease_changes_total",
        "Times this member gained or lost the reader's lease")
    redis_up = gauge("observer_fleet_redis_up", "1 while the fleet's Redis answers this member")
    delivery_wait = histogram("observer_fleet_delivery_wait_seconds",
        "From an entry's trace recorded in this member's outbox to the entry acknowledged (its "
        "scores delivered to Langfuse)", buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300))
    redis_resets = counter("observer_fleet_redis_resets_total",
        "Times this member found the fleet's Redis had lost its data (recreated)")
    # fmt: on
