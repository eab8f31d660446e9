"""Where the settings come from: the file and the variables, read as pydantic-settings
read them for observer (OBSERVER_<SECTION>__<KEY>, JSON for tables and lists), and the
signals' three sections alone for `observer score`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observer.config import ConfigError, Settings, load_settings
from observer.config.signals import load_signal_params
from observer.config.sources import merge, observer_variables
from tests.budget import scaled


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"OBSERVER_CRAG__HIGH": "0.7"}, {"crag": {"high": "0.7"}}),
        ({"observer_crag__high": "0.7"}, {"crag": {"high": "0.7"}}),  # any case
        ({"OBSERVER_CRAG": '{"high": 0.7, "low": 0.1}'}, {"crag": {"high": 0.7, "low": 0.1}}),
        (  # the key beside the table wins
            {"OBSERVER_CRAG": '{"high": 0.7, "low": 0.1}', "OBSERVER_CRAG__LOW": "0.2"},
            {"crag": {"high": 0.7, "low": "0.2"}},
        ),
        ({"OBSERVER_SOURCE__ENVIRONMENTS": "a, b"}, {"source": {"environments": ["a", "b"]}}),
        ({"OBSERVER_SOURCE__ENVIRONMENTS": '["a"]'}, {"source": {"environments": ["a"]}}),
        ({"OBSERVER_ALERTS__RULES": "[]"}, {"alerts": {"rules": []}}),
        ({"OBSERVER_FLEET": '{"name": "a"}'}, {"fleet": {"name": "a"}}),  # an optional section
        ({"OBSERVER_CRAG__HIHG": "1"}, {}),  # unknown: named before validation
        ({"OBSERVER_CONFIG": "x.toml", "OBSERVER_JUDGE_MODEL": "m"}, {}),  # not sections
        ({"OBSERVER_HTTP_PORT": "1", "LANGFUSE_HOST": "h"}, {}),
    ],
    ids=[
        "key",
        "lower_case",
        "table_as_json",
        "key_beats_table",
        "comma_list",
        "json_list",
        "list_of_tables",
        "optional_section_as_json",
        "unknown_key_left_out",
        "no_section",
        "sdk_variables_elsewhere",
    ],
)
def test_observer_variables_as_nested_data(
    environ: dict[str, str], expected: dict[str, object]
) -> None:
    assert observer_variables(Settings, environ).values == expected


def test_each_key_is_remembered_with_the_variable_that_set_it() -> None:
    environ = {"OBSERVER_CRAG": '{"high": 0.7, "low": 0.1}', "observer_crag__low": "0.2"}
    environ |= {"OBSERVER_ALERTS__RULES": '[{"name": "a"}]', "OBSERVER_CRGA__HIGH": "1"}
    found = observer_variables(Settings, environ)
    assert found.set_by == {
        ("crag", "high"): "OBSERVER_CRAG",
        ("crag", "low"): "observer_crag__low",
        ("alerts", "rules"): "OBSERVER_ALERTS__RULES",
    }
    assert found.unknown == (("OBSERVER_CRGA__HIGH", "OBSERVER_CRAG__HIGH"),)


def test_a_bad_json_variable_names_itself() -> None:
    with pytest.raises(ConfigError, match=r"OBSERVER_CRAG: not valid JSON .*it must be JSON"):
        observer_variables(Settings, {"OBSERVER_CRAG": "high=1"})


def test_merge_replaces_lists_and_merges_tables() -> None:
    low = {"crag": {"high": 0.7, "low": 0.1}, "source": {"tags": ["a", "b"]}}
    high = {"crag": {"low": 0.2}, "source": {"tags": ["c"]}}
    assert merge(low, high) == {"crag": {"high": 0.7, "low": 0.2}, "source": {"tags": ["c"]}}


def test_score_reads_its_sections_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "observer.toml"
    path.write_text("[crag]\nhigh = 0.7\n[judge]\nrate = 7\n[nonsense]\nx = 1\n")
    monkeypatch.setenv("OBSERVER_BAND__MEDIUM", "0.5")
    params = load_signal_params(path)
    assert (params.crag.high, params.band_medium) == (0.7, 0.5)
    with pytest.raises(ConfigError, match=r"judge\.rate"):
        load_settings(path)  # the daemon's reading refuses what score leaves alone


def test_score_names_a_bad_key_of_its_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVER_SIGNALS__MIN_CHARS", "many")
    with pytest.raises(ConfigError, match=r"defaults and environment\):\n  signals.min_chars"):
        load_signal_params()


_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "OBSERVER_SIGNALS__MIN_CHARS": st.sampled_from(["1", "8", "30", "0", "x"]),
        "OBSERVER_SIGNALS__ABBREVIATIONS": st.sampled_from(["e.g., i.e.", '["dr."]', "[x"]),
        "OBSERVER_CRAG__HIGH": st.sampled_from(["0.5", "0.9", "1.2"]),
        "OBSERVER_CRAG__LOW": st.sampled_from(["0.1", "0.6"]),
        "OBSERVER_CRAG__MODE": st.sampled_from(["heuristic", "disabled", "llm"]),
        "OBSERVER_CRAG": st.sampled_from(['{"high_gap": 0.2}', '{"mode": "disabled"}']),
        "OBSERVER_BAND__HIGH": st.sampled_from(["0.9", "0.4"]),
        "OBSERVER_BAND__MEDIUM": st.sampled_from(["0.5", "0.95"]),
    },
)
_FILES = st.sampled_from(
    ["", "[crag]\nhigh = 0.8\n", "[band]\nmedium = 0.3\n", "[signals]\nmin_chars = 3\n"]
)


# A third of the profile's examples: each writes a config file and reads it twice.
@settings(scaled(0.3), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(environ=_VALUES, text=_FILES)
def test_score_sees_what_the_daemon_sees(
    environ: dict[str, str], text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same parameters, or the same error, from both readings of one configuration."""
    path = tmp_path / "observer.toml"
    path.write_text(text)
    for name in [n for n in os.environ if n.startswith("OBSERVER_")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    try:
        expected: object = load_settings(path).signal_params()
    except ConfigError as error:
        expected = str(error)
    try:
        got: object = load_signal_params(path)
    except ConfigError as error:
        got = str(error)
    assert got == expected


def test_score_with_nothing_set_runs_on_the_defaults_the_models_hold() -> None:
    from observer.app.score_file import signal_params_for

    assert signal_params_for(None) == load_signal_params(None) == load_settings().signal_params()


@pytest.mark.parametrize(
    "variable", ["OBSERVER_CRAG__HIGH", "OBSERVER_BAND", "observer_signals__min_chars"]
)
def test_score_reads_a_variable_for_its_sections(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    from observer.app.score_file import signal_params_for

    monkeypatch.setenv(variable, "not a value")
    with pytest.raises(ConfigError):
        signal_params_for(None)


def test_score_reads_the_file_it_is_given(tmp_path: Path) -> None:
    from observer.app.score_file import signal_params_for

    path = tmp_path / "observer.toml"
    path.write_text("[crag]\nhigh = 0.9\n")
    assert signal_params_for(path).crag.high == 0.9


def test_score_validates_exactly_the_sections_it_reads() -> None:
    from observer.config.signals import _SignalSections
    from observer.config.sources import SIGNAL_SECTIONS

    assert set(_SignalSections.model_fields) == SIGNAL_SECTIONS
