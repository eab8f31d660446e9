"""Configuration: file, environment, validation, secrets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from observer.config import ConfigError, load_settings, masked
from observer.signals import CragParams, SignalParams


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "observer.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_spec_defaults() -> None:
    assert load_settings().signal_params() == SignalParams()
    assert SignalParams().crag == CragParams(0.65, 0.25, 0.15, 0.05, "heuristic")
    assert SignalParams().min_chars == 8


def test_file_values_are_read(tmp_path: Path) -> None:
    path = write(tmp_path, '[signals]\nmin_chars = 5\n[crag]\nmode = "disabled"\n')
    params = load_settings(path).signal_params()
    assert params.min_chars == 5
    assert params.crag.mode == "disabled"


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[crag]\nhigh = 0.7\nlow = 0.2\n")
    monkeypatch.setenv("OBSERVER_CRAG__HIGH", "0.8")
    settings = load_settings(path)
    assert (settings.crag.high, settings.crag.low) == (0.8, 0.2)


def test_config_path_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVER_CONFIG", str(write(tmp_path, "[band]\nhigh = 0.9\n")))
    assert load_settings().band.high == 0.9


def test_list_values_from_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVER_SIGNALS__PLEASANTRY_PREFIXES", '["Cheers", "祝好"]')
    params = load_settings().signal_params()
    assert params.pleasantry_prefixes == ("cheers", "祝好")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[crag]\nhigh = 1.5\n", "crag.high"),
        ("[crag]\nhigh = 0.2\nlow = 0.3\n", "must be below crag.high"),
        ("[crag]\nmode = 'llm'\n", "crag.mode"),
        ("[signals]\nmin_chars = 0\n", "signals.min_chars"),
        ("[signals]\nmin_char = 3\n", "signals.min_char: unknown key"),
        ("[nonsense]\nx = 1\n", "nonsense: unknown key"),
        ("[band]\nhigh = 0.5\nmedium = 0.7\n", "band.medium"),
        ("[crag\nhigh = 0.2\n", "not valid TOML"),
    ],
    ids=[
        "out_of_range",
        "low_above_high",
        "bad_mode",
        "min_chars_zero",
        "typo_key",
        "unknown_section",
        "band_order",
        "toml_syntax",
    ],
)
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(write(tmp_path, text))


def test_bad_environment_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVER_SIGNALS__MIN_CHARS", "many")
    with pytest.raises(ConfigError, match=re.escape("signals.min_chars")):
        load_settings()


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_secret_in_the_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[langfuse]\nsecret_key = "sk-lf-leaked"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert "LANGFUSE_SECRET_KEY" in str(caught.value)
    assert "sk-lf-leaked" not in str(caught.value)


def test_langfuse_sdk_variables_are_read_and_the_secret_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-1")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-2")
    monkeypatch.setenv("LANGFUSE_HOST", "http://127.0.0.1:3000")
    settings = load_settings()
    assert settings.langfuse.public_key == "pk-lf-1"
    assert settings.langfuse.base_url == "http://127.0.0.1:3000"
    assert settings.langfuse.secret_key is not None
    assert settings.langfuse.secret_key.get_secret_value() == "sk-lf-2"
    assert "sk-lf-2" not in repr(settings)
    assert masked(settings)["langfuse"]["secret_key"] == "********"


def test_base_url_wins_over_deprecated_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_HOST", "http://old")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://new")
    assert load_settings().langfuse.base_url == "http://new"


def test_judge_reads_the_openai_variables_and_masks_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OBSERVER_JUDGE_MODEL", "gpt-judge")
    settings = load_settings()
    assert (settings.judge.model, settings.judge.base_url) == ("gpt-judge", "http://127.0.0.1:9/v1")
    assert masked(settings)["judge"]["api_key"] == "********"
    assert "sk-openai-secret" not in repr(settings)
    monkeypatch.setenv("OBSERVER_JUDGE_BASE_URL", "http://127.0.0.1:8/v1")
    assert load_settings().judge.base_url == "http://127.0.0.1:8/v1"


def test_judge_enabled_without_a_model_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVER_JUDGE__ENABLED", "true")
    with pytest.raises(ConfigError, match=re.escape("judge.model")):
        load_settings()


def test_judge_key_in_the_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load_settings(write(tmp_path, '[judge]\napi_key = "sk-leak"\n'))


def test_mapping_hook_must_be_importable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot import"):
        load_settings(write(tmp_path, '[mapping]\nhook = "no_such_module_xyz:build"\n'))
    with pytest.raises(ConfigError, match="has no function"):
        load_settings(write(tmp_path, '[mapping]\nhook = "json:no_such_function"\n'))
    assert load_settings(write(tmp_path, '[mapping]\nhook = "json:loads"\n')).mapping_rules().hook


@pytest.mark.parametrize("url", ["127.0.0.1:34589", "cloud.langfuse.com", "ftp://x", "https://"])
def test_base_url_without_a_scheme_is_bad_configuration(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("LANGFUSE_BASE_URL", url)
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "LANGFUSE_BASE_URL" in str(error.value) and "http://" in str(error.value)


def test_base_url_trailing_slash_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://127.0.0.1:3000/")
    assert load_settings().langfuse.base_url == "http://127.0.0.1:3000"


def test_secrets_may_come_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Docker and Kubernetes secrets convention: <VAR>_FILE names a file holding it."""
    (tmp_path / "sk").write_text("sk-lf-from-a-file\n")
    (tmp_path / "openai").write_text("sk-openai-from-a-file")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY_FILE", str(tmp_path / "sk"))
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(tmp_path / "openai"))
    settings = load_settings()
    assert settings.langfuse.secret_key is not None
    assert settings.langfuse.secret_key.get_secret_value() == "sk-lf-from-a-file"
    assert settings.judge.api_key is not None
    assert settings.judge.api_key.get_secret_value() == "sk-openai-from-a-file"
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-variable-wins")
    secret = load_settings().langfuse.secret_key
    assert secret is not None and secret.get_secret_value() == "sk-lf-variable-wins"


def test_an_unreadable_secret_file_names_the_variable_not_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGFUSE_SECRET_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="LANGFUSE_SECRET_KEY_FILE") as error:
        load_settings()
    assert "No such file" in str(error.value)


def _cli(args: list[str]) -> tuple[int, str]:
    from click.testing import CliRunner

    from observer.cli import main

    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("production", ["production"]),
        ("production, staging", ["production", "staging"]),
        ('["production", "staging"]', ["production", "staging"]),
    ],
    ids=["one_word", "comma_separated", "json"],
)
def test_a_list_variable_may_be_written_comma_separated(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: list[str]
) -> None:
    monkeypatch.setenv("OBSERVER_SOURCE__ENVIRONMENTS", value)
    code, output = _cli(["config", "show"])
    assert code == 0, output
    shown = re.search(r"environments = \[(.*?)\]", output, re.S)
    assert shown is not None and re.findall(r'"([^"]+)"', shown.group(1)) == expected


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("OBSERVER_ALERTS__RULES", "[{", "it must be a JSON list"),
        ("OBSERVER_SOURCE__ENVIRONMENTS", '["a"', "a comma-separated list or a JSON list"),
    ],
    ids=["rules", "broken_json_list"],
)
def test_a_bad_complex_variable_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    for args in (["config", "show"], ["check"], ["run", "--once"]):
        code, output = _cli(args)
        assert code == 2, (args, output)
        assert f"observer: {variable}: not valid JSON" in output and says in output
        assert "Traceback" not in output


def test_an_error_in_the_host_names_the_variable_that_was_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LANGFUSE_BASE_URL", raising=False)
    monkeypatch.setenv("LANGFUSE_HOST", "localhost:3000")
    code, output = _cli(["config", "show"])
    assert code == 2
    assert "langfuse.base_url (LANGFUSE_HOST): must be an http:// or https:// URL" in output
    assert "LANGFUSE_BASE_URL" not in output


def test_a_base_url_with_the_api_path_says_what_it_must_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGFUSE_BASE_URL", "https://langfuse.example.com/api/public/")
    code, output = _cli(["config", "show"])
    assert code == 2
    assert (
        "langfuse.base_url (LANGFUSE_BASE_URL): must be Langfuse's base URL, without "
        "/api/public: 'https://langfuse.example.com', not" in output
    )


def _documented() -> dict[str, str]:
    """`section.key` -> the default column of docs/configuration.md's reference tables."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+\.[a-z_0-9]+)` \| (.+?) \|", text, re.M)
    return dict(rows)


def _shown(value: object) -> str:
    import json

    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def test_the_configuration_reference_lists_every_key_with_its_default() -> None:
    """docs/configuration.md, billed as every key, says what the settings models hold."""
    from observer.config import Settings

    documented = _documented()
    settings = Settings()
    expected: dict[str, str] = {}
    for section, info in Settings.model_fields.items():
        model = getattr(settings, section)
        if model is None:  # an optional section ([fleet]): its defaults once present
            (model_type,) = (t for t in get_args(info.annotation) if t is not type(None))
            model = model_type()
        for key in type(model).model_fields:
            value = getattr(model, key)
            if isinstance(value, list) and value and not isinstance(value[0], str | int | float):
                continue  # lists of tables ([[alerts.rules]]) have their own rows
            if section == "alerts" and key in ("rules", "trace_rules", "notifiers", "routes"):
                continue
            expected[f"{section}.{key}"] = _shown(
                value.get_secret_value() if hasattr(value, "get_secret_value") else value
            )
    missing = sorted(set(expected) - set(documented))
    unknown = sorted(set(documented) - set(expected))
    assert missing == [] and unknown == [], (missing, unknown)
    # Defaults: as the models have them (a long word list may be abbreviated in the docs).
    wrong = {
        key: (documented[key], shown)
        for key, shown in expected.items()
        if documented[key].replace(".0`", "`") != shown.replace(".0`", "`")
        and key not in ("signals.abbreviations", "signals.refusal_phrases", "band.medium")
    }
    assert wrong == {}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "[source]\npoll_intervall_s = 5\n",
            "  source.poll_intervall_s: unknown key; did you mean poll_interval_s?",
        ),
        ("[sorce]\npoll_interval_s = 5\n", "  sorce: unknown key; did you mean source?"),
        (
            '[[alerts.notifiers]]\nname = "pd"\nkind = "pagerduty"\nsecrt_env = "PD"\n',
            "  alerts.notifiers[pd].secrt_env: unknown key; did you mean secret_env?",
        ),
        ("[crag]\nnothing_like_it = 1\n", "  crag.nothing_like_it: unknown key"),
    ],
    ids=["key", "section", "list_of_tables", "no_close_key"],
)
def test_a_misspelled_key_in_the_file_is_named_with_the_one_it_meant(
    tmp_path: Path, text: str, line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(write(tmp_path, text))
    assert line in str(raised.value).splitlines()


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("LANGFUSE_BASEURL", "LANGFUSE_BASE_URL"),  # the JS SDK v3's name
        ("LANGFUSE_PUBLICKEY", "LANGFUSE_PUBLIC_KEY"),
        ("LANGFUSE_SECRET", "LANGFUSE_SECRET_KEY"),
        ("langfuse_base_url", "LANGFUSE_BASE_URL"),  # the SDK reads upper case only
    ],
)
def test_a_close_miss_of_a_langfuse_variable_is_named_not_silently_a_default(
    monkeypatch: pytest.MonkeyPatch, variable: str, meant: str
) -> None:
    """Without it the base URL would silently be Langfuse Cloud, or a key unset."""
    monkeypatch.setenv(variable, "https://langfuse.internal")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert (
        f"  {variable}: observer reads no such variable; did you mean {meant}?"
        in str(raised.value).splitlines()
    )
    assert "langfuse.internal" not in str(raised.value)


def test_the_sdks_own_variables_and_a_miss_whose_meaning_is_set_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("LANGFUSE_RELEASE", "LANGFUSE_TRACING_ENVIRONMENT", "LANGFUSE_TIMEOUT"):
        monkeypatch.setenv(variable, "x")
    monkeypatch.setenv("LANGFUSE_APP_REGION", "eu")  # the app's own, close to nothing
    load_settings()
    monkeypatch.setenv("LANGFUSE_BASEURL", "https://a.example")  # and LANGFUSE_HOST is set
    monkeypatch.setenv("LANGFUSE_HOST", "https://b.example")
    assert load_settings().langfuse.base_url == "https://b.example"


@pytest.mark.parametrize(
    ("public", "secret", "said"),
    [
        ("sk-lf-aaaa1111bbbb2222", "pk-lf-cccc3333dddd4444", "are swapped"),
        ("sk-lf-aaaa1111bbbb2222", "sk-lf-cccc3333dddd4444", "this is a secret key"),
        ("pk-lf-aaaa1111bbbb2222", "pk-lf-cccc3333dddd4444", "this is a public key"),
    ],
    ids=["swapped", "secret_as_public", "public_as_secret"],
)
def test_keys_in_each_others_place_are_refused_by_shape_without_their_values(
    monkeypatch: pytest.MonkeyPatch, public: str, secret: str, said: str
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", public)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", secret)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert said in message and "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY" in message
    for value in (public, secret, public[-8:], secret[-8:]):
        assert value not in message


def test_config_show_prints_the_public_key_by_its_shape_and_urls_without_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-0123456789abcdef")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-fedcba9876543210")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "https://proxy:hunter2@langfuse.internal")
    shown = masked(load_settings())["langfuse"]
    assert shown == {
        "base_url": "https://langfuse.internal",
        "public_key": "pk-lf-…cdef",
        "secret_key": "********",
    }
