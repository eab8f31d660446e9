"""Parameters of the pure signals, with the defaults of docs/signals.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_PLEASANTRY_PREFIXES: tuple[str, ...] = (
    "希望对你有帮助",
    "希望以上",
    "如有其他问题",
    "如果还有",
    "hope this helps",
    "let me know if",
    "feel free to",
)

DEFAULT_ABBREVIATIONS: tuple[str, ...] = tuple(
    [
        "Mr",
        "Mrs",
        "Ms",
        "Dr",
        "Prof",
        "Sr",
        "Jr",
        "St",
        "Mt",
        "Ft",
        "Inc",
        "Ltd",
        "Co",
        "Corp",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "approx",
        "No",
        "Fig",
        "Vol",
        "U.S",
        "U.K",
        "Jan",
        "Feb",
        "Mar",
        "Apr",
        "Jun",
        "Jul",
        "Aug",
        "Sep",
        "Sept",
        "Oct",
        "Nov",
        "Dec",
    ]
)

CragMode = Literal["heuristic", "disabled"]


@dataclass(frozen=True, slots=True)
class CragParams:
    high: float = 0.65
    low: float = 0.25
    high_gap: float = 0.15
    low_avg_buffer: float = 0.05
    mode: CragMode = "heuristic"


@dataclass(frozen=True, slots=True)
class SignalParams:
    min_chars: int = 8
    pleasantry_prefixes: tuple[str, ...] = DEFAULT_PLEASANTRY_PREFIXES
    abbreviations: frozenset[str] = frozenset(DEFAULT_ABBREVIATIONS)
    crag: CragParams = CragParams()
    band_high: float = 0.85
    band_medium: float = 0.60
