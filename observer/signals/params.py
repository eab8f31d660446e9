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

# Phrases that make an answer a refusal (docs/signals.md#abstention-and-over-citation),
# compared after normalisation (observer.signals.abstention.normalise): case, width,
# apostrophes and punctuation do not matter.
DEFAULT_REFUSAL_PHRASES: tuple[str, ...] = (
    "i don't know",
    "i do not know",
    "no information",
    "no relevant information",
    "not enough information",
    "insufficient information",
    "don't have information",
    "do not have information",
    "don't have enough information",
    "do not have enough information",
    "don't have any information",
    "do not have any information",
    "i couldn't find",
    "i could not find",
    "i can't find",
    "i cannot find",
    "i was unable to find",
    "i am unable to find",
    "i'm unable to find",
    "i can't answer",
    "i cannot answer",
    "i am unable to answer",
    "i'm unable to answer",
    "not mentioned in the provided",
    "not covered in the provided",
    "the provided context does not",
    "the provided documents do not",
    "我不知道",
    "无法回答",
    "无法找到",
    "未能找到",
    "找不到相关",
    "未找到相关",
    "没有找到相关",
    "没有找到足够的证据",
    "知识库未匹配",
    "知识库中没有",
    "没有相关信息",
    "没有相关的信息",
    "暂无相关信息",
    "没有足够的信息",
    "信息不足",
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
    refusal_phrases: tuple[str, ...] = DEFAULT_REFUSAL_PHRASES
    max_refs_per_sentence: int = 3
