"""Build observer's two Grafana dashboards with grafana-foundation-sdk's typed builders.

    .venv/bin/python grafana/generate.py          # (re)write grafana/dashboards/*.json
    .venv/bin/python grafana/generate.py --check  # exit 1 if a JSON file differs from this

The JSON files in grafana/dashboards/ are this script's output: change the
dashboards here, run it, and commit both (tests/deploy/test_grafana.py fails
when they drift apart). Needs the dev extra (`.venv/bin/pip install -e ".[dev]"`),
which pins the SDK to the Grafana 11.6 schema; without it the script says so in
one line and exits 2.

Every query uses only the metrics declared in observer/telemetry/metrics.py,
plus the SLO's recorded ratios of deploy/prometheus/observer-slo.rules.yml.
Template variables: `datasource` (any Prometheus), `environment` and
`query_type` (label_values of observer's quality metrics); the pipeline
dashboard also has `job` and `instance`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NEEDS_SDK = (
    "grafana/generate.py needs grafana-foundation-sdk, from observer's dev extra: "
    '.venv/bin/pip install -e ".[dev]"'
)

try:
    from grafana_foundation_sdk.builders import common as common_builder
    from grafana_foundation_sdk.builders import dashboard as dashboard_builder
    from grafana_foundation_sdk.builders import (
        piechart,
        prometheus,
        stat,
        statetimeline,
        timeseries,
    )
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as model
    from grafana_foundation_sdk.models import piechart as piechart_model
except ModuleNotFoundError as missing:  # observer installed without the dev extra
    if missing.name != "grafana_foundation_sdk":
        raise
    print(NEEDS_SDK, file=sys.stderr)
    raise SystemExit(2) from None

DASHBOARDS = Path(__file__).resolve().parent / "dashboards"

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
QUALITY = 'environment=~"$environment", query_type=~"$query_type"'
PIPELINE = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"
# Judged answers are a sample (5% by default): a 30-minute mean, as observer's
# own faithfulness_low rule uses, instead of a per-pixel one full of gaps.
JUDGE_WINDOW = "30m"
FAITHFULNESS_PAGE = 0.80  # observer's faithfulness_low rule: page below this
FAITHFULNESS_WARN = 0.85  # ... and warn below this

GREEN, YELLOW, ORANGE, RED = "green", "yellow", "orange", "red"

PanelBuilder = timeseries.Panel | stat.Panel | piechart.Panel | statetimeline.Panel


# -- small pieces --------------------------------------------------------------------------


def query(expr: str, legend: str = "__auto", ref: str = "A", *, instant: bool = False) -> Any:
    target = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)
    return target.instant() if instant else target.range()


def steps(base: str, *levels: tuple[float, str]) -> dashboard_builder.ThresholdsConfig:
    """Absolute thresholds. Grafana treats the first step as -Infinity whatever its value;
    the schema wants a number there, so it gets 0."""
    return (
        dashboard_builder.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps(
            [model.Threshold(value=0, color=base)]
            + [model.Threshold(value=value, color=color) for value, color in levels]
        )
    )


def legend_table() -> common_builder.VizLegendOptions:
    return (
        common_builder.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "lastNotNull"])
    )


def graph(
    title: str,
    description: str,
    targets: Sequence[Any],
    *,
    unit: str = "short",
    width: int = 12,
    height: int = 8,
    ratio: bool = False,
    stacked: bool = False,
    thresholds: dashboard_builder.ThresholdsConfig | None = None,
) -> timeseries.Panel:
    """A time series. With `thresholds`, their levels are drawn as dashed lines."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit("percentunit" if ratio else unit)
        .span(width)
        .height(height)
        .line_width(1)
        .fill_opacity(60 if stacked else 10)
        .legend(legend_table())
        .tooltip(
            common_builder.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if ratio:
        panel = panel.min(0).max(1)
    if stacked:
        panel = panel.stacking(common_builder.StackingConfig().mode(common.StackingMode.PERCENT))
    if thresholds is not None:
        panel = panel.thresholds(thresholds).thresholds_style(
            common_builder.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def single(
    title: str,
    description: str,
    target: Any,
    *,
    unit: str = "short",
    width: int = 4,
    thresholds: dashboard_builder.ThresholdsConfig | None = None,
    mappings: list[model.ValueMapping] | None = None,
    decimals: int | None = None,
) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(5)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .reduce_options(common_builder.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(thresholds or steps(GREEN))
        .with_target(target)
    )
    if mappings:
        panel = panel.mappings(mappings)
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


def pie(title: str, description: str, target: Any, *, width: int = 4) -> piechart.Panel:
    return (
        piechart.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(8)
        .pie_type(piechart_model.PieChartType.DONUT)
        .reduce_options(common_builder.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .legend(
            piechart.PieChartLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.RIGHT)
            .show_legend(True)
            .values([piechart_model.PieChartLegendValues.PERCENT])
        )
        .with_target(target)
    )


def per_min(expr: str) -> str:
    return f"{expr} * 60"


def mean(histogram: str, by: str, window: str = RATE, selector: str = QUALITY) -> str:
    """The mean of a histogram's observations: rate of the sum over rate of the count."""
    return (
        f"sum by ({by}) (rate({histogram}_sum{{{selector}}}[{window}]))\n"
        f"/ sum by ({by}) (rate({histogram}_count{{{selector}}}[{window}]))"
    )


def quantile(q: float, histogram: str, window: str = RATE, selector: str = QUALITY) -> str:
    return (
        f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{selector}}}[{window}])))"
    )


def share(counter: str, by: str, window: str = RATE) -> str:
    """The share of scored answers counted by `counter` (ungrounded, ghost citations ...)."""
    return (
        f"sum by ({by}) (rate({counter}{{{QUALITY}}}[{window}]))\n"
        f"/ sum by ({by}) (rate(observer_answers_scored_total{{{QUALITY}}}[{window}]))"
    )


def build(
    title: str,
    uid: str,
    description: str,
    variables: Sequence[dashboard_builder.QueryVariable],
    rows: Sequence[tuple[str, Sequence[PanelBuilder]]],
) -> dict[str, Any]:
    board = (
        dashboard_builder.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["observer", "rag"])
        .editable()
        .time("now-6h", "now")
        .refresh("1m")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .timepicker(
            dashboard_builder.TimePicker().refresh_intervals(["30s", "1m", "5m", "15m", "1h"])
        )
        .with_variable(
            dashboard_builder.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
        )
    )
    for variable in variables:
        board = board.with_variable(variable)
    panel_id = 0
    for row_title, panels in rows:
        panel_id += 1
        board = board.with_row(dashboard_builder.Row(row_title).id(panel_id))
        for panel in panels:
            panel_id += 1
            board = board.with_panel(panel.id(panel_id))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))  # type: ignore[no-any-return]


def label_variable(
    name: str, label: str, metric: str, *, selector: str = ""
) -> dashboard_builder.QueryVariable:
    """A multi-value variable over a label's values, "All" matching everything."""
    return (
        dashboard_builder.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(
            f"label_values({metric}{{{selector}}}, {name})"
            if selector
            else f"label_values({metric}, {name})"
        )
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def quality_variables() -> list[dashboard_builder.QueryVariable]:
    return [
        label_variable("environment", "Environment", "observer_answers_scored_total"),
        label_variable(
            "query_type",
            "Query type",
            "observer_answers_scored_total",
            selector='environment=~"$environment"',
        ),
    ]


# -- answer quality ---------------------------------------------------------------------------


def answer_quality() -> dict[str, Any]:
    by_type = "query_type"
    volume: list[PanelBuilder] = [
        single(
            "Traces scored / min",
            "Answers scored for the first time, per minute (observer_answers_scored_total).",
            query(per_min(f"sum(rate(observer_answers_scored_total{{{QUALITY}}}[{RATE}]))")),
        ),
        single(
            "Ungrounded, whole range",
            "Share of answers flagged ungrounded over the dashboard's time range. "
            "The SLO allows 2% (deploy/prometheus/observer-slo.rules.yml).",
            query(
                f"sum(increase(observer_answers_ungrounded_total{{{QUALITY}}}[$__range]))\n"
                f"/ sum(increase(observer_answers_scored_total{{{QUALITY}}}[$__range]))",
                instant=True,
            ),
            unit="percentunit",
            thresholds=steps(GREEN, (0.02, RED)),
            decimals=2,
        ),
        single(
            "SLO burn rate, 1h",
            "How fast ungrounded answers spend the 2% error budget over the last hour "
            "(1 = exactly on budget). Pages at 14.4 (with the 5m window), tickets at 6 "
            "(6h and 30m). Needs the recording rules of observer-slo.rules.yml.",
            query(
                'max(environment:observer_answers_ungrounded:ratio_rate1h{environment=~"$environment"})'
                " / 0.02"
            ),
            unit="none",
            thresholds=steps(GREEN, (6, ORANGE), (14.4, RED)),
            decimals=1,
        ),
        single(
            "Ghost citations, whole range",
            "Share of answers citing a source number that does not exist.",
            query(
                f"sum(increase(observer_answers_ghost_citation_total{{{QUALITY}}}[$__range]))\n"
                f"/ sum(increase(observer_answers_scored_total{{{QUALITY}}}[$__range]))",
                instant=True,
            ),
            unit="percentunit",
            thresholds=steps(GREEN, (0.01, ORANGE), (0.02, RED)),
            decimals=2,
        ),
        single(
            "Critical unsupported claims, whole range",
            "Judged answers with an unsupported claim holding a number, date or amount: "
            "observer pages on each one (critical_claim_unsupported).",
            query(
                f"sum(increase(observer_critical_unsupported_total{{{QUALITY}}}[$__range]))",
                instant=True,
            ),
            thresholds=steps(GREEN, (1, RED)),
            decimals=0,
        ),
        single(
            "Mean confidence",
            "Mean confidence (coverage x top rerank score) of the answers scored.",
            query(
                f"sum(rate(observer_answer_confidence_ratio_sum{{{QUALITY}}}[{RATE}]))\n"
                f"/ sum(rate(observer_answer_confidence_ratio_count{{{QUALITY}}}[{RATE}]))"
            ),
            unit="percentunit",
            thresholds=steps(RED, (0.6, ORANGE), (0.85, GREEN)),
        ),
        graph(
            "Traces scored / min by query type",
            "First-time scored answers per minute.",
            [
                query(
                    per_min(
                        "sum by (query_type) "
                        f"(rate(observer_answers_scored_total{{{QUALITY}}}[{RATE}]))"
                    ),
                    "{{query_type}}",
                )
            ],
        ),
        graph(
            "Traces scored / min by environment",
            "First-time scored answers per minute.",
            [
                query(
                    per_min(
                        "sum by (environment) "
                        f"(rate(observer_answers_scored_total{{{QUALITY}}}[{RATE}]))"
                    ),
                    "{{environment}}",
                )
            ],
        ),
    ]
    confidence: list[PanelBuilder] = [
        graph(
            "Mean confidence by query type",
            "rate(_sum) / rate(_count) of observer_answer_confidence_ratio. "
            "Bands: HIGH from 0.85, MEDIUM from 0.60.",
            [query(mean("observer_answer_confidence_ratio", by_type), "{{query_type}}")],
            ratio=True,
            thresholds=steps(RED, (0.6, ORANGE), (0.85, GREEN)),
        ),
        graph(
            "Confidence percentiles",
            "p10, p50 and p90 from the histogram's buckets (all selected query types).",
            [
                query(quantile(0.1, "observer_answer_confidence_ratio"), "p10", "A"),
                query(quantile(0.5, "observer_answer_confidence_ratio"), "p50", "B"),
                query(quantile(0.9, "observer_answer_confidence_ratio"), "p90", "C"),
            ],
            ratio=True,
        ),
        graph(
            "Mean citation coverage by query type",
            "Share of an answer's substantive sentences that cite a source "
            "(observer_answer_citation_coverage_ratio).",
            [query(mean("observer_answer_citation_coverage_ratio", by_type), "{{query_type}}")],
            ratio=True,
        ),
        graph(
            "Citation coverage percentiles",
            "p10, p50 and p90 from the histogram's buckets.",
            [
                query(quantile(0.1, "observer_answer_citation_coverage_ratio"), "p10", "A"),
                query(quantile(0.5, "observer_answer_citation_coverage_ratio"), "p50", "B"),
                query(quantile(0.9, "observer_answer_citation_coverage_ratio"), "p90", "C"),
            ],
            ratio=True,
        ),
        graph(
            "Mean top rerank score by query type",
            "The best rerank score among an answer's sources (observer_answer_rerank_top1_ratio).",
            [query(mean("observer_answer_rerank_top1_ratio", by_type), "{{query_type}}")],
            ratio=True,
        ),
        graph(
            "Mean numeric grounding by query type",
            "Share of an answer's numbers found in its sources, for answers holding numbers "
            "(observer_answer_numeric_grounding_ratio).",
            [query(mean("observer_answer_numeric_grounding_ratio", by_type), "{{query_type}}")],
            ratio=True,
        ),
    ]
    mix: list[PanelBuilder] = [
        graph(
            "Confidence band mix",
            "Share of answers per confidence band (observer_answers_by_band_total).",
            [
                query(
                    f"sum by (band) (rate(observer_answers_by_band_total{{{QUALITY}}}[{RATE}]))",
                    "{{band}}",
                )
            ],
            width=8,
            stacked=True,
        ),
        pie(
            "Bands, whole range",
            "Answers per confidence band over the dashboard's time range.",
            query(
                f"sum by (band) (increase(observer_answers_by_band_total{{{QUALITY}}}[$__range]))",
                "{{band}}",
                instant=True,
            ),
        ),
        graph(
            "CRAG grade mix",
            "Share of answers per recomputed CRAG retrieval grade "
            "(observer_answers_by_crag_grade_total).",
            [
                query(
                    "sum by (crag_grade) "
                    f"(rate(observer_answers_by_crag_grade_total{{{QUALITY}}}[{RATE}]))",
                    "{{crag_grade}}",
                )
            ],
            width=8,
            stacked=True,
        ),
        pie(
            "CRAG grades, whole range",
            "Answers per CRAG grade over the dashboard's time range.",
            query(
                "sum by (crag_grade) "
                f"(increase(observer_answers_by_crag_grade_total{{{QUALITY}}}[$__range]))",
                "{{crag_grade}}",
                instant=True,
            ),
        ),
        graph(
            "CRAG grade mismatches by query type",
            "Share of answers whose app-logged CRAG grade differs from observer's "
            "recomputed one (observer_crag_grade_mismatches_total).",
            [query(share("observer_crag_grade_mismatches_total", by_type), "{{query_type}}")],
            width=24,
            height=7,
            ratio=True,
        ),
    ]
    failures: list[PanelBuilder] = [
        graph(
            "Ungrounded rate by query type",
            "Share of answers flagged ungrounded. Lines: the SLO's 2%, and observer's "
            "ungrounded_rate_high rule (warn 3%, page 5% over 15 minutes).",
            [query(share("observer_answers_ungrounded_total", by_type), "{{query_type}}")],
            ratio=True,
            thresholds=steps(GREEN, (0.02, YELLOW), (0.03, ORANGE), (0.05, RED)),
        ),
        graph(
            "Ghost citation rate by query type",
            "Share of answers citing a source number that does not exist. Lines: "
            "observer's ghost_citation_rate_high rule (warn 1%, page 2%).",
            [query(share("observer_answers_ghost_citation_total", by_type), "{{query_type}}")],
            ratio=True,
            thresholds=steps(GREEN, (0.01, ORANGE), (0.02, RED)),
        ),
        graph(
            "Fallback rate by query type",
            "Share of answers that needed the no-evidence fallback "
            "(observer_answers_fallback_total).",
            [query(share("observer_answers_fallback_total", by_type), "{{query_type}}")],
            ratio=True,
        ),
        graph(
            "Unsupported numbers rate by query type",
            "Share of answers holding a number found in none of their sources "
            "(observer_answers_unsupported_numbers_total).",
            [query(share("observer_answers_unsupported_numbers_total", by_type), "{{query_type}}")],
            ratio=True,
        ),
        graph(
            "Refusal rate by query type",
            'Share of answers that are refusals ("I don\'t know", 知识库未匹配; '
            "observer_answers_abstained_total). Lines: observer's refusal_rate_high rule "
            "(warn 20%, page 30% over 30 minutes).",
            [query(share("observer_answers_abstained_total", by_type), "{{query_type}}")],
            ratio=True,
            thresholds=steps(GREEN, (0.20, ORANGE), (0.30, RED)),
        ),
        graph(
            "Over-refusal rate by query type",
            "Share of answers refusing although retrieval was HIGH: the evidence was there "
            "(observer_answers_over_refusal_total). Lines: observer's over_refusal_rate_high "
            "rule (warn 2%, page 5% over 30 minutes).",
            [query(share("observer_answers_over_refusal_total", by_type), "{{query_type}}")],
            ratio=True,
            thresholds=steps(GREEN, (0.02, ORANGE), (0.05, RED)),
        ),
        graph(
            "What changed: flagged answers by release and model",
            "Share of each release's (and answering model's) answers that were ungrounded, held "
            "an unsupported number, or refused (observer_answers_flagged_by_release_total over "
            "observer_answers_by_release_total; the 8 most recent releases and models). A new "
            "release whose line leaves the others is what a page's triage names.",
            [
                query(
                    "sum by (release, model, flag) (rate(observer_answers_flagged_by_release_total"
                    f'{{environment=~"$environment"}}[{RATE}]))\n'
                    "/ ignoring (flag) group_left sum by (release, model) "
                    "(rate(observer_answers_by_release_total"
                    f'{{environment=~"$environment"}}[{RATE}]))',
                    "{{release}} {{model}} {{flag}}",
                )
            ],
            width=24,
            height=8,
            ratio=True,
        ),
        graph(
            "Over-cited answers rate by query type",
            "Share of answers with a sentence citing more than signals.max_refs_per_sentence "
            "sources (observer_answers_over_cited_total).",
            [query(share("observer_answers_over_cited_total", by_type), "{{query_type}}")],
            width=24,
            height=7,
            ratio=True,
        ),
    ]
    judge: list[PanelBuilder] = [
        graph(
            "Judge agreement with people",
            "The judge against people's labels in Langfuse (judge.human_score), read hourly "
            "over the last 7 days: Cohen's kappa, precision and recall on unfaithful answers "
            "(observer_judge_agreement). Line: observer's judge_agreement_low rule pages "
            "below a kappa of 0.4 (over at least 30 pairs). No line: no labels yet.",
            [query("observer_judge_agreement", "{{measure}}")],
            ratio=True,
            thresholds=steps(RED, (0.4, GREEN)),
            width=12,
            height=7,
        ),
        graph(
            "Judge canary",
            "The canary's last run (judge.canary_file): agreement with its labels and flip "
            "rate against the run before (observer_judge_canary). Line: observer's "
            "judge_canary_low rule pages below an agreement of 0.8 and holds the judge's "
            "pages. A flip rate above 0: the judge changed its mind on known answers. "
            "No line: no canary.",
            [
                query('observer_judge_canary{measure="agreement"}', "agreement", "A"),
                query('observer_judge_canary{measure="flip_rate"}', "flip rate", "B"),
            ],
            ratio=True,
            thresholds=steps(RED, (0.8, GREEN)),
            width=12,
            height=7,
        ),
        graph(
            "Faithfulness by query type (judged answers)",
            f"Mean judge faithfulness over {JUDGE_WINDOW}, the window of observer's "
            f"faithfulness_low rule: it pages below {FAITHFULNESS_PAGE:.2f} (the red line) "
            f"and warns below {FAITHFULNESS_WARN:.2f}.",
            [
                query(
                    mean("observer_answer_faithfulness_ratio", by_type, JUDGE_WINDOW),
                    "{{query_type}}",
                )
            ],
            ratio=True,
            thresholds=steps(RED, (FAITHFULNESS_PAGE, ORANGE), (FAITHFULNESS_WARN, GREEN)),
        ),
        graph(
            "Faithfulness percentiles (judged answers)",
            f"p10 and p50 of judge faithfulness over {JUDGE_WINDOW}.",
            [
                query(
                    quantile(0.1, "observer_answer_faithfulness_ratio", JUDGE_WINDOW), "p10", "A"
                ),
                query(
                    quantile(0.5, "observer_answer_faithfulness_ratio", JUDGE_WINDOW), "p50", "B"
                ),
            ],
            ratio=True,
            thresholds=steps(RED, (FAITHFULNESS_PAGE, ORANGE), (FAITHFULNESS_WARN, GREEN)),
        ),
        graph(
            "Citation accuracy by query type (judged answers)",
            f"Mean judge citation accuracy over {JUDGE_WINDOW}.",
            [
                query(
                    mean("observer_answer_citation_accuracy_ratio", by_type, JUDGE_WINDOW),
                    "{{query_type}}",
                )
            ],
            ratio=True,
        ),
        graph(
            "Critical unsupported claims / hour by query type",
            "Judged answers with an unsupported claim holding a number, date or amount.",
            [
                query(
                    "sum by (query_type) "
                    f"(increase(observer_critical_unsupported_total{{{QUALITY}}}[1h]))",
                    "{{query_type}}",
                )
            ],
        ),
    ]
    return build(
        "observer: answer quality",
        "observer-answer-quality",
        "Trust signals observer recomputes for every RAG answer traced in Langfuse, "
        "per environment and query type.",
        quality_variables(),
        [
            ("Volume and SLO", volume),
            ("Confidence and citation coverage", confidence),
            ("Confidence bands and CRAG grades", mix),
            ("Failure rates", failures),
            ("Judge", judge),
        ],
    )


# -- pipeline health --------------------------------------------------------------------------


def pipeline_health() -> dict[str, Any]:
    def rate_by(metric: str, by: str, extra: str = "") -> str:
        selector = f"{PIPELINE}, {extra}" if extra else PIPELINE
        return per_min(f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE}]))")

    def rate_sum(metric: str, extra: str = "") -> str:
        selector = f"{PIPELINE}, {extra}" if extra else PIPELINE
        return per_min(f"sum(rate({metric}{{{selector}}}[{RATE}]))")

    alerts_selector = f'{PIPELINE}, environment=~"$environment", query_type=~"$query_type"'
    up_down: list[model.ValueMapping] = [
        model.ValueMap(
            options={
                "0": model.ValueMappingResult(text="DOWN", color=RED, index=0),
                "1": model.ValueMappingResult(text="UP", color=GREEN, index=1),
            }
        )
    ]
    ok_firing: list[model.ValueMapping] = [
        model.ValueMap(
            options={
                "0": model.ValueMappingResult(text="ok", color=GREEN, index=0),
                "1": model.ValueMappingResult(text="firing", color=RED, index=1),
            }
        )
    ]
    daemon: list[PanelBuilder] = [
        single(
            "Scrape target",
            "Prometheus' `up` for observer's /metrics (ObserverDown pages after 5 minutes down).",
            query(f"min(up{{{PIPELINE}}})"),
            thresholds=steps(RED, (1, GREEN)),
            mappings=up_down,
        ),
        single(
            "Version",
            "observer_build_info of the selected instances.",
            query(f"count by (version) (observer_build_info{{{PIPELINE}}})", "{{version}}"),
        ),
        single(
            "Watermark lag",
            "How far the point up to which every trace has been processed trails the clock. "
            "ObserverLagHigh warns above 5 minutes and pages above 10.",
            query(f"max(observer_watermark_lag_seconds{{{PIPELINE}}})"),
            unit="s",
            thresholds=steps(GREEN, (300, ORANGE), (600, RED)),
        ),
        single(
            "Outbox",
            "Scores waiting to be delivered to Langfuse. ObserverOutboxFilling warns above "
            "50,000 (half of the default sink.max_outbox).",
            query(f"sum(observer_outbox_scores{{{PIPELINE}}})"),
            thresholds=steps(GREEN, (50000, ORANGE), (100000, RED)),
        ),
        single(
            "observer alerts firing",
            "Alerts of observer's own rules firing now, release_regression and the judge's "
            "health among them (observer_alerts_active).",
            # A group's series exists only while it fires: none firing is 0, not no data.
            query(f"sum(observer_alerts_active{{{alerts_selector}}}) or vector(0)"),
            thresholds=steps(GREEN, (1, RED)),
        ),
        single(
            "Incidents open",
            "Incidents open now: the alerts one cause trips (a bad release: the low-band "
            "rate, the release regression, a grounding rule) count once "
            "(observer_alert_incidents_open).",
            query(
                "sum(observer_alert_incidents_open"
                f'{{{PIPELINE}, environment=~"$environment"}}) or vector(0)'
            ),
            thresholds=steps(GREEN, (1, RED)),
        ),
        single(
            "Judge cost, whole range",
            "Judge spend at the configured prices over the dashboard's time range.",
            query(
                f"sum(increase(observer_judge_cost_usd_total{{{PIPELINE}}}[$__range]))",
                instant=True,
            ),
            unit="currencyUSD",
            decimals=2,
        ),
        graph(
            "Watermark lag",
            "Lines: ObserverLagHigh's warn (5 min) and page (10 min) levels. Normal is about "
            "source.poll_interval_s + source.settle_s (50 s by default).",
            [
                query(
                    f"max by (instance) (observer_watermark_lag_seconds{{{PIPELINE}}})",
                    "{{instance}}",
                )
            ],
            unit="s",
            thresholds=steps(GREEN, (300, ORANGE), (600, RED)),
        ),
        graph(
            "Poll pass duration",
            "p50 and p95 from observer_pass_duration_seconds' buckets, and the mean.",
            [
                query(
                    quantile(0.5, "observer_pass_duration_seconds", selector=PIPELINE), "p50", "A"
                ),
                query(
                    quantile(0.95, "observer_pass_duration_seconds", selector=PIPELINE), "p95", "B"
                ),
                query(
                    f"sum(rate(observer_pass_duration_seconds_sum{{{PIPELINE}}}[{RATE}]))\n"
                    f"/ sum(rate(observer_pass_duration_seconds_count{{{PIPELINE}}}[{RATE}]))",
                    "mean",
                    "C",
                ),
            ],
            unit="s",
        ),
    ]
    traces: list[PanelBuilder] = [
        graph(
            "Traces by outcome / min",
            "scored, rescored (a changed trace), unchanged, unsettled (still being written), "
            "skipped, deferred (the outbox was full).",
            [query(rate_by("observer_traces_total", "outcome"), "{{outcome}}")],
            width=8,
        ),
        graph(
            "Skipped traces by reason / min",
            "Traces not scored (observer_trace_skips_total); docs/trace-convention.md says why.",
            [query(rate_by("observer_trace_skips_total", "reason"), "{{reason}}")],
            width=8,
        ),
        graph(
            "Observations read / min",
            "Observations read from Langfuse's observations API.",
            [query(rate_sum("observer_observations_read_total"), "observations")],
            width=8,
        ),
    ]
    delivery: list[PanelBuilder] = [
        graph(
            "Scores pushed, retried, dropped / min",
            "Acknowledged by Langfuse; failed and waiting for another try; given up on "
            "(ObserverScoresDropped).",
            [
                query(rate_sum("observer_scores_pushed_total"), "pushed", "A"),
                query(rate_sum("observer_scores_retried_total"), "retried", "B"),
                query(
                    rate_by("observer_scores_dropped_total", "reason"), "dropped {{reason}}", "C"
                ),
            ],
        ),
        graph(
            "Scores enqueued by name / min",
            "Scores written to the outbox, per Langfuse score name.",
            [query(rate_by("observer_scores_enqueued_total", "name"), "{{name}}")],
        ),
        graph(
            "Outbox",
            "Scores waiting in the outbox. Line: ObserverOutboxFilling (50,000).",
            [query(f"sum by (instance) (observer_outbox_scores{{{PIPELINE}}})", "{{instance}}")],
            thresholds=steps(GREEN, (50000, ORANGE)),
        ),
        graph(
            "Score push errors by kind / min",
            "Failed pushes, retried later: rate_limited (429), auth (401/403), unreachable.",
            [query(rate_by("observer_score_push_errors_total", "kind"), "{{kind}}")],
        ),
        graph(
            "Trace to score",
            "From a trace's last activity (its latest observation) to Langfuse's "
            "acknowledgement of its scores (observer_trace_to_score_seconds): p50, p95 and the "
            "mean. Normal is about source.settle_s + source.poll_interval_s (50 s by default); "
            "minutes mean a backlog in the outbox or a Langfuse outage.",
            [
                query(
                    quantile(0.5, "observer_trace_to_score_seconds", selector=PIPELINE), "p50", "A"
                ),
                query(
                    quantile(0.95, "observer_trace_to_score_seconds", selector=PIPELINE),
                    "p95",
                    "B",
                ),
                query(
                    f"sum(rate(observer_trace_to_score_seconds_sum{{{PIPELINE}}}[{RATE}]))\n"
                    f"/ sum(rate(observer_trace_to_score_seconds_count{{{PIPELINE}}}[{RATE}]))",
                    "mean",
                    "C",
                ),
            ],
            unit="s",
            width=24,
        ),
    ]
    langfuse: list[PanelBuilder] = [
        graph(
            "Langfuse requests by result / min",
            "Requests to the observations API: ok, rate_limited (429), unreachable, "
            "auth_rejected, rejected.",
            [query(rate_by("observer_source_requests_total", "result"), "{{result}}")],
        ),
        graph(
            "Langfuse 429s / min",
            "Rate-limited reads and score pushes (ObserverLangfuseRateLimited).",
            [
                query(
                    rate_sum("observer_source_requests_total", 'result="rate_limited"'),
                    "reads",
                    "A",
                ),
                query(
                    rate_sum("observer_score_push_errors_total", 'kind="rate_limited"'),
                    "score pushes",
                    "B",
                ),
            ],
        ),
    ]
    judge: list[PanelBuilder] = [
        graph(
            "Judge sampling decisions / min",
            "sampled, risk (oversampled risky answers), not_sampled, over_budget, disabled, "
            "queue_full.",
            [query(rate_by("observer_judge_decisions_total", "decision"), "{{decision}}")],
            width=8,
        ),
        graph(
            "Judged traces by result / min",
            "judged, abstained, error.",
            [query(rate_by("observer_judged_traces_total", "result"), "{{result}}")],
            width=8,
        ),
        graph(
            "Judge errors by reason / min",
            "No judge score written (ObserverJudgeErrorsHigh).",
            [query(rate_by("observer_judge_errors_total", "reason"), "{{reason}}")],
            width=8,
        ),
        graph(
            "Judge LLM calls / min",
            "LLM calls the judge made (at most two a trace).",
            [query(rate_sum("observer_judge_calls_total"), "calls")],
            width=8,
        ),
        graph(
            "Judge tokens / min",
            "Prompt and completion tokens.",
            [query(rate_by("observer_judge_tokens_total", "kind"), "{{kind}}")],
            width=8,
        ),
        graph(
            "Judge cost / hour",
            "At the configured prices (judge.price_prompt_per_1k, price_completion_per_1k).",
            [
                query(
                    f"sum(rate(observer_judge_cost_usd_total{{{PIPELINE}}}[{RATE}])) * 3600",
                    "USD / hour",
                )
            ],
            unit="currencyUSD",
            width=8,
        ),
    ]
    alerts: list[PanelBuilder] = [
        statetimeline.Panel()
        .title("observer's alert rules")
        .description(
            "observer_alerts_active: each of observer's own alert rules per group "
            "(environment, query type) and severity, every kind: window rules, the judge's "
            "health, release_regression; red while firing. A rule with nothing firing "
            "shows as one green row."
        )
        .datasource(DATASOURCE)
        .span(24)
        .height(8)
        .mappings(ok_firing)
        .thresholds(steps(GREEN, (1, RED)))
        .show_value(common.VisibilityMode.NEVER)
        .row_height(0.8)
        .merge_values(True)
        .align_value(common.TimelineValueAlignment.LEFT)
        .legend(common_builder.VizLegendOptions().show_legend(False))
        .tooltip(common_builder.VizTooltipOptions().mode(common.TooltipDisplayMode.SINGLE))
        .with_target(
            query(
                "max by (rule, environment, query_type, severity) "
                f"(observer_alerts_active{{{alerts_selector}}}) or max by (rule) "
                f"(observer_alert_evaluations_total{{{PIPELINE}}}) * 0",
                "{{rule}} {{environment}}/{{query_type}} ({{severity}})",
            )
        ),
        graph(
            "Alert notifications by notifier and result / min",
            "sent, failed, dropped (over the hourly cap).",
            [
                query(
                    rate_by("observer_alert_notifications_total", "notifier, result"),
                    "{{notifier}} {{result}}",
                )
            ],
        ),
        graph(
            "Alert rule evaluations by outcome / min",
            "ok, pending, firing.",
            [query(rate_by("observer_alert_evaluations_total", "outcome"), "{{outcome}}")],
        ),
        graph(
            "Incidents open by environment",
            "Alerts that share one cause (the same release, model, prompt, document or query "
            "type in one environment) are one incident: one page, one thread.",
            [
                query(
                    # None open is a line at 0, not no data: `on()` adds the 0 only then.
                    "sum by (environment) (observer_alert_incidents_open"
                    f'{{{PIPELINE}, environment=~"$environment"}}) or on() vector(0)',
                    "{{environment}}",
                )
            ],
        ),
        graph(
            "Trace-rule alerts by rule and result / min",
            "Traces a trace rule raised: notified at once, kept for the hourly digest "
            "(max_per_hour), or held while the judge is unhealthy.",
            [
                query(
                    rate_by("observer_trace_alerts_total", "rule, result"),
                    "{{rule}} {{result}}",
                )
            ],
        ),
    ]
    variables = [
        label_variable("job", "Job", "observer_build_info"),
        label_variable("instance", "Instance", "observer_build_info", selector='job=~"$job"'),
        *quality_variables(),
    ]
    return build(
        "observer: pipeline health",
        "observer-pipeline-health",
        "The observer daemon itself: progress, score delivery, Langfuse API, judge, alerts.",
        variables,
        [
            ("Daemon", daemon),
            ("Traces", traces),
            ("Score delivery", delivery),
            ("Langfuse API", langfuse),
            ("Judge", judge),
            ("observer's alerts", alerts),
        ],
    )


BUILDERS: dict[str, Callable[[], dict[str, Any]]] = {
    "answer-quality.json": answer_quality,
    "pipeline-health.json": pipeline_health,
}


def render(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the files; write nothing"
    )
    args = parser.parse_args(argv)
    stale = []
    for name, make in BUILDERS.items():
        path = DASHBOARDS / name
        text = render(make())
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    for path in stale:
        print(f"{path} differs from what grafana/generate.py builds: run it", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
