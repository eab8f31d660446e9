"""`observer check`'s table: what the configuration says will be read and written,
then what the checks found; and the plain two-column table of such reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from observer.config import Settings


def check_table(settings: Settings, found: list[tuple[str, str]]) -> Table:
    """The configuration's rows, then `found` (the checks' rows, markup escaped)."""
    from rich.markup import escape
    from rich.table import Table

    from observer.judge.outcome import JUDGE_SCORE_NAMES
    from observer.resolver.scores import RESOLVER_SCORE_NAMES
    from observer.scores import SIGNAL_SCORE_NAMES
    from observer.sources.langfuse import FIELDS

    rules = settings.mapping_rules()
    src = settings.source
    table = Table(title="observer check", show_header=False)
    table.add_column("")
    table.add_column("", overflow="fold")
    table.add_row("config", "valid")
    table.add_row("Langfuse", settings.langfuse.base_url)
    table.add_row("public key", settings.langfuse.public_key or "(not set)")
    table.add_row("reads", "GET /api/public/v2/observations, fields " + FIELDS)
    table.add_row("metadata expanded", ", ".join(rules.metadata_keys))
    table.add_row(
        "environments", ", ".join(src.environments) or "all (but langfuse-llm-as-a-judge)"
    )
    table.add_row("trace names", ", ".join(src.trace_names) or "all")
    table.add_row("tags", ", ".join(src.tags) or "any")
    table.add_row("generation", ", ".join(rules.generation_names or rules.generation_types))
    table.add_row(
        "sources",
        "the last output of " + ", ".join(rules.retriever_names) + " before the generation"
        if rules.retriever_names
        else "the last list of documents before the generation, of any type "
        "(a retriever, a reranker, a tool)",
    )
    table.add_row("hook", settings.mapping.hook or "none (default convention)")
    table.add_row(
        "polling",
        f"every {src.poll_interval_s:g} s, settle {src.settle_s:g} s, "
        f"overlap {src.overlap_s:g} s re-read "
        + (f"every {src.sweep_interval_s:g} s, " if src.sweep_interval_s else "every pass, ")
        + f"first look back {src.lookback_s:g} s, "
        f"at most {src.requests_per_minute:g} requests/min, {src.page_limit} per page",
    )
    names = list(SIGNAL_SCORE_NAMES)
    names += RESOLVER_SCORE_NAMES if settings.resolver.kind else ()
    names += JUDGE_SCORE_NAMES if settings.judge.enabled else ()
    table.add_row("writes", "POST /api/public/scores (" + ", ".join(names) + ")")
    for key, value in found:
        table.add_row(key, escape(value))
    return table


def two_columns(title: str, rows: list[tuple[str, str]]) -> Table:
    """A key and its value a row, no header (`fleet status`)."""
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("")
    table.add_column("", overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    return table
