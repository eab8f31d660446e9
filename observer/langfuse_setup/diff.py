"""What exists against what should: init-langfuse's decisions per object. Pure.

- Score configs are matched by name among the project's configs: one that fits
  (same data type and range, or the same categories in any order) counts, even
  archived; an active one of another shape is reported, never duplicated nor
  edited; an archived one of another shape does not block a new one (archiving is
  how Langfuse retires a config, which cannot change its data type). The
  description is not compared, nor BOOLEAN categories (Langfuse's own).
- Widgets are matched by name; `widget_difference` names the fields in which one
  differs.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from observer.langfuse_setup.report import SetupOutcome
from observer.langfuse_setup.specs import Category, ScoreConfigSpec, WidgetSpec, shape

if TYPE_CHECKING:
    from langfuse.api.commons.types.score_config import ScoreConfig


@dataclass(frozen=True, slots=True)
class ExistingConfig:
    """A score config as Langfuse lists it, reduced to what the comparison needs."""

    id: str
    name: str
    data_type: str
    min_value: float | None = None
    max_value: float | None = None
    categories: tuple[Category, ...] = ()
    archived: bool = False

    @classmethod
    def of(cls, config: ScoreConfig) -> ExistingConfig:
        return cls(
            id=config.id,
            name=config.name,
            data_type=str(config.data_type),
            min_value=config.min_value,
            max_value=config.max_value,
            categories=tuple(Category(c.label, float(c.value)) for c in config.categories or ()),
            archived=config.is_archived,
        )

    @property
    def shape(self) -> str:
        return shape(self.data_type, self.min_value, self.max_value, self.categories)


def config_difference(spec: ScoreConfigSpec, existing: ExistingConfig) -> str | None:
    """None when the existing config fits observer's scores, else what differs and what to do.

    The description is not compared (it is only text), nor BOOLEAN categories (Langfuse's own).
    """
    was = f"is {existing.shape}, observer writes {spec.shape}"
    if existing.data_type != spec.data_type:
        return (
            f"{was}; a score config cannot change its data type: archive it in Langfuse "
            "(Settings > Scores) and run init-langfuse again"
        )
    same = True
    if spec.data_type == "NUMERIC":
        same = (existing.min_value, existing.max_value) == (spec.min_value, spec.max_value)
    elif spec.data_type == "CATEGORICAL":
        same = set(existing.categories) == set(spec.categories)
    if same:
        return None
    return f"{was}; left as it is: change it in Langfuse, or archive it and run init-langfuse again"


def decide_config(
    spec: ScoreConfigSpec, existing: Sequence[ExistingConfig]
) -> tuple[SetupOutcome, str, str] | None:
    """What to report for `spec` given the configs of its name; None: create it."""
    active = [c for c in existing if not c.archived]
    for config in active:
        if config_difference(spec, config) is None:
            return SetupOutcome.EXISTED, f"{spec.shape}, unchanged", config.id
    if active:
        difference = config_difference(spec, active[0])
        assert difference is not None
        return SetupOutcome.DIFFERS, difference, active[0].id
    for config in existing:  # archived only
        if config_difference(spec, config) is None:
            return (
                SetupOutcome.EXISTED,
                f"{spec.shape}, archived in Langfuse: left archived",
                config.id,
            )
    return None


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def widget_difference(spec: WidgetSpec, existing: dict[str, Any]) -> list[str]:
    """The fields in which an existing widget of the same name differs from `spec`."""
    want = spec.body()

    def fields(widget: dict[str, Any]) -> dict[str, Any]:
        dimensions = widget.get("dimensions") or []
        metrics = widget.get("metrics") or []
        filters = widget.get("filters") or []
        return {
            "view": widget.get("view"),
            "chartType": widget.get("chartType"),
            "dimensions": [d.get("field") for d in dimensions if isinstance(d, dict)],
            "metrics": [(m.get("measure"), m.get("agg")) for m in metrics if isinstance(m, dict)],
            "filters": sorted(
                _json({k: f.get(k) for k in ("column", "operator", "type", "value", "key")})
                for f in filters
                if isinstance(f, dict)
            ),
        }

    got = fields(existing)
    return [key for key, value in fields(want).items() if got[key] != value]


def decide_widget(
    spec: WidgetSpec, widgets: Sequence[dict[str, Any]], placed: Collection[str]
) -> tuple[SetupOutcome, str, str] | None:
    """What to report for `spec` given the project's widgets and the ids already on
    observer's dashboard; None: create it. Of several of its name, the one on the
    dashboard counts, else the first."""
    named = [w for w in widgets if w.get("name") == spec.name and isinstance(w.get("id"), str)]
    existing = next((w for w in named if w["id"] in placed), named[0] if named else None)
    if existing is None:
        return None
    differs = widget_difference(spec, existing)
    if differs:
        return (
            SetupOutcome.DIFFERS,
            f"exists with another {', '.join(differs)}; left as it is",
            str(existing["id"]),
        )
    return SetupOutcome.EXISTED, "unchanged", str(existing["id"])


def placed_widget_ids(board: dict[str, Any]) -> set[str]:
    """The ids of the widgets a dashboard (as the API lists it) shows."""
    definition = board.get("definition")
    tiles = definition.get("widgets") if isinstance(definition, dict) else None
    return {
        str(tile["widgetId"])
        for tile in tiles or ()
        if isinstance(tile, dict) and tile.get("widgetId") is not None
    }
