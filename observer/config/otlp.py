"""`[otlp]`: the event path's receiver (docs/configuration.md#otlp-receiver, docs/daemon.md).

Off by default. `enabled = true` serves on `listen` (`127.0.0.1:4318`, the OTLP/HTTP
port); setting `listen` (`OBSERVER_OTLP__LISTEN`) alone turns it on too. Listening
beyond loopback needs credentials to check: the Langfuse keys (the SDK sends them as
basic auth) or a bearer token in the variable `secret_env` names; without either it is
a ConfigError at start, naming `otlp.listen`.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, field_validator

from observer.config.signals import Section

DEFAULT_LISTEN = "127.0.0.1:4318"


def split_listen(value: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets) -> (host, port); ValueError saying why not."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"must be host:port, e.g. {DEFAULT_LISTEN!r}, got {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not in 0..65535")
    return host, port


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost` reach only this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


class OtlpSettings(Section):
    enabled: bool | None = Field(
        None, description="serve OTLP/HTTP on `listen` (unset: on when `listen` is set)"
    )
    listen: str = Field(
        DEFAULT_LISTEN, description="host:port; beyond loopback only with auth configured"
    )
    secret_env: str = Field(
        "",
        description="the variable holding a bearer token senders may use instead of the "
        "Langfuse keys (empty: the keys only)",
    )
    settle_s: float = Field(
        2.0, gt=0, description="a trace is scored once its root is in and it was quiet this long"
    )
    root_grace_s: float = Field(
        0.3,
        ge=0,
        description="a trace whose root is in and whose every span has its parent in the "
        "trace is scored once it was quiet this long (at most settle_s)",
    )
    keep_s: float = Field(
        30.0, ge=0, description="a scored trace stays in memory this long for late spans"
    )
    max_traces: int = Field(
        20_000, ge=10, description="traces held at most; past it the oldest settles early"
    )
    max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024 * 1024,
        description="span bytes held at most (protobuf size); past it: 429 and early settling",
    )
    max_request_bytes: int = Field(
        20 * 1024 * 1024, ge=65536, description="one export body, inflated, at most (else 413)"
    )
    threads: int = Field(4, ge=1, le=64, description="requests served at once")
    poller: Literal["backstop", "off"] = Field(
        "backstop",
        description="backstop: the Langfuse poller runs too, on `backstop_delay_s`, and "
        "scores what a crash lost; off: nothing is read from Langfuse",
    )
    backstop_delay_s: float = Field(
        300.0,
        gt=0,
        description="with the receiver on, the poller scores a trace only once it was "
        "quiet this long (its settle_s at least this, its poll interval a fifth)",
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_listen(value)
        return value.strip()

    @property
    def on(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return "listen" in self.model_fields_set

    @property
    def alone(self) -> bool:
        """The receiver on and the poller off: nothing is read from Langfuse."""
        return self.on and self.poller == "off"

    @property
    def address(self) -> tuple[str, int]:
        return split_listen(self.listen)
