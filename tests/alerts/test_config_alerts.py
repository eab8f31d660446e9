"""The [alerts] section of the config file: rules, trace rules, notifiers, secrets."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from observer.alerts.rules import (
    Expression,
    TraceRule,
    WindowRule,
    default_trace_rules,
    default_window_rules,
)
from observer.cli import main
from observer.config import ConfigError, NotifierSettings, load_settings

# The documented contract, as a user writes it.
CONTRACT = """
[[alerts.rules]]
name = "ungrounded_rate_high"
signal = "ungrounded"
aggregate = "rate"
op = ">"
threshold = 0.05
warn_threshold = 0.03
window = "15m"
min_samples = 50
for = "2m"
repeat = "4h"
no_data = "keep"
no_data_for = "30m"
group_by = ["environment", "query_type"]
where = { environment = "production" }
notify = ["oncall"]
runbook_url = "https://wiki.example.com/rag/ungrounded"

[[alerts.rules]]
name = "low_band"
signal = "confidence_band == LOW"
aggregate = "rate"
threshold = 0.3

[[alerts.trace_rules]]
name = "critical_claim_unsupported"
when = "critical_unsupported"
where = { query_type = "billing" }
max_per_hour = 20
notify = ["oncall"]

[[alerts.notifiers]]
name = "oncall"
kind = "alertmanager"
url = "http://127.0.0.1:9093"
secret_env = ""
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "observer.toml"
    path.write_text(text)
    return path


def test_the_contract_loads_into_rules(tmp_path: Path) -> None:
    alerts = load_settings(write(tmp_path, CONTRACT)).alerts
    assert alerts.window_rules() == (
        WindowRule(
            name="ungrounded_rate_high",
            expression=Expression("ungrounded"),
            aggregate="rate",
            op=">",
            threshold=0.05,
            warn_threshold=0.03,
            window_s=900.0,
            min_samples=50,
            for_s=120.0,
            repeat_s=14400.0,
            no_data="keep",
            no_data_for_s=1800.0,
            group_by=("environment", "query_type"),
            where=(("environment", "production"),),
            notify=("oncall",),
            runbook_url="https://wiki.example.com/rag/ungrounded",
        ),
        # The documented defaults of every optional key.
        WindowRule(
            name="low_band",
            expression=Expression("confidence_band", "==", "LOW"),
            aggregate="rate",
            op=">",
            threshold=0.3,
            warn_threshold=None,
            window_s=900.0,
            min_samples=1,
            for_s=0.0,
            repeat_s=14400.0,
            no_data="keep",
            no_data_for_s=1800.0,
            group_by=("environment", "query_type"),
            where=(),
            notify=(),
            runbook_url=None,
        ),
    )
    assert alerts.trace_rule_list() == (
        TraceRule(
            name="critical_claim_unsupported",
            expression=Expression("critical_unsupported"),
            where=(("query_type", "billing"),),
            max_per_hour=20,
            notify=("oncall",),
        ),
    )
    (notifier,) = alerts.notifiers
    assert (notifier.name, notifier.kind, notifier.url) == (
        "oncall",
        "alertmanager",
        "http://127.0.0.1:9093",
    )
    assert alerts.max_groups == 50


def test_no_rules_configured_means_the_defaults(tmp_path: Path) -> None:
    notifier_only = '[[alerts.notifiers]]\nname = "hook"\nkind = "webhook"\nurl = "http://x"\n'
    alerts = load_settings(write(tmp_path, notifier_only)).alerts
    assert alerts.window_rules() == default_window_rules()
    assert alerts.trace_rule_list() == default_trace_rules()
    assert len(alerts.window_rules()) == 14  # the table of docs/alerts.md


def test_defaults_false_means_no_rules_at_all(tmp_path: Path) -> None:
    alerts = load_settings(write(tmp_path, "[alerts]\ndefaults = false\n")).alerts
    assert alerts.window_rules() == ()
    assert alerts.trace_rule_list() == ()


def test_configured_rules_replace_the_defaults(tmp_path: Path) -> None:
    text = '[[alerts.rules]]\nname = "mine"\nsignal = "lag_s"\naggregate = "max"\nthreshold = 60\n'
    alerts = load_settings(write(tmp_path, text)).alerts
    assert [r.name for r in alerts.window_rules()] == ["mine"]
    # Trace rules are a list of their own: none configured, the default applies.
    assert alerts.trace_rule_list() == default_trace_rules()


def window_rule(name: str = "r", **keys: str) -> str:
    lines = {"signal": '"ungrounded"', "aggregate": '"rate"', "threshold": "0.05", **keys}
    body = "".join(f"{key} = {value}\n" for key, value in lines.items())
    return f'[[alerts.rules]]\nname = "{name}"\n{body}\n'


def notifier(name: str, kind: str, **keys: str) -> str:
    body = "".join(f"{key} = {value}\n" for key, value in keys.items())
    return f'[[alerts.notifiers]]\nname = "{name}"\nkind = "{kind}"\n{body}\n'


HOOK = notifier("hook", "webhook", url='"http://127.0.0.1:9"')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            window_rule("r", signal='"groundedness"'),
            "alerts.rules[r].signal: unknown signal 'groundedness'",
        ),
        (
            window_rule("r", signal='"faithfulness"'),
            "alerts.rules[r].aggregate: rate needs a flag",
        ),
        (
            window_rule("r", signal='"crag_grade"', aggregate='"mean"'),
            "alerts.rules[r].signal: crag_grade is a category",
        ),
        (window_rule("r", window='"15 minutes"'), "alerts.rules[r].window: not a duration"),
        (window_rule("r", **{"for": '"2x"'}), "alerts.rules[r].for: not a duration: '2x'"),
        (window_rule("r", repeat='"-1h"'), "alerts.rules[r].repeat: not a duration"),
        (
            window_rule("r", window='"99999999999w"'),
            "alerts.rules[r].window: not a duration: '99999999999w' is too long",
        ),
        (window_rule("r", no_data_for='"soon"'), "alerts.rules[r].no_data_for: not a duration"),
        (
            window_rule("r", warn_threshold="0.08"),
            "alerts.rules[r].warn_threshold: 0.08 must be crossed before threshold 0.05",
        ),
        (window_rule("r", op='"~"'), "alerts.rules[r].op: '~' is not one of"),
        (window_rule("r", no_data='"page"'), "alerts.rules[r].no_data: 'page' is not keep"),
        (window_rule("r", group_by='["tenant"]'), "alerts.rules[r].group_by: 'tenant'"),
        (window_rule("r", where='{ tenant = "a" }'), "alerts.rules[r].where: 'tenant'"),
        (
            window_rule(
                "lag",
                signal='"lag_s"',
                aggregate='"max"',
                threshold="600",
                where='{ environment = "production" }',
            ),
            "alerts.rules[lag].where: lag_s is a sample of the daemon",
        ),
        (
            window_rule("r", notify='["pager"]') + HOOK,
            "alerts.rules[r].notify: no notifier named 'pager' (configured: hook)",
        ),
        (
            window_rule("r", notify='["pager"]'),
            "alerts.rules[r].notify: no notifier named 'pager' (configured: none)",
        ),
        (
            '[[alerts.trace_rules]]\nname = "t"\nwhen = "critical_unsupported"\n'
            'notify = ["pager"]\n' + HOOK,
            "alerts.trace_rules[t].notify: no notifier named 'pager'",
        ),
        (
            '[[alerts.trace_rules]]\nname = "t"\nwhen = "faithfulness"\n',
            "alerts.trace_rules[t].when: faithfulness is not a flag",
        ),
        (
            '[[alerts.trace_rules]]\nname = "t"\nwhen = "ungrounded"\nmax_per_hour = 0\n',
            "alerts.trace_rules[t].max_per_hour: must be at least 1",
        ),
        (
            window_rule("twice") + window_rule("twice"),
            "alerts.rules[twice]: the name is used twice",
        ),
        (
            window_rule("both") + '[[alerts.trace_rules]]\nname = "both"\nwhen = "ungrounded"\n',
            "alerts.rules[both]: the name is used twice",
        ),
        (HOOK + HOOK, "alerts.notifiers: the name 'hook' is used twice"),
        (
            notifier("hook", "webhook"),
            "alerts.notifiers[hook].url: a webhook notifier needs a url",
        ),
        (
            notifier("am", "alertmanager", secret_env='"AM_TOKEN"'),
            "alerts.notifiers[am].url: a alertmanager notifier needs a url",
        ),
        (
            notifier("pd", "pagerduty"),
            "alerts.notifiers[pd].secret_env: name the environment variable holding the "
            "routing key",
        ),
        (
            notifier("chat", "slack", url='"https://hooks.slack.com/x"'),
            "alerts.notifiers[chat].secret_env: name the environment variable holding the "
            "webhook URL",
        ),
    ],
    ids=[
        "unknown_signal",
        "rate_of_a_number",
        "bare_category",
        "bad_window",
        "bad_for",
        "negative_repeat",
        "window_beyond_any_clock",
        "bad_no_data_for",
        "warn_after_threshold",
        "bad_op",
        "bad_no_data",
        "bad_group_by",
        "bad_where",
        "where_on_the_daemons_lag",
        "notify_unknown_notifier",
        "notify_without_notifiers",
        "trace_rule_notify_unknown",
        "trace_rule_not_a_flag",
        "trace_rule_no_cap",
        "duplicate_rule",
        "window_and_trace_rule_share_a_name",
        "duplicate_notifier",
        "webhook_without_url",
        "alertmanager_without_url",
        "pagerduty_without_secret",
        "slack_without_secret",
    ],
)
def test_a_bad_rule_or_notifier_names_itself_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(write(tmp_path, text))


# -- secrets of notifiers ------------------------------------------------------


def pagerduty(secret_env: str = "PD_ROUTING_KEY") -> NotifierSettings:
    return NotifierSettings(name="pd", kind="pagerduty", secret_env=secret_env)


def test_notifier_secret_from_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PD_ROUTING_KEY", "R0UT1NG")
    assert load_settings().notifier_secret(pagerduty()) == "R0UT1NG"


def test_notifier_secret_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "routing_key"
    secret.write_text("R0UT1NG-FROM-FILE\n")
    monkeypatch.delenv("PD_ROUTING_KEY", raising=False)
    monkeypatch.setenv("PD_ROUTING_KEY_FILE", str(secret))
    assert load_settings().notifier_secret(pagerduty()) == "R0UT1NG-FROM-FILE"


def test_the_variable_wins_over_the_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "routing_key"
    secret.write_text("from-file")
    monkeypatch.setenv("PD_ROUTING_KEY", "from-variable")
    monkeypatch.setenv("PD_ROUTING_KEY_FILE", str(secret))
    assert load_settings().notifier_secret(pagerduty()) == "from-variable"


def test_a_missing_secret_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PD_ROUTING_KEY", raising=False)
    monkeypatch.delenv("PD_ROUTING_KEY_FILE", raising=False)
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "alerts.notifiers[pd].secret_env: the environment variable PD_ROUTING_KEY is not set"
        ),
    ):
        load_settings().notifier_secret(pagerduty())


def test_an_unreadable_secret_file_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PD_ROUTING_KEY", raising=False)
    monkeypatch.setenv("PD_ROUTING_KEY_FILE", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=re.escape("PD_ROUTING_KEY_FILE")) as raised:
        load_settings().notifier_secret(pagerduty())
    assert "cannot be read" in str(raised.value)


def test_an_empty_secret_file_is_a_missing_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "routing_key"
    secret.write_text("\n")
    monkeypatch.delenv("PD_ROUTING_KEY", raising=False)
    monkeypatch.setenv("PD_ROUTING_KEY_FILE", str(secret))
    with pytest.raises(ConfigError, match="PD_ROUTING_KEY is not set"):
        load_settings().notifier_secret(pagerduty())


def test_a_notifier_without_secret_env_has_no_secret() -> None:
    hook = NotifierSettings(name="hook", kind="webhook", url="http://x")
    assert load_settings().notifier_secret(hook) is None


# -- config show -----------------------------------------------------------------


def test_config_show_writes_for_as_the_file_does(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT)
    shown = CliRunner().invoke(main, ["config", "show", "--config", str(path)])
    assert shown.exit_code == 0, shown.output
    assert 'for = "2m"' in shown.stdout
    assert "for_" not in shown.stdout
    rules = tomllib.loads(shown.stdout)["alerts"]["rules"]
    assert rules[0]["for"] == "2m" and rules[1]["for"] == "0s"
    # What it prints reads back into the same rules.
    again = tmp_path / "shown.toml"
    again.write_text(shown.stdout)
    assert load_settings(again).alerts.window_rules() == load_settings(path).alerts.window_rules()


def test_a_field_error_names_the_rule_not_its_index(tmp_path: Path) -> None:
    path = tmp_path / "observer.toml"
    path.write_text(
        '[[alerts.rules]]\nname = "first"\nsignal = "ungrounded"\nthreshold = 0.1\n'
        '[[alerts.rules]]\nname = "mine"\nsignal = "ungrounded"\nthresold = 0.1\n'
    )
    with pytest.raises(ConfigError) as error:
        load_settings(path)
    assert "alerts.rules[mine].threshold: Field required" in str(error.value)
    assert "alerts.rules[mine].thresold: unknown key" in str(error.value)
