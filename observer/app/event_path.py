"""The event path wired (docs/daemon.md#the-event-path): `[otlp]` -> a receiver beside the poller.

`check` refuses, at start (ConfigError, exit 2), a receiver listening beyond loopback with
no credentials to check, and one in a `[fleet]` (the event path scales behind a Collector's
`loadbalancing` exporter instead). `with_backstop` gives the poller its longer delay when
both run. `EventPath` is the receiver's two threads, the HTTP server and the scoring
worker, started and stopped by the daemon: intake first, scoring next, within the grace.
"""

from __future__ import annotations

import threading

import structlog
from langfuse.api.client import LangfuseAPI

from observer.background import Deadline
from observer.config import ConfigError, Settings
from observer.config.otlp import is_loopback
from observer.langfuse_api import NO_RETRIES
from observer.otlp.receiver import Receiver
from observer.otlp.server import Credentials, OtlpApp, OtlpServer
from observer.sources.langfuse import budgeted_read
from observer.sources.ratelimit import RateLimiter

log = structlog.get_logger("observer.otlp")


def credentials(settings: Settings) -> Credentials:
    lf = settings.langfuse
    secret = lf.secret_key.get_secret_value() if lf.secret_key is not None else None
    return Credentials(lf.public_key, secret, settings.otlp_token())


def check(settings: Settings) -> None:
    """What `[otlp]` may not be: ConfigError naming the key."""
    o = settings.otlp
    if not o.on:
        return
    if settings.fleet is not None:
        raise ConfigError(
            "otlp: the receiver does not run in a [fleet]; run several observers behind an "
            "OpenTelemetry Collector's loadbalancing exporter instead (docs/daemon.md)"
        )
    host, _port = o.address
    if not is_loopback(host) and not credentials(settings).configured:
        raise ConfigError(
            f"otlp.listen: {o.listen} is beyond loopback and no credentials are set: set "
            "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY (what the Langfuse SDK sends), or "
            "otlp.secret_env naming a variable that holds a bearer token"
        )
    if o.root_grace_s > o.settle_s:
        raise ConfigError(
            f"otlp.root_grace_s: {o.root_grace_s:g} is longer than otlp.settle_s "
            f"({o.settle_s:g}): a whole trace would wait longer than one still missing spans; "
            "set otlp.root_grace_s at most otlp.settle_s"
        )
    if o.poller == "off" and o.keep_s < o.settle_s:
        log.info("otlp_late_spans_unscored", keep_s=o.keep_s, action="raise otlp.keep_s")


def with_backstop(settings: Settings) -> Settings:
    """With the receiver on and the poller kept as its backstop: the poller scores a trace
    only once it was quiet `otlp.backstop_delay_s`, by which time the receiver scored it
    (the poller then finds it unchanged), and polls a fifth as often."""
    o = settings.otlp
    if not o.on or o.poller != "backstop":
        return settings
    src = settings.source
    source = src.model_copy(
        update={
            "settle_s": max(src.settle_s, o.backstop_delay_s),
            "poll_interval_s": max(src.poll_interval_s, o.backstop_delay_s / 5),
        }
    )
    return settings.model_copy(update={"source": source})


class ProjectId:
    """The Langfuse project the keys belong to, read once (`GET /api/public/projects`): a
    received trace carries its id as a polled one does. Raises while Langfuse does not
    answer; None without a Langfuse client (nothing is read)."""

    def __init__(
        self,
        api: LangfuseAPI | None,
        limiter: RateLimiter | None,
        stop: threading.Event,
    ) -> None:
        self.api = api
        self.limiter = limiter
        self.stop = stop
        self._id: str | None = None

    def __call__(self) -> str | None:
        if self._id is not None or self.api is None or self.limiter is None:
            return self._id
        api = self.api
        projects = budgeted_read(
            lambda: api.projects.get(request_options=NO_RETRIES),
            self.limiter,
            what="the project of the keys",
            event="project",
            max_attempts=1,
            should_stop=self.stop.is_set,
        )
        if not projects.data:
            raise ConfigError("the Langfuse keys belong to no project")
        self._id = projects.data[0].id
        log.info("otlp_project_read", project_id=self._id)
        return self._id


class EventPath:
    """The receiver's HTTP server and scoring worker."""

    def __init__(self, settings: Settings, receiver: Receiver) -> None:
        o = settings.otlp
        self.settings = settings
        self.receiver = receiver
        self.app = OtlpApp(
            receiver.accept,
            credentials(settings),
            max_request_bytes=o.max_request_bytes,
            on_result=receiver.count,
        )
        self.server: OtlpServer | None = None

    def start(self) -> None:
        """Scoring first, then the port; ConfigError when the port cannot be opened."""
        o = self.settings.otlp
        host, port = o.address
        self.receiver.start()
        try:
            self.server = OtlpServer(host, port, self.app, threads=o.threads).start()
        except OSError as error:
            raise ConfigError(
                f"otlp.listen: cannot listen on {o.listen} ({error.strerror or error}); "
                "set otlp.listen (OBSERVER_OTLP__LISTEN) to a free address"
            ) from None
        if not self.app.credentials.configured:
            log.warning("otlp_without_auth", listen=o.listen, reason="no credentials set")

    def stop(self, deadline: Deadline) -> bool:
        """Intake stops (the port answers 503, then closes), then the worker; True when it
        ended by `deadline`."""
        ended = self.receiver.stop(deadline)
        if self.server is not None:
            self.server.stop()
            self.server = None
        return ended

    @property
    def url(self) -> str | None:
        return None if self.server is None else self.server.url
