"""`Settings`, every section together; `load_settings` and `masked` (`config show`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from observer.config.alerts import AlertsSettings, NotifierSettings
from observer.config.keys import shown_key
from observer.config.otlp import OtlpSettings
from observer.config.sections import (
    FleetSettings,
    HttpSettings,
    JudgeSettings,
    LangfuseSettings,
    LimitsSettings,
    LogSettings,
    MappingSettings,
    MetricsSettings,
    ResolverSettings,
    RunSettings,
    SinkSettings,
    SourceSettings,
    StateSettings,
    TelemetrySettings,
    resolve_hook,
)
from observer.config.signals import BandSettings, CragSettings, SignalsSettings, signal_params
from observer.config.sources import SECRET_KEYS, describe, read_secret_file, read_sources
from observer.errors import ConfigError
from observer.urls import without_credentials

if TYPE_CHECKING:
    from observer.judge.sampler import SamplerParams
    from observer.mapping.rules import MappingRules
    from observer.signals.params import SignalParams


def _named_secret(name: str, where: str) -> str | None:
    """The value of the variable a `secret_env` key names, or of the file `<name>_FILE` names;
    None when the key is empty, a ConfigError naming the key when the variable is unset."""
    if not name:
        return None
    value = os.environ.get(name) or read_secret_file(name, os.environ)
    if not value:
        raise ConfigError(f"{where}: the environment variable {name} is not set")
    return value


class Settings(BaseModel):
    """The effective configuration of observer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signals: SignalsSettings = SignalsSettings()
    crag: CragSettings = CragSettings()
    band: BandSettings = BandSettings()
    langfuse: LangfuseSettings = LangfuseSettings()
    source: SourceSettings = SourceSettings()
    sink: SinkSettings = SinkSettings()
    state: StateSettings = StateSettings()
    run: RunSettings = RunSettings()
    mapping: MappingSettings = MappingSettings()
    judge: JudgeSettings = JudgeSettings()
    alerts: AlertsSettings = Field(default_factory=AlertsSettings)  # its rules checked when built
    limits: LimitsSettings = LimitsSettings()
    resolver: ResolverSettings = ResolverSettings()
    http: HttpSettings = HttpSettings()
    metrics: MetricsSettings = MetricsSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    log: LogSettings = LogSettings()
    fleet: FleetSettings | None = None  # [fleet]: join a fleet (docs/operating.md)
    otlp: OtlpSettings = OtlpSettings()  # the event path's receiver (docs/daemon.md)

    def signal_params(self) -> SignalParams:
        return signal_params(self.signals, self.crag, self.band)

    def sampler_params(self) -> SamplerParams:
        from observer.judge.sampler import SamplerParams

        j = self.judge
        return SamplerParams(
            enabled=j.enabled,
            rate=j.rate,
            risk_oversampling=j.risk_oversampling,
            risk_rate=j.risk_rate,
            max_judged_per_hour=j.max_judged_per_hour,
            # The canary's share is kept ahead: traces never take it (docs/judge.md#a-canary).
            max_tokens_per_day=j.max_tokens_per_day - j.canary_tokens,
        )

    def notifier_secret(self, notifier: NotifierSettings) -> str | None:
        """The secret a notifier names, from its variable (or a file named by `<VAR>_FILE`)."""
        where = f"alerts.notifiers[{notifier.name}].secret_env"
        return _named_secret(notifier.secret_env, where)

    def resolver_secret(self) -> str | None:
        """The value of the variable `resolver.secret_env` names (or its `_FILE`)."""
        return _named_secret(self.resolver.secret_env, "resolver.secret_env")

    def otlp_token(self) -> str | None:
        """The bearer token from the variable `otlp.secret_env` names (or its `_FILE`)."""
        return _named_secret(self.otlp.secret_env, "otlp.secret_env")

    def fleet_url(self) -> str:
        """The Redis URL from the variable `fleet.secret_env` names (or its `_FILE`).

        A ConfigError naming the variable (never its value, which may hold a password)
        when it is unset or not a redis://, rediss:// or unix:// URL."""
        assert self.fleet is not None
        variable = self.fleet.secret_env
        url = _named_secret(variable, "fleet.secret_env")
        assert url is not None
        try:
            scheme = urlsplit(url).scheme
        except ValueError:
            scheme = ""
        if scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"fleet.secret_env: {variable} must hold a redis://, rediss:// or unix:// URL"
            )
        return url

    def mapping_rules(self) -> MappingRules:
        from observer.mapping.rules import MappingRules

        m = self.mapping
        return MappingRules(
            generation_types=tuple(m.generation_types),
            generation_names=tuple(m.generation_names),
            retriever_types=tuple(m.retriever_types),
            retriever_names=tuple(m.retriever_names),
            question_keys=tuple(m.question_keys),
            answer_keys=tuple(m.answer_keys),
            sources_keys=tuple(m.sources_keys),
            text_keys=tuple(m.text_keys),
            chunk_id_keys=tuple(m.chunk_id_keys),
            score_keys=tuple(m.score_keys),
            verify_sources=m.verify_sources,
            environments=tuple(self.source.environments),
            trace_names=tuple(self.source.trace_names),
            tags=tuple(self.source.tags),
            hook=resolve_hook(m.hook) if m.hook else None,
            max_answer_chars=self.limits.max_answer_chars,
            max_sources=self.limits.max_sources,
            max_observations=self.limits.max_observations_per_trace,
        )


def load_settings(config_path: str | Path | None = None) -> Settings:
    """Read the config file (if any) and the environment; validate everything."""
    sources = read_sources(Settings, config_path)
    try:
        settings = Settings(**sources.merged)
    except ValidationError as error:
        raise ConfigError(describe(sources, error)) from None
    if sources.unknown:
        raise ConfigError(describe(sources))
    return settings


# The URLs `config show` prints, shown without the credentials a URL can carry.
URL_KEYS = (("langfuse", "base_url"), ("judge", "base_url"), ("resolver", "uri"))


def masked(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data, secrets masked, unset keys left out."""
    data = settings.model_dump(mode="python", exclude_none=True, by_alias=True)
    for section, key in SECRET_KEYS:
        if key in data.get(section, {}):
            data[section][key] = "********"
    if "public_key" in data.get("langfuse", {}):
        data["langfuse"]["public_key"] = shown_key(data["langfuse"]["public_key"])
    for section, key in URL_KEYS:  # a URL's password, a token in its query
        if data.get(section, {}).get(key):
            data[section][key] = without_credentials(data[section][key])
    for notifier in data.get("alerts", {}).get("notifiers", []):
        if notifier.get("url"):
            notifier["url"] = without_credentials(notifier["url"])
    return data
