"""Values that cross module boundaries: frozen dataclasses, no I/O.

`RagRecord` and `Source` are described in docs/trace-convention.md. pydantic validates them
at the edge
(`observer.records`) straight into these dataclasses; the constraints below
(finite floats, ISO timestamps, `kb`/`web`) are read by that validation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

import orjson
from pydantic import AfterValidator, ConfigDict, with_config

# `quick_init`: a cheaper `__init__` for the frozen, slotted dataclasses built once or more
# per trace (a mapped trace builds a RagRecord of 21 fields, its Sources, their provenance).
# A frozen dataclass's generated `__init__` sets each field with `object.__setattr__` (its
# own `__setattr__` refuses): per field a lookup of the method on `object`, a bound wrapper,
# an argument tuple and a search of the class for the attribute. `quick_init`'s `__init__`,
# of the same signature, calls each slot's descriptor directly (bound once, when the class
# is made), about half the cost per field; everything else the dataclass generated (frozen
# `__setattr__`, `__eq__`, `__hash__`, `__repr__`, `replace`, pickling) is kept, and
# pydantic's validation sets the slots itself (it never calls `__init__`).

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """`cls` (a frozen dataclass with slots, its fields all positional-or-keyword, without
    default factories or `__post_init__`) with an `__init__` that sets its slots directly."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: quick_init needs a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init does not call __post_init__")
    names: dict[str, Any] = {}
    signature: list[str] = []
    body: list[str] = []
    for each in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not each.init or each.kw_only or each.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{each.name}: not a plain positional field")
        names[f"_set_{each.name}"] = cls.__dict__[each.name].__set__
        if each.default is dataclasses.MISSING:
            signature.append(each.name)
        else:
            names[f"_default_{each.name}"] = each.default
            signature.append(f"{each.name}=_default_{each.name}")
        body.append(f"    _set_{each.name}(self, {each.name})")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body) + "\n"
    exec(source, names)  # the source is built above from the field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses assigning a method
    return cls


def _iso_timestamp(value: str | None) -> str | None:
    if value is not None:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO-8601 timestamp: {value[:40]!r}") from None
    return value


IsoTimestamp = Annotated[str | None, AfterValidator(_iso_timestamp)]


@with_config(ConfigDict(allow_inf_nan=False, extra="ignore"))
@quick_init  # built per trace
@dataclass(frozen=True, slots=True)
class Source:
    """One numbered piece of evidence shown to the model; sources[0] is [1]."""

    text: str
    chunk_id: str | None = None
    doc_id: str | None = None
    title: str | None = None
    score: float | None = None
    text_hash: str | None = None
    origin: Literal["kb", "web"] = "kb"


@with_config(ConfigDict(allow_inf_nan=False, extra="ignore"))
@quick_init  # built per trace
@dataclass(frozen=True, slots=True)
class RagRecord:
    """One answer with the evidence it was generated from (docs/trace-convention.md)."""

    trace_id: str
    question: str
    answer: str
    sources: tuple[Source, ...]
    observation_id: str | None = None
    timestamp: IsoTimestamp = None
    environment: str | None = None
    rerank_scores: tuple[float, ...] | None = None
    needs_fallback: bool | None = None
    low_confidence: bool | None = None
    query_type: str | None = None
    context: str | None = None
    # The app's own CRAG grade, when it logged one: compared, never trusted.
    app_crag_grade: str | None = None
    # The Langfuse project the trace belongs to: alerts link to the trace with it.
    project_id: str | None = None
    # Dimensions people slice by (docs/trace-convention.md#dimensions): the trace's name,
    # release and version, the answering generation's model (the name the app gave) and
    # prompt (Langfuse prompt management's name and version). Kept in the signal history;
    # alert rules group by them.
    trace_name: str | None = None
    release: str | None = None
    version: str | None = None
    model: str | None = None
    prompt_name: str | None = None
    prompt_version: int | None = None

    def retrieval_scores(self) -> tuple[float, ...]:
        """`rerank_scores` when the record holds some, else the sources' scores; finite
        ones only (a NaN is no score). Empty: no retrieval score recorded
        (docs/signals.md#unknown-is-not-zero)."""
        if self.rerank_scores and any(math.isfinite(s) for s in self.rerank_scores):
            return tuple(s for s in self.rerank_scores if math.isfinite(s))
        return tuple(
            s.score for s in self.sources if s.score is not None and math.isfinite(s.score)
        )


class Grade(StrEnum):
    HIGH = "HIGH"
    AMBIGUOUS = "AMBIGUOUS"
    LOW = "LOW"


class Band(StrEnum):
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"


class Sentence(NamedTuple):
    """A sentence of the answer as the signals split it (docs/signals.md).

    A NamedTuple rather than a frozen dataclass: an answer has dozens of
    sentences and a tuple is built several times faster, on the hot path.
    """

    text: str
    refs: tuple[int, ...]
    substantive: bool
    cited: bool


@dataclass(frozen=True, slots=True)
class Citations:
    """Markers and sentence coverage of one answer (docs/signals.md)."""

    sentences: tuple[Sentence, ...]
    valid_refs: tuple[int, ...]
    invalid_refs: tuple[int, ...]
    substantive: int
    cited: int
    coverage: float | None

    @property
    def coverage_computed(self) -> bool:
        return self.coverage is not None


@dataclass(frozen=True, slots=True)
class CragResult:
    grade: Grade
    reason: str
    top1: float | None


@dataclass(frozen=True, slots=True)
class NumericGrounding:
    """Numbers of the answer checked against the sources (docs/signals.md#numeric-grounding)."""

    numbers: int
    grounded: int
    unsupported: tuple[str, ...]

    @property
    def ratio(self) -> float | None:
        return self.grounded / self.numbers if self.numbers else None


@dataclass(frozen=True, slots=True)
class Concentration:
    """How much of an answer rests on one document (docs/signals.md#source-concentration).

    Over the cited sentences and the sources their valid refs point to:
    `cited_docs` are the distinct `doc_id`s cited, sorted; `top_doc` is the
    most-cited one (cited by the most sentences; ties: the one more sentences
    rest on alone, then the smallest id); `alone` counts the cited sentences
    whose valid refs all point into `top_doc`. `ratio = alone / cited_sentences`,
    None with fewer than two cited sentences or when no cited source has a doc_id.
    """

    cited_docs: tuple[str, ...]
    top_doc: str | None
    alone: int
    cited_sentences: int
    ratio: float | None


@dataclass(frozen=True, slots=True)
class Signals:
    """Every deterministic signal of one record (docs/signals.md).

    The score signals (`crag`, `rerank_top1`, `confidence`, `band`, `low_confidence`,
    `ungrounded`, `over_refusal`) rest on retrieval scores: None (unknown, never posted)
    for a record with sources none of which carries a score, unless the app's own flags
    decide them (docs/signals.md#unknown-is-not-zero)."""

    trace_id: str
    citations: Citations
    crag: CragResult | None
    rerank_top1: float | None
    confidence: float | None
    band: Band | None
    needs_fallback: bool
    low_confidence: bool | None
    ungrounded: bool | None
    numeric: NumericGrounding
    concentration: Concentration
    # None when the record carries no app grade to compare with.
    crag_mismatch: bool | None = field(default=None)
    # A refusal (docs/signals.md#abstention-and-over-citation): no coverage computed.
    abstained: bool = False
    # Abstained while retrieval was HIGH; None without retrieval scores.
    over_refusal: bool | None = None
    # Sentences carrying more than signals.max_refs_per_sentence distinct refs.
    over_citation: int = 0

    @property
    def scores_recorded(self) -> bool:
        """The record carries retrieval scores (or has no sources at all): the score
        signals are computed."""
        return self.crag is not None

    @property
    def crag_grade(self) -> str | None:
        return None if self.crag is None else self.crag.grade.value

    @property
    def confidence_band(self) -> str | None:
        return None if self.band is None else self.band.value


ScoreDataType = Literal["NUMERIC", "BOOLEAN", "CATEGORICAL"]


@dataclass(frozen=True, slots=True)
class ScoreEvent:
    """One score as Langfuse stores it (docs/scores.md).

    `id` is derived from (trace id, observation id, name) and `timestamp` is the
    generation's start time: Langfuse identifies a score by id, name and the
    day of its timestamp, so scoring a trace again updates, never duplicates.
    """

    id: str
    trace_id: str
    observation_id: str | None
    name: str
    value: float | str
    data_type: ScoreDataType
    comment: str
    timestamp: str | None
    environment: str | None
    # Langfuse's score metadata: the judge's scores say which judge wrote them
    # (observer.judge.identity); None on every other score.
    metadata: dict[str, str] | None = None


def answer_basis(record: RagRecord) -> str:
    """What the judge's verdict rests on: the answer, its sources and the context.

    The judge's scores stay while it is the same, and are deleted (the trace offered
    to the sampler again) once it is another."""
    described = orjson.dumps(
        [record.answer, [(s.chunk_id, s.text) for s in record.sources], record.context]
    )
    return hashlib.sha256(described).hexdigest()[:16]
