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

An `OBSERVER_*` variable observer does not read is an error, as an unknown key in
the file is, named with the variable it probably meant; left alone are the ones
others read (`NOT_OURS`), those a `secret_env` key names, and the ones Kubernetes
sets for a Service named observer (`OBSERVER_SERVICE_HOST`, `OBSERVER_PORT_...`).
Each value read is remembered with the variable that set it (`Sources.set_by`), so
that a validation error names the variable, not only the key.

Nothing here imports pydantic: the models are handed in by the caller, and only
their `model_fields` are read.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

from observer.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

CONFIG_ENV = "OBSERVER_CONFIG"
ENV_PREFIX = "OBSERVER_"
SECRET_KEYS = frozenset({("langfuse", "secret_key"), ("judge", "api_key")})
SIGNAL_SECTIONS = frozenset({"signals", "crag", "band"})  # all `observer score` reads
# Secrets may come from a file named by <VAR>_FILE: the Docker and Kubernetes convention.
SECRET_VARIABLES = ("LANGFUSE_SECRET_KEY", "LANGFUSE_PUBLIC_KEY", "OPENAI_API_KEY")
# The OBSERVER_* variables observer reads beside OBSERVER_<SECTION>[__<KEY>].
OWN_VARIABLES = (
    CONFIG_ENV,
    "OBSERVER_JUDGE_BASE_URL",
    "OBSERVER_JUDGE_MODEL",
    "OBSERVER_HTTP_HOST",
    "OBSERVER_HTTP_PORT",
)
# The Langfuse SDK's variables (langfuse 5): set, each is left alone; a LANGFUSE_* variable
# that is none of them but close to one observer reads (LANGFUSE_BASEURL) is named with
# the one it probably meant, unless that one is set, as an unknown OBSERVER_* one is.
LANGFUSE_SDK_VARIABLES = frozenset(
    {
        "LANGFUSE_BASE_URL",
        "LANGFUSE_DEBUG",
        "LANGFUSE_FLUSH_AT",
        "LANGFUSE_FLUSH_INTERVAL",
        "LANGFUSE_HOST",
        "LANGFUSE_MAX_BATCH_SIZE_BYTES",
        "LANGFUSE_MEDIA_UPLOAD_ENABLED",
        "LANGFUSE_MEDIA_UPLOAD_THREAD_COUNT",
        "LANGFUSE_OBSERVE_DECORATOR_IO_CAPTURE_ENABLED",
        "LANGFUSE_OPENAI_SKIP_RAW_RESPONSES",
        "LANGFUSE_OTEL_COMPRESSION",
        "LANGFUSE_OTEL_MAX_BATCH_SIZE_BYTES",
        "LANGFUSE_OTEL_TRACES_EXPORT_PATH",
        "LANGFUSE_PROMPT_CACHE_DEFAULT_TTL_SECONDS",
        "LANGFUSE_PUBLIC_KEY",
        "LANGFUSE_RELEASE",
        "LANGFUSE_SAMPLE_RATE",
        "LANGFUSE_SECRET_KEY",
        "LANGFUSE_TIMEOUT",
        "LANGFUSE_TRACING_ENABLED",
        "LANGFUSE_TRACING_ENVIRONMENT",
    }
)
# The LANGFUSE_* variables observer reads, by the key each sets.
_LANGFUSE_READ = {
    "LANGFUSE_BASE_URL": ("langfuse", "base_url"),
    "LANGFUSE_HOST": ("langfuse", "base_url"),
    "LANGFUSE_PUBLIC_KEY": ("langfuse", "public_key"),
    "LANGFUSE_SECRET_KEY": ("langfuse", "secret_key"),
}
# OBSERVER_* variables something else reads in observer's environment: not reported.
NOT_OURS = frozenset(
    {"OBSERVER_REQUIRE_SERVERS"}  # the test suite's switch (.ci/run): a missing server fails
)
# What Kubernetes puts in every pod for each Service of its namespace (service links):
# deploy/kubernetes has Services named observer and observer-fleet.
_SERVICE_LINK = re.compile(
    r"OBSERVER(_[A-Z0-9_]+?)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?"
    r"|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)"
)


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


def _unwrap(annotation: Any) -> Any:
    """`X` for `X | None` (an optional section, such as [fleet]); else `annotation`."""
    if get_origin(annotation) in (Union, UnionType):
        kinds = [kind for kind in get_args(annotation) if kind is not NoneType]
        if len(kinds) == 1:
            return kinds[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "model_fields")


def _complex(annotation: Any) -> bool:
    """Held as JSON in a variable: a table, a list or a mapping."""
    annotation = _unwrap(annotation)
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
    model = _unwrap(model)
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


KeyPath = tuple[str, ...]  # a key's place: ("source", "poll_interval_s")


@dataclass(frozen=True)
class FromEnvironment:
    """The OBSERVER_* variables that set something, and those observer does not read."""

    values: dict[str, Any]  # as nested data, the key beside a table winning
    set_by: dict[KeyPath, str]  # each key set, with the variable that set it
    unknown: tuple[tuple[str, str | None], ...]  # (variable, the one it probably meant)


def _record(set_by: dict[KeyPath, str], path: KeyPath, value: Any, variable: str) -> None:
    """`variable` set `path`: each key of a table, as tables are merged key by key."""
    if isinstance(value, dict):
        for key, item in value.items():
            _record(set_by, (*path, str(key)), item, variable)
    else:
        set_by[path] = variable


def _known_path(model: Any, path: list[str]) -> bool:
    """`path` names a key of `model` (any key below a mapping)."""
    owner = model
    for key in path:
        owner = _unwrap(owner)
        if owner is dict or get_origin(owner) is dict:
            return True
        owner = _field(owner, key)
        if owner is None:
            return False
    return True


def known_variables(model: Any) -> list[str]:
    """Every variable observer reads for `model`'s sections: OBSERVER_<SECTION>, each
    OBSERVER_<SECTION>__<KEY>, and OWN_VARIABLES."""
    names = list(OWN_VARIABLES)
    for section, info in model.model_fields.items():
        names.append(f"{ENV_PREFIX}{section.upper()}")
        inner = _unwrap(info.annotation)
        if _is_model(inner):
            names += [f"{ENV_PREFIX}{section.upper()}__{key.upper()}" for key in inner.model_fields]
    return names


def meant(variable: str, known: list[str]) -> str | None:
    """The known variable `variable` is probably a misspelling of, or None."""
    import difflib  # only on the way to an error: `observer score` starts without it

    rest = variable.upper()[len(ENV_PREFIX) :]
    close = difflib.get_close_matches(rest, [n[len(ENV_PREFIX) :] for n in known], 1, 0.75)
    return ENV_PREFIX + close[0] if close else None


def langfuse_near_misses(
    environ: Mapping[str, str], set_by: Mapping[KeyPath, str]
) -> list[tuple[str, str]]:
    """LANGFUSE_* variables the SDK does not read, each close to one observer reads whose
    key nothing set (`set_by`): (variable, the one it probably meant). Without it the
    key would silently keep its default (Langfuse Cloud, or no key)."""
    import difflib  # only when a LANGFUSE_* variable is unknown

    found = []
    for variable in environ:
        if not variable.upper().startswith("LANGFUSE_") or variable in LANGFUSE_SDK_VARIABLES:
            continue
        if variable.upper().removesuffix("_FILE") in SECRET_VARIABLES:
            continue  # LANGFUSE_SECRET_KEY_FILE: read by observer
        close = difflib.get_close_matches(variable.upper(), list(_LANGFUSE_READ), 1, 0.8)
        if close and _LANGFUSE_READ[close[0]] not in set_by:
            found.append((variable, close[0]))
    return sorted(found)


def _not_ours(variable: str) -> bool:
    name = variable.upper()
    return name in NOT_OURS or name in OWN_VARIABLES or bool(_SERVICE_LINK.fullmatch(name))


def observer_variables(
    model: Any, environ: Mapping[str, str], sections: frozenset[str] | None = None
) -> FromEnvironment:
    """The OBSERVER_* variables that set a key of `model` (a pydantic model class), as
    nested data: `OBSERVER_CRAG__HIGH=0.7` is `{"crag": {"high": "0.7"}}` and
    `OBSERVER_CRAG='{"high": 0.7}'` the same table as JSON (the keys beside it win).
    A variable naming no key of `model` is `unknown`, with the one it probably meant,
    unless observer reads it elsewhere or something else does (`_not_ours`).
    `sections`: only these are read, and every other variable is left alone."""
    found: dict[str, Any] = {}
    whole: dict[str, Any] = {}
    whole_by: dict[KeyPath, str] = {}
    key_by: dict[KeyPath, str] = {}
    strays: list[str] = []
    for variable, value in environ.items():
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        path = variable[len(ENV_PREFIX) :].lower().split("__")
        section = path[0]
        if sections is not None and section not in sections:
            continue
        if _field(model, section) is None or not _known_path(model, path):
            if not _not_ours(variable):
                strays.append(variable)
            continue
        if len(path) == 1:
            whole[section] = _decode(variable, _field(model, section), value)
            _record(whole_by, (section,), whole[section], variable)
            continue
        node = found.setdefault(section, {})
        owner: Any = _field(model, section)
        for key in path[1:-1]:
            owner = _field(owner, key)
            child = node.get(key)
            node = node.setdefault(key, {}) if child is None or isinstance(child, dict) else {}
        node[path[-1]] = _decode(variable, _field(owner, path[-1]), value)
        _record(key_by, tuple(path), node[path[-1]], variable)
    known = known_variables(model) if strays else []
    unknown = tuple((variable, meant(variable, known)) for variable in sorted(strays))
    return FromEnvironment(merge(whole, found), {**whole_by, **key_by}, unknown)


def sdk_variables(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[KeyPath, str]]:
    """The variables the Langfuse SDK and the OpenAI client read themselves (so one set
    serves both), and the [http] pair a container sets, as sections; and each key with
    the variable that set it (`<VAR>_FILE` for a secret read from a file)."""
    env = with_secret_files(environ)
    pairs = (
        (("langfuse", "base_url"), ("LANGFUSE_BASE_URL", "LANGFUSE_HOST")),
        (("langfuse", "public_key"), ("LANGFUSE_PUBLIC_KEY",)),
        (("langfuse", "secret_key"), ("LANGFUSE_SECRET_KEY",)),
        (("judge", "base_url"), ("OBSERVER_JUDGE_BASE_URL", "OPENAI_BASE_URL")),
        (("judge", "model"), ("OBSERVER_JUDGE_MODEL",)),
        (("judge", "api_key"), ("OPENAI_API_KEY",)),
        (("http", "host"), ("OBSERVER_HTTP_HOST",)),
        (("http", "port"), ("OBSERVER_HTTP_PORT",)),
    )
    out: dict[str, Any] = {}
    set_by: dict[KeyPath, str] = {}
    for (section, key), names in pairs:
        name = next((name for name in names if env.get(name)), None)
        if name is None:
            continue
        out.setdefault(section, {})[key] = env[name]
        set_by[(section, key)] = name if environ.get(name) else f"{name}_FILE"
    return out, set_by


def _secret_env_names(data: Any) -> set[str]:
    """The variables `secret_env` keys name, anywhere in `data`, and their `_FILE`."""
    names: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "secret_env" and isinstance(value, str) and value:
                names |= {value.upper(), f"{value}_FILE".upper()}
            names |= _secret_env_names(value)
    elif isinstance(data, list):
        for item in data:
            names |= _secret_env_names(item)
    return names


@dataclass(frozen=True)
class Sources:
    """What the file and the environment say, before validation."""

    merged: dict[str, Any]  # everything, by precedence: validation errors are located in it
    origin: str  # "observer.toml and environment", for the first line of an error
    set_by: dict[KeyPath, str]  # the keys variables set, with the variable
    unknown: tuple[tuple[str, str | None], ...]  # variables observer does not read
    model: Any = None  # the settings model read for: a misspelled key's "did you mean"


def read_sources(
    model: Any, given: str | Path | None, sections: frozenset[str] | None = None
) -> Sources:
    """The file and the environment, for `model`'s sections (`sections`: only these).
    An unknown variable is not passed on: `describe` names it with the one it meant."""
    path = config_path(given)
    data = read_toml(path) if path is not None else {}
    origin = f"{path} and environment" if path is not None else "defaults and environment"
    environ = os.environ
    sdk, set_by = sdk_variables(environ)
    own = observer_variables(model, environ, sections)
    merged = merge(merge(data, sdk), own.values)
    if sections is not None:
        merged = {key: value for key, value in merged.items() if key in sections}
    named = _secret_env_names(merged)
    unknown = tuple(item for item in own.unknown if item[0].upper() not in named)
    if sections is None or "langfuse" in sections:
        near = langfuse_near_misses(environ, {**set_by, **own.set_by})
        unknown += tuple((variable, meant) for variable, meant in near if variable not in named)
    return Sources(merged, origin, {**set_by, **own.set_by}, unknown, model)


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


def _variable(where: str, set_by: Mapping[KeyPath, str]) -> str | None:
    """The variable that set the key at `where` (or the table or list holding it)."""
    path = tuple(re.sub(r"\[[^\]]*\]", "", where).split("."))
    for end in range(len(path), 0, -1):
        if path[:end] in set_by:
            return set_by[path[:end]]
    return None


# What a value must be, by pydantic's error type, where its message is not already plain.
_SHAPES = {
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "finite_number": "must be a finite number",
}


def _message(item: Any, secret: bool) -> str:
    """What is wrong, as a rule the value must follow, and the value given (never a
    secret's; only a word or a number, cut short)."""
    if item["type"] == "extra_forbidden":
        return "unknown key"
    message = str(item["msg"]).removeprefix("Value error, ")
    shape = _SHAPES.get(item["type"])
    if shape is None and not message.startswith("Input should be "):
        return message
    shape = shape or "must be " + message.removeprefix("Input should be ")
    given = item.get("input")
    if secret or not isinstance(given, str | int | float) or isinstance(given, bool):
        return shape
    shown = repr(given) if len(repr(given)) <= 60 else repr(given)[:57] + "..."
    return f"{shape}, got {shown}"


def meant_key(model: Any, loc: tuple[int | str, ...]) -> str | None:
    """The key of `model` an unknown key at `loc` probably misspells (`poll_intervall_s`:
    `poll_interval_s`), or None."""
    import difflib  # only on the way to an error

    owner: Any = model
    for part in loc[:-1]:
        owner = _unwrap(owner)
        # An int is an item of a list of tables: the list's item type.
        owner = (get_args(owner) or (None,))[0] if isinstance(part, int) else _field(owner, part)
    owner = _unwrap(owner)
    if not _is_model(owner):
        return None
    known = [info.alias or key for key, info in owner.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, 1, 0.75)
    return close[0] if close else None


def describe(sources: Sources, error: ValidationError | None = None) -> str:
    """The variables observer does not read and the validation error as the lines a
    person reads: each key with the variable that set it (the file's key alone when
    the file did), and what is wrong with it; never the value of a secret."""
    lines = [f"invalid configuration ({sources.origin}):"]
    for variable, probably in sources.unknown:
        hint = f"did you mean {probably}?" if probably else "unset it"
        lines.append(f"  {variable}: observer reads no such variable; {hint}")
    for item in error.errors(include_url=False) if error is not None else ():
        where = _where(item["loc"], sources.merged) or "(top level)"
        secret = tuple(str(part) for part in item["loc"][:2]) in SECRET_KEYS
        message = _message(item, secret)
        if item["type"] == "extra_forbidden" and sources.model is not None:
            probably = meant_key(sources.model, item["loc"])
            message += f"; did you mean {probably}?" if probably else ""
        if message.startswith((f"{where}.", f"{where}[")):
            where, message = message.split(": ", 1) if ": " in message else (where, message)
        set_by = _variable(where, sources.set_by)
        lines.append(f"  {where} ({set_by}): {message}" if set_by else f"  {where}: {message}")
    return "\n".join(lines)
