"""Configuration: every section's model, validated at start.

Precedence, highest first: `OBSERVER_*` variables (nested keys joined with
`__`, e.g. `OBSERVER_CRAG__HIGH=0.7`; lists as JSON or comma-separated), the
Langfuse SDK's own `LANGFUSE_*` variables, the TOML file given with `--config`
(or `OBSERVER_CONFIG`), the defaults of docs/signals.md. The file and the
variables are read by `observer.config.sources`, the only reader of both;
everything is validated here at start, and a bad value is a `ConfigError` that
names the key and the variable that set it; an `OBSERVER_*` variable observer does
not read is one too. Secrets are read from the environment only and never printed.
`Settings()` is the defaults alone; `load_settings` reads the file and the
environment.

    sources   the only reader of the file and the variables
    signals   [signals], [crag], [band] alone (`observer score` needs only these)
    sections  every other section's schema but the rules'
    alerts    [alerts]: its rules checked with the rules' own grammar when validated
    settings  `Settings`, `load_settings`, `masked`

Re-exported here, each loaded when first asked for: importing `observer.config.sources`
(as `observer score` does) builds no settings model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from observer.errors import ConfigError as ConfigError

if TYPE_CHECKING:  # the names, for type checkers; loaded when first asked for
    from observer.config.alerts import AlertsSettings as AlertsSettings
    from observer.config.alerts import NotifierSettings as NotifierSettings
    from observer.config.sections import FleetSettings as FleetSettings
    from observer.config.sections import JudgeSettings as JudgeSettings
    from observer.config.sections import MappingSettings as MappingSettings
    from observer.config.sections import SourceSettings as SourceSettings
    from observer.config.settings import Settings as Settings
    from observer.config.settings import load_settings as load_settings
    from observer.config.settings import masked as masked

_MODULES = {
    "observer.config.alerts": "AlertsSettings NotifierSettings",
    "observer.config.sections": "FleetSettings JudgeSettings MappingSettings SourceSettings",
    "observer.config.settings": "Settings load_settings masked",
}
_HOMES = {name: module for module, names in _MODULES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found directly from now on
    return value
