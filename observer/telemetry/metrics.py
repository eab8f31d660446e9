"""Every metric observer exposes, declared in one place (`observer_<noun>_<unit>`).

The registry is injected, so tests and the demo each get their own and read
values back with `value()`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.traces = Counter(
            "observer_traces_total",
            "Traces handled by outcome (scored, rescored, unchanged, unsettled, skipped, deferred)",
            ["outcome"],
            registry=r,
        )
        self.skips = Counter(
            "observer_trace_skips_total", "Traces not scored, by reason", ["reason"], registry=r
        )
        self.scores_enqueued = Counter(
            "observer_scores_enqueued_total", "Scores written to the outbox", ["name"], registry=r
        )
        self.scores_pushed = Counter(
            "observer_scores_pushed_total", "Scores acknowledged by the sink", registry=r
        )
        self.scores_dropped = Counter(
            "observer_scores_dropped_total", "Scores given up on, by reason", ["reason"], registry=r
        )
        self.push_errors = Counter(
            "observer_score_push_errors_total",
            "Failed score pushes (retried later), by kind",
            ["kind"],
            registry=r,
        )
        self.outbox = Gauge("observer_outbox_scores", "Scores waiting in the outbox", registry=r)
        self.source_requests = Counter(
            "observer_source_requests_total",
            "Requests to the observation source, by result",
            ["result"],
            registry=r,
        )
        self.observations = Counter(
            "observer_observations_read_total", "Observations read from the source", registry=r
        )
        self.watermark_lag = Gauge(
            "observer_watermark_lag_seconds",
            "How far the watermark trails the clock at the end of the last pass",
            registry=r,
        )
        self.pass_duration = Histogram(
            "observer_pass_duration_seconds",
            "Duration of one poll pass",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.crag_mismatch = Counter(
            "observer_crag_grade_mismatches_total",
            "Traces whose app-logged CRAG grade differs from the recomputed one",
            registry=r,
        )

        self.judge_decisions = Counter(
            "observer_judge_decisions_total",
            "Sampling decisions (sampled, risk, not_sampled, over_budget, disabled, queue_full)",
            ["decision"],
            registry=r,
        )
        self.judged = Counter(
            "observer_judged_traces_total",
            "Traces the judge finished, by result",
            ["result"],
            registry=r,
        )
        self.judge_errors = Counter(
            "observer_judge_errors_total",
            "Judge errors (no judge score written), by reason",
            ["reason"],
            registry=r,
        )
        self.judge_calls = Counter(
            "observer_judge_calls_total", "LLM calls the judge made", registry=r
        )
        self.judge_tokens = Counter(
            "observer_judge_tokens_total", "Tokens the judge used", ["kind"], registry=r
        )
        self.judge_cost = Counter(
            "observer_judge_cost_usd_total", "Judge cost at the configured prices", registry=r
        )
        self.critical_unsupported = Counter(
            "observer_critical_unsupported_total",
            "Judged traces with an unsupported claim holding a number, date or amount",
            registry=r,
        )

        self.alert_notifications = Counter(
            "observer_alert_notifications_total",
            "Alert notifications by notifier and result (sent, failed, dropped)",
            ["notifier", "result"],
            registry=r,
        )
        self.alert_evaluations = Counter(
            "observer_alert_evaluations_total",
            "Alert rule evaluations by outcome (ok, pending, firing, no_data, insufficient)",
            ["rule", "outcome"],
            registry=r,
        )
        self.alerts_active = Gauge(
            "observer_alerts_active",
            "Alerts currently firing, by rule, group and severity (1 firing, 0 not)",
            ["rule", "environment", "query_type", "severity"],
            registry=r,
        )

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (0 when never set), for summaries and tests."""
        found = self.registry.get_sample_value(name, labels or None)
        return float(found) if found is not None else 0.0
