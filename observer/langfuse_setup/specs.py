"""What init-langfuse should make exist. Pure.

- `SCORE_CONFIGS`: one score config per score of `observer.scores.catalogue`, in
  its order, with its data type, range and description; CATEGORICAL labels
  numbered worst first (LOW = 0), so an average or a threshold on the value
  reads "higher is better".
- `WIDGETS` and `DASHBOARD_NAME`: the dashboard "observer: answer quality" and its
  widgets, in the schema of Langfuse's unstable dashboards API (v4.16 spec), and
  `placements`, their grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from observer.model import ScoreDataType
from observer.scores.catalogue import CATALOGUE, ScoreSpec, spec_of


@dataclass(frozen=True, slots=True)
class Category:
    """A CATEGORICAL config's label and the number Langfuse stores for it."""

    label: str
    value: float


def shape(
    data_type: str,
    min_value: float | None,
    max_value: float | None,
    categories: Sequence[Category],
) -> str:
    """A config's type and range in one phrase: `NUMERIC 0..1`, `CATEGORICAL LOW=0, HIGH=1`."""
    if data_type == "NUMERIC":
        low = "" if min_value is None else f"{min_value:g}"
        high = "" if max_value is None else f"{max_value:g}"
        if low and high:
            return f"NUMERIC {low}..{high}"
        if low:
            return f"NUMERIC >= {low}"
        return f"NUMERIC <= {high}" if high else "NUMERIC"
    if data_type == "CATEGORICAL":
        labels = ", ".join(f"{c.label}={c.value:g}" for c in categories)
        return f"CATEGORICAL {labels}"
    return data_type


@dataclass(frozen=True, slots=True)
class ScoreConfigSpec:
    """One score config as POST /api/public/score-configs wants it."""

    name: str
    data_type: ScoreDataType
    description: str
    min_value: float | None = None
    max_value: float | None = None
    categories: tuple[Category, ...] = ()

    @classmethod
    def of(cls, score: ScoreSpec) -> ScoreConfigSpec:
        """The config of a catalogue score: its labels numbered 0, 1, ... worst first."""
        categories = tuple(Category(label, float(i)) for i, label in enumerate(score.categories))
        return cls(
            score.name,
            score.data_type,
            score.description,
            score.min_value,
            score.max_value,
            categories,
        )

    @property
    def shape(self) -> str:
        return shape(self.data_type, self.min_value, self.max_value, self.categories)

    def body(self) -> dict[str, Any]:
        """The CreateScoreConfigRequest: only the keys its data type allows (BOOLEAN has no
        categories: Langfuse makes True=1 and False=0 itself and refuses any sent)."""
        body: dict[str, Any] = {
            "name": self.name,
            "dataType": self.data_type,
            "description": self.description,
        }
        if self.data_type == "NUMERIC":
            if self.min_value is not None:
                body["minValue"] = self.min_value
            if self.max_value is not None:
                body["maxValue"] = self.max_value
        if self.data_type == "CATEGORICAL":
            body["categories"] = [{"label": c.label, "value": c.value} for c in self.categories]
        return body


SCORE_CONFIGS: Final[tuple[ScoreConfigSpec, ...]] = tuple(map(ScoreConfigSpec.of, CATALOGUE))
SCORE_NAMES: Final[tuple[str, ...]] = tuple(spec.name for spec in SCORE_CONFIGS)

_VIEW_OF: Final[dict[str, str]] = {
    "NUMERIC": "scores-numeric",
    "BOOLEAN": "scores-boolean",  # `avg` of `value` is the true-rate
    "CATEGORICAL": "scores-categorical",
}


@dataclass(frozen=True, slots=True)
class WidgetSpec:
    """One chart over one of observer's scores, as POST .../dashboard-widgets wants it."""

    key: str  # its placement id on observer's dashboard is "observer-<key>"
    name: str
    description: str
    score: str
    measure: str
    agg: str
    chart_type: str
    breakdown: str | None = None  # a dimension: one series per value

    @property
    def view(self) -> str:
        return _VIEW_OF[spec_of(self.score).data_type]

    @property
    def summary(self) -> str:
        per = f" per {self.breakdown}" if self.breakdown else ""
        return f"{self.agg}({self.measure}) of {self.score}{per}, {self.chart_type}"

    def body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "view": self.view,
            "dimensions": [{"field": self.breakdown}] if self.breakdown else [],
            "metrics": [{"measure": self.measure, "agg": self.agg}],
            "filters": [
                {
                    "column": "name",
                    "operator": "any of",
                    "type": "stringOptions",
                    "value": [self.score],
                }
            ],
            "chartType": self.chart_type,
        }


def _average(key: str, score: str, title: str, description: str) -> WidgetSpec:
    return WidgetSpec(
        key, f"observer: {title}", description, score, "value", "avg", "LINE_TIME_SERIES"
    )


def _by(key: str, score: str, title: str, description: str, dimension: str) -> WidgetSpec:
    """An average per value of a dimension of Langfuse's score views (`traceRelease`,
    `observationModelName`: the trace's release, the scored generation's model)."""
    return WidgetSpec(
        key,
        f"observer: {title}",
        description,
        score,
        "value",
        "avg",
        "LINE_TIME_SERIES",
        breakdown=dimension,
    )


def _counts(key: str, score: str, title: str, description: str) -> WidgetSpec:
    return WidgetSpec(
        key,
        f"observer: {title}",
        description,
        score,
        "count",
        "count",
        "BAR_TIME_SERIES",
        breakdown="stringValue",
    )


DASHBOARD_NAME: Final = "observer: answer quality"
DASHBOARD_DESCRIPTION: Final = (
    "Answer quality as observer scores it (confidence, citations, retrieval grade, and the "
    "judge's faithfulness). Made by `observer init-langfuse`; see observer's docs/scores.md."
)
# Two tiles a row, in this order.
WIDGETS: Final[tuple[WidgetSpec, ...]] = (
    _average("confidence", "confidence", "confidence (average)", "Average confidence per time."),
    _average(
        "citation-coverage",
        "citation_coverage",
        "citation coverage (average)",
        "Average share of substantive sentences that cite a source.",
    ),
    _average(
        "faithfulness",
        "faithfulness",
        "faithfulness (average)",
        "Average share of claims the context supports (judged answers).",
    ),
    _average(
        "citation-accuracy",
        "citation_accuracy",
        "citation accuracy (average)",
        "Average share of cited claims their own citations support (judged answers).",
    ),
    _average(
        "ungrounded",
        "ungrounded",
        "ungrounded rate",
        "Share of answers with LOW retrieval and no cited substantive sentence.",
    ),
    _average(
        "critical-unsupported",
        "critical_unsupported",
        "critical unsupported rate",
        "Share of judged answers with an unsupported number, date or amount.",
    ),
    _average(
        "refusal-rate",
        "abstained",
        "refusal rate",
        "Share of answers that are refusals (I don't know, 知识库未匹配).",
    ),
    _average(
        "over-refusal-rate",
        "over_refusal",
        "over-refusal rate",
        "Share of answers with retrieval scores that refused although retrieval was HIGH.",
    ),
    _counts("crag-grade", "crag_grade", "CRAG grade", "Answers per retrieval grade."),
    _counts(
        "confidence-band", "confidence_band", "confidence band", "Answers per confidence band."
    ),
    # What changed: the same signals per release and per model, side by side.
    _by(
        "grounding-by-release",
        "numeric_grounding",
        "numeric grounding by release",
        "Average share of the answer's numbers found in its sources, one line per release.",
        "traceRelease",
    ),
    _by(
        "coverage-by-model",
        "citation_coverage",
        "citation coverage by model",
        "Average citation coverage, one line per answering model.",
        "observationModelName",
    ),
)
_TILE: Final = 6  # a 6x6 tile is half the 12-column grid, the UI's default


def placements(widgets: Sequence[tuple[WidgetSpec, str]]) -> list[dict[str, Any]]:
    """The dashboard's grid: (spec, widget id) pairs as two 6x6 tiles a row."""
    return [
        {
            "type": "widget",
            "id": f"observer-{spec.key}",
            "widgetId": widget_id,
            "x": (i % 2) * _TILE,
            "y": (i // 2) * _TILE,
            "width": _TILE,
            "height": _TILE,
        }
        for i, (spec, widget_id) in enumerate(widgets)
    ]
