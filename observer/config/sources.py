"""Where settings come from: the TOML file and the environment, as plain data.

`observer.config` validates what this module reads; `observer.config.signals`
validates the three sections `observer score` needs from the same reading.
Precedence, highest first: `OBSERVER_*` variables, the SDKs' own variables
(`LANGFUSE_*`, `OPENAI_*`, ...), the file; tables are merged key by key.

`OBSERVER_<SECTION>__<KEY>` (case-insensitive) sets a key; a value whose key
holds a table, a list or a mapping is JSON, and a list of words may also be
written comma-separated. This is the part of pydantic-settings observer used,
read here instead because importing pydantic-settings alone cost more than
half of `observer score`'s start-up budget (docs/decisions.md).

Nothing here imports pydantic: the models are handed in by the caller, and only
their `model_fields` are read.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

from observer.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

CONFIG_ENV = "OBSERVER_CONFIG"
ENV_PREFIX = "OBSERVER_"
SECRET_KEYS = frozenset({("langfuse", "secret_key"), ("judge", "api_key")})
SIGNAL_SECTIONS = frozenset({"signals", "crag", "band"})  # all `observer score` reads
# Secrets may come from a file named by <VAR>_FILE: the Docker and Kubernetes convention.
SECRET_VARIABLES = ("LANGFUSE_SECRET_KEY", "LANGFUSE_PUBLIC_KEY", "OPENAI_API_KEY")


def config_path(given: str | Path | None) -> Path | None:
    """The file `--config` names, else the one OBSERVER_CONFIG names, else none."""
    if given is None and os.environ.get(CONFIG_ENV):
        given = os.environ[CONFIG_ENV]
    return None if given is None else Path(given)


def names_a_section(environ: Mapping[str, str], sections: frozenset[str]) -> bool:
    """Some OBSERVER_* variable sets one of `sections` or a key of one."""
    for variable in environ:
        if variable.upper().startswith(ENV_PREFIX):
            section = variable[len(ENV_PREFIX) :].lower().split("__")[0]
            if section in sections:
                return True
    return False


def read_toml(path: Path) -> dict[str, Any]:
    """The file's tables; a ConfigError for a file that is missing, unreadable, not TOML,
    or that holds a secret (which never echoes the secret)."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"config file {path} cannot be read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from None
    for section, key in SECRET_KEYS:
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            sdk_name = (
                "OPENAI_API_KEY" if section == "judge" else f"{section.upper()}_{key.upper()}"
            )
            raise ConfigError(
                f"config file {path}: {section}.{key} is a secret; set it in the environment "
                f"(OBSERVER_{section.upper()}__{key.upper()} or {sdk_name}) "
                "instead of the file"
            )
    return data


def read_secret_file(variable: str, environ: Mapping[str, str]) -> str | None:
    """The content of the file `<variable>_FILE` names (stripped), or None when not set."""
    name = environ.get(f"{variable}_FILE")
    if not name:
        return None
    try:
        return Path(name).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ConfigError(f"{variable}_FILE: {name} cannot be read ({reason})") from None


def with_secret_files(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ`, with each secret variable that is unset taken from its `_FILE`."""
    merged = dict(environ)
    for variable in SECRET_VARIABLES:
        if not merged.get(variable):
            value = read_secret_file(variable, environ)
            if value:
                merged[variable] = value
    return merged


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "model_fields")


def _complex(annotation: Any) -> bool:
    """Held as JSON in a variable: a table, a list or a mapping."""
    origin = get_origin(annotation)
    return _is_model(annotation) or origin in (list, dict) or annotation in (list, dict)


def _scalar_list(annotation: Any) -> bool:
    """A list of strings or numbers: what a comma-separated variable can stand for."""
    if get_origin(annotation) is not list:
        return False
    (item,) = get_args(annotation) or (Any,)
    return item in (str, int, float)


def _shape(annotation: Any) -> str:
    if _scalar_list(annotation):
        return "a comma-separated list or a JSON list"
    origin = get_origin(annotation)
    if origin is list:
        return 'a JSON list (for example \'[{"name": "..."}]\')'
    if origin is dict or annotation is dict:
        return 'a JSON object (for example \'{"key": "value"}\')'
    return "JSON"


def _decode(variable: str, annotation: Any, value: str) -> Any:
    if not _complex(annotation):
        return value  # pydantic converts the text as it would the file's value
    try:
        return json.loads(value)
    except ValueError as error:
        if _scalar_list(annotation) and not value.lstrip().startswith(("[", "{")):
            return [item.strip() for item in value.split(",") if item.strip()]
        raise ConfigError(
            f"{variable}: not valid JSON ({error}); it must be {_shape(annotation)}"
        ) from None


def _field(model: Any, name: str) -> Any:
    """The annotation of `model`'s field `name` (by name or alias), or None."""
    if not _is_model(model):
        return None
    for key, info in model.model_fields.items():
        if name in (key, info.alias):
            return info.annotation
    return None


def merge(low: dict[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """`low` updated by `high`, tables merged key by key (lists and values replaced)."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def observer_variables(
    model: Any, environ: Mapping[str, str], sections: frozenset[str] | None = None
) -> dict[str, Any]:
    """The OBSERVER_* variables that name a section of `model` (a pydantic model class),
    as nested data: `OBSERVER_CRAG__HIGH=0.7` is `{"crag": {"high": "0.7"}}` and
    `OBSERVER_CRAG='{"high": 0.7}'` the same table as JSON (the keys beside it win).
    A name that is no section (OBSERVER_CONFIG) is not a setting; an unknown key in a
    section is passed on, so that validation names it. `sections`: only these."""
    found: dict[str, Any] = {}
    whole: dict[str, Any] = {}
    for variable, value in environ.items():
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        path = variable[len(ENV_PREFIX) :].lower().split("__")
        section = path[0]
        if (sections is not None and section not in sections) or _field(model, section) is None:
            continue
        if len(path) == 1:
            whole[section] = _decode(variable, _field(model, section), value)
            continue
        node = found.setdefault(section, {})
        owner: Any = _field(model, section)
        for key in path[1:-1]:
            owner = _field(owner, key)
            child = node.get(key)
            node = node.setdefault(key, {}) if child is None or isinstance(child, dict) else {}
        node[path[-1]] = _decode(variable, _field(owner, path[-1]), value)
    return merge(whole, found)


def sdk_variables(environ: Mapping[str, str]) -> dict[str, Any]:
    """The variables the Langfuse SDK and the OpenAI client read themselves (so one set
    serves both), and the [http] pair a container sets, as sections."""
    env = with_secret_files(environ)
    langfuse: dict[str, Any] = {}
    base_url = env.get("LANGFUSE_BASE_URL") or env.get("LANGFUSE_HOST")
    if base_url:
        langfuse["base_url"] = base_url
    if env.get("LANGFUSE_PUBLIC_KEY"):
        langfuse["public_key"] = env["LANGFUSE_PUBLIC_KEY"]
    if env.get("LANGFUSE_SECRET_KEY"):
        langfuse["secret_key"] = env["LANGFUSE_SECRET_KEY"]
    judge: dict[str, Any] = {}
    judge_url = env.get("OBSERVER_JUDGE_BASE_URL") or env.get("OPENAI_BASE_URL")
    if judge_url:
        judge["base_url"] = judge_url
    if env.get("OBSERVER_JUDGE_MODEL"):
        judge["model"] = env["OBSERVER_JUDGE_MODEL"]
    if env.get("OPENAI_API_KEY"):
        judge["api_key"] = env["OPENAI_API_KEY"]
    out: dict[str, Any] = {}
    http = {
        key: env[name]
        for key, name in (("host", "OBSERVER_HTTP_HOST"), ("port", "OBSERVER_HTTP_PORT"))
        if env.get(name)
    }
    if http:
        out["http"] = http
    if langfuse:
        out["langfuse"] = langfuse
    if judge:
        out["judge"] = judge
    return out


def read_sources(
    model: Any, given: str | Path | None, sections: frozenset[str] | None = None
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(the file's data, everything merged, where it came from) for `model`'s sections.
    The file's data is kept apart: validation errors are located in it."""
    path = config_path(given)
    data = read_toml(path) if path is not None else {}
    origin = f"{path} and environment" if path is not None else "defaults and environment"
    environ = os.environ
    merged = merge(data, sdk_variables(environ))
    merged = merge(merged, observer_variables(model, environ, sections))
    if sections is not None:
        merged = {key: value for key, value in merged.items() if key in sections}
    return data, merged, origin


# Keys that are usually set through the SDKs' own variables: errors name those too.
_SDK_VARIABLES = {
    "langfuse.base_url": "LANGFUSE_BASE_URL",
    "langfuse.public_key": "LANGFUSE_PUBLIC_KEY",
    "judge.base_url": "OBSERVER_JUDGE_BASE_URL or OPENAI_BASE_URL",
    "judge.model": "OBSERVER_JUDGE_MODEL",
}


def _sdk_variable(where: str) -> str:
    """The variable that set a key: LANGFUSE_HOST when only that one is set."""
    only_host = not os.environ.get("LANGFUSE_BASE_URL") and os.environ.get("LANGFUSE_HOST")
    if where == "langfuse.base_url" and only_host:
        return "LANGFUSE_HOST"
    return _SDK_VARIABLES[where]


def _where(loc: tuple[int | str, ...], data: dict[str, Any]) -> str:
    """`alerts.rules[ungrounded_rate_high].threshold` rather than `alerts.rules.0.threshold`."""
    parts: list[str] = []
    node: Any = data
    for part in loc:
        if isinstance(part, int) and parts:
            name = node[part].get("name") if isinstance(node, list) and part < len(node) else None
            named = isinstance(name, str) and name
            parts[-1] += f"[{name}]" if named else f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            continue
        parts.append(str(part))
        node = node.get(part) if isinstance(node, dict) else None
    return ".".join(parts)


def describe(error: ValidationError, origin: str, data: dict[str, Any] | None = None) -> str:
    """A validation error as the lines a person reads: each key where it was set, and
    what is wrong with it; never the rejected value of a secret."""
    lines = [f"invalid configuration ({origin}):"]
    for item in error.errors(include_url=False):
        where = _where(item["loc"], data or {}) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        message = message.removeprefix("Value error, ")
        if message.startswith((f"{where}.", f"{where}[")):
            where, message = message.split(": ", 1) if ": " in message else (where, message)
        if where in _SDK_VARIABLES:
            where = f"{where} ({_sdk_variable(where)})"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)
