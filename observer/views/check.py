"""`observer check`'s table: what the configuration says will be read and written,
then what the checks found."""

from __future__ import annotations

from typing import TYPE_CHECKING

from observer.config.keys import shown_key
from observer.urls import without_credentials
from observer.views.console import two_columns

if TYPE_CHECKING:
    from rich.table import Table

    from observer.config import Settings


def check_table(settings: Settings, found: list[tuple[str, str]]) -> Table:
    """The configuration's rows, then `found` (the checks' rows, markup escaped)."""
    from rich.markup import escape

    from observer.judge.outcome import JUDGE_SCORE_NAMES
    from observer.resolver.scores import RESOLVER_SCORE_NAMES
    from observer.scores import SIGNAL_SCORE_NAMES
    from observer.sources.langfuse import FIELDS
    from observer.sources.ratelimit import budget_phrase

    rules = settings.mapping_rules()
    src = settings.source
    names = list(SIGNAL_SCORE_NAMES)
    names += RESOLVER_SCORE_NAMES if settings.resolver.kind else ()
    names += JUDGE_SCORE_NAMES if settings.judge.enabled else ()
    rows = [
        ("config", "valid"),
        ("Langfuse", without_credentials(settings.langfuse.base_url)),
        (
            "public key",
            shown_key(lf_key) if (lf_key := settings.langfuse.public_key) else "(not set)",
        ),
        ("reads", "GET /api/public/v2/observations, fields " + FIELDS),
        ("metadata expanded", ", ".join(rules.metadata_keys)),
        ("environments", ", ".join(src.environments) or "all (but langfuse-llm-as-a-judge)"),
        ("trace names", ", ".join(src.trace_names) or "all"),
        ("tags", ", ".join(src.tags) or "any"),
        ("generation", ", ".join(rules.generation_names or rules.generation_types)),
        (
            "sources",
            "the last output of " + ", ".join(rules.retriever_names) + " before the generation"
            if rules.retriever_names
            else "the last list of documents before the generation, of any type "
            "(a retriever, a reranker, a tool)",
        ),
        ("hook", settings.mapping.hook or "none (default convention)"),
        (
            "polling",
            f"every {src.poll_interval_s:g} s, settle {src.settle_s:g} s, "
            f"overlap {src.overlap_s:g} s re-read "
            + (f"every {src.sweep_interval_s:g} s, " if src.sweep_interval_s else "every pass, ")
            + f"first look back {src.lookback_s:g} s, "
            f"{src.page_limit} per page",
        ),
        ("request budget", budget_phrase(src.requests_per_minute, settings.sink.batch_size)),
        ("writes", "POST /api/public/scores (" + ", ".join(names) + ")"),
    ]
    rows += [(key, escape(value)) for key, value in found]
    return two_columns("observer check", rows)
