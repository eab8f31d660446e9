"""The settings of the signals ([signals], [crag], [band]), on their own.

`observer score` needs only these: `load_signal_params` reads them from the same
file and variables as the whole configuration (observer.config.sources) and
validates them with these three models alone, so the command loads neither the
other sections' models nor what their validators import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from observer.config.sources import SIGNAL_SECTIONS, describe, read_sources
from observer.errors import ConfigError
from observer.signals.params import (
    DEFAULT_ABBREVIATIONS,
    DEFAULT_PLEASANTRY_PREFIXES,
    DEFAULT_REFUSAL_PHRASES,
    CragParams,
    SignalParams,
)


class Section(BaseModel):
    """A table of the configuration: unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SignalsSettings(Section):
    min_chars: int = Field(8, ge=1, description="characters a substantive sentence needs")
    pleasantry_prefixes: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PLEASANTRY_PREFIXES)
    )
    abbreviations: list[str] = Field(default_factory=lambda: list(DEFAULT_ABBREVIATIONS))
    refusal_phrases: list[str] = Field(
        default_factory=lambda: list(DEFAULT_REFUSAL_PHRASES),
        description="phrases that make a short, uncited answer a refusal; replaces the defaults",
    )
    max_refs_per_sentence: int = Field(
        3, ge=1, description="distinct refs a sentence may carry before it is over-cited"
    )


class CragSettings(Section):
    high: float = Field(0.65, ge=0.0, le=1.0, allow_inf_nan=False)
    low: float = Field(0.25, ge=0.0, le=1.0, allow_inf_nan=False)
    high_gap: float = Field(0.15, ge=0.0, le=1.0, allow_inf_nan=False)
    low_avg_buffer: float = Field(0.05, ge=0.0, le=1.0, allow_inf_nan=False)
    mode: Literal["heuristic", "disabled"] = "heuristic"

    @model_validator(mode="after")
    def _low_below_high(self) -> CragSettings:
        if self.low >= self.high:
            raise ValueError(f"crag.low ({self.low}) must be below crag.high ({self.high})")
        return self


class BandSettings(Section):
    high: float = Field(0.85, ge=0.0, le=1.0, allow_inf_nan=False)
    medium: float = Field(0.60, ge=0.0, le=1.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _medium_below_high(self) -> BandSettings:
        if self.medium > self.high:
            raise ValueError(f"band.medium ({self.medium}) must not exceed band.high ({self.high})")
        return self


def signal_params(signals: SignalsSettings, crag: CragSettings, band: BandSettings) -> SignalParams:
    """The signals' parameters from their three sections."""
    return SignalParams(
        min_chars=signals.min_chars,
        pleasantry_prefixes=tuple(p.lower() for p in signals.pleasantry_prefixes),
        abbreviations=frozenset(signals.abbreviations),
        crag=CragParams(
            high=crag.high,
            low=crag.low,
            high_gap=crag.high_gap,
            low_avg_buffer=crag.low_avg_buffer,
            mode=crag.mode,
        ),
        band_high=band.high,
        band_medium=band.medium,
        refusal_phrases=tuple(signals.refusal_phrases),
        max_refs_per_sentence=signals.max_refs_per_sentence,
    )


class _SignalSections(BaseModel):
    """The sections of SIGNAL_SECTIONS, and no other."""

    model_config = ConfigDict(frozen=True)

    signals: SignalsSettings = SignalsSettings()
    crag: CragSettings = CragSettings()
    band: BandSettings = BandSettings()


def load_signal_params(config_path: str | Path | None = None) -> SignalParams:
    """The signals' parameters from the config file (if any) and the environment; the
    other sections are not read. A bad value is a ConfigError naming the key."""
    sources = read_sources(_SignalSections, config_path, SIGNAL_SECTIONS)
    try:
        sections = _SignalSections(**sources.merged)
    except ValidationError as error:
        raise ConfigError(describe(sources, error)) from None
    if sources.unknown:
        raise ConfigError(describe(sources))
    return signal_params(sections.signals, sections.crag, sections.band)
