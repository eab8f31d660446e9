"""The `[alerts]` section: window rules, trace rules, routes and notifiers.

Its expressions and durations are checked with the rules' own grammar
(observer.alerts.rules, pure), loaded when the section is validated: importing the
configuration loads no alerting module, and `observer score` never validates it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, model_validator

from observer.config.signals import Section as _Section

if TYPE_CHECKING:
    from observer.alerts.regression import RegressionRule
    from observer.alerts.rules import Route, TraceRule, WindowRule


class WindowRuleSettings(_Section):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1)
    signal: str = Field(description="a signal, or '<signal> <op> <value>' (a flag)")
    aggregate: str = "mean"
    op: str = ">"
    threshold: float = Field(allow_inf_nan=False)
    warn_threshold: float | None = Field(None, allow_inf_nan=False)
    window: str = "15m"
    min_samples: int = 1
    for_: str = Field("0s", alias="for")
    repeat: str = "4h"
    no_data: str = "keep"
    no_data_for: str = "30m"
    group_by: list[str] = Field(default_factory=lambda: ["environment", "query_type"])
    where: dict[str, str] = Field(default_factory=dict)
    notify: list[str] = Field(default_factory=list, description="notifier names (empty: all)")
    runbook_url: str = ""


class TraceRuleSettings(_Section):
    name: str = Field(min_length=1)
    when: str = Field(description="a flag, or '<signal> <op> <value>'")
    where: dict[str, str] = Field(default_factory=dict)
    max_per_hour: int = 20
    notify: list[str] = Field(default_factory=list, description="notifier names (empty: all)")
    runbook_url: str = ""


class RouteSettings(_Section):
    layer: Literal["retrieval", "generation", "index", "abstention", "judge", "pipeline"] = Field(
        description="the layer a firing alert's triage blames (judge: the judge's own health; "
        "pipeline: observer's own samples)"
    )
    notify: list[str] = Field(min_length=1, description="notifier names, instead of the rule's")
    rules: list[str] = Field(default_factory=list, description="only these rules (empty: all)")


class NotifierSettings(_Section):
    name: str = Field(min_length=1)
    kind: Literal["alertmanager", "pagerduty", "slack", "webhook"]
    url: str = ""
    secret_env: str = Field("", description="the variable holding the key, URL or secret")
    timeout_s: float = Field(10.0, gt=0)
    channel: str = Field(
        "",
        description="slack: the channel ID to post to with a bot token (chat.postMessage: "
        "an incident's messages in one thread); empty: secret_env holds an incoming webhook",
    )


class AlertsSettings(_Section):
    defaults: bool = Field(True, description="the default rules apply when none is configured")
    history_days: float = Field(8.0, gt=0)
    max_groups: int = Field(50, ge=1, description="alert groups per rule at most")
    correlation_window_s: float = Field(
        900.0,
        ge=0,
        description="alerts of one cause firing within this many seconds of each other are "
        "one incident; 0: every alert is an incident of its own",
    )
    rules: list[WindowRuleSettings] = Field(default_factory=list)
    trace_rules: list[TraceRuleSettings] = Field(default_factory=list)
    notifiers: list[NotifierSettings] = Field(default_factory=list)
    routes: list[RouteSettings] = Field(
        default_factory=list, description="firing alerts by the layer to blame, first match"
    )

    @model_validator(mode="after")
    def _rules_fit(self) -> AlertsSettings:
        self.window_rules()
        self.trace_rule_list()
        names = [n.name for n in self.notifiers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"alerts.notifiers: the name {name!r} is used twice")
        for notifier in self.notifiers:
            where = f"alerts.notifiers[{notifier.name}]"
            if notifier.kind in ("alertmanager", "webhook") and not notifier.url:
                raise ValueError(f"{where}.url: a {notifier.kind} notifier needs a url")
            if notifier.kind in ("pagerduty", "slack") and not notifier.secret_env:
                what = {"pagerduty": "routing key", "slack": "webhook URL"}[notifier.kind]
                if notifier.channel:
                    what = "bot token"
                raise ValueError(
                    f"{where}.secret_env: name the environment variable holding the {what}"
                )
            if notifier.channel and notifier.kind != "slack":
                raise ValueError(f"{where}.channel: only a slack notifier posts to a channel")
        targets = [("rules", r.name, r.notify) for r in self.rules]
        targets += [("trace_rules", r.name, r.notify) for r in self.trace_rules]
        rule_names = [name for _, name, _ in targets]
        for kind, rule, notify in targets:
            if rule_names.count(rule) > 1:
                raise ValueError(f"alerts.{kind}[{rule}]: the name is used twice")
            for target in notify:
                if target not in names:
                    raise ValueError(
                        f"alerts.{kind}[{rule}].notify: no notifier named {target!r} "
                        f"(configured: {', '.join(names) or 'none'})"
                    )
        self._routes_fit(names)
        return self

    def _routes_fit(self, names: list[str]) -> None:
        """Each route names configured notifiers and known window rules."""
        known_rules = {r.name for r in self.window_rules()}
        for i, route in enumerate(self.routes):
            where = f"alerts.routes[{i}]"
            for target in route.notify:
                if target not in names:
                    raise ValueError(
                        f"{where}.notify: no notifier named {target!r} "
                        f"(configured: {', '.join(names) or 'none'})"
                    )
            for rule in route.rules:
                if rule not in known_rules:
                    raise ValueError(
                        f"{where}.rules: no window rule named {rule!r} "
                        f"(known: {', '.join(sorted(known_rules)) or 'none'})"
                    )

    def regression_rules(self) -> tuple[RegressionRule, ...]:
        """The release-regression rule: a default, off with `defaults = false`."""
        from observer.alerts.regression import default_regression_rules

        return default_regression_rules() if self.defaults else ()

    def route_list(self) -> tuple[Route, ...]:
        from observer.alerts.rules import Route

        return tuple(Route(r.layer, tuple(r.notify), tuple(r.rules)) for r in self.routes)

    def window_rules(self) -> tuple[WindowRule, ...]:
        """The configured window rules, or the defaults when there are none."""
        from observer.alerts.rules import default_window_rules

        if not self.rules:
            return default_window_rules() if self.defaults else ()
        return tuple(_window_rule(r) for r in self.rules)

    def trace_rule_list(self) -> tuple[TraceRule, ...]:
        from observer.alerts.rules import (
            TraceRule,
            check_trace_rule,
            default_trace_rules,
            parse_expression,
        )

        if not self.trace_rules:
            return default_trace_rules() if self.defaults else ()
        return tuple(
            check_trace_rule(
                TraceRule(
                    name=r.name,
                    expression=parse_expression(r.when, f"alerts.trace_rules[{r.name}].when"),
                    where=tuple(sorted(r.where.items())),
                    max_per_hour=r.max_per_hour,
                    notify=tuple(r.notify),
                    runbook_url=r.runbook_url or None,
                )
            )
            for r in self.trace_rules
        )


def _duration_s(text: str, where: str) -> float:
    from observer.alerts.rules import RuleError
    from observer.times import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as error:
        raise RuleError(f"{where}: {error}") from None


def _window_rule(r: WindowRuleSettings) -> WindowRule:
    from observer.alerts.rules import WindowRule, check_window_rule, parse_expression

    where = f"alerts.rules[{r.name}]"
    return check_window_rule(
        WindowRule(
            name=r.name,
            expression=parse_expression(r.signal, f"{where}.signal"),
            aggregate=r.aggregate,
            op=r.op,
            threshold=r.threshold,
            warn_threshold=r.warn_threshold,
            window_s=_duration_s(r.window, f"{where}.window"),
            min_samples=r.min_samples,
            for_s=_duration_s(r.for_, f"{where}.for"),
            repeat_s=_duration_s(r.repeat, f"{where}.repeat"),
            no_data=r.no_data,
            no_data_for_s=_duration_s(r.no_data_for, f"{where}.no_data_for"),
            group_by=tuple(r.group_by),
            where=tuple(sorted(r.where.items())),
            notify=tuple(r.notify),
            runbook_url=r.runbook_url or None,
        )
    )
