"""`observer alerts test`: a test alert through each notifier that leaves nothing open.

Each notifier's class says how its test ends (`test_end`, see the package
docstring): Alertmanager's post ends by itself at its `endsAt` (seconds
later); PagerDuty and the webhook get the firing message, then, after a short
pause (PagerDuty processes events asynchronously: the resolve must not
overtake its trigger), the resolved message with the same dedup key; Slack
gets one message headed TEST and nothing after it. A notifier of another
kind (no `test_end`) is resolved, the safe default.

`send_test` returns one `TestOutcome` per notifier: it unpacks as `(name,
failure)`, `failure` None when everything was delivered, and its `sent`
says what was (`"sent, resolved"`, `"sent, ends by itself in 5 s"`, ...). A
resolve that fails after its trigger was delivered is a failure that says
the test alert is open and how to close it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from observer.alerts.notifiers import Notifier, TestEnd
from observer.state.rows import Notification

RESOLVE_AFTER_S = 1.0

Send = Callable[[str, Notification], str | None]


class TestOutcome(tuple[str, str | None]):
    """`(name, failure)` of one notifier's test, plus `sent`: what it received."""

    __test__ = False  # not a pytest class, whatever its name
    sent: str

    def __new__(cls, name: str, failure: str | None, sent: str) -> TestOutcome:
        outcome = super().__new__(cls, (name, failure))
        outcome.sent = sent
        return outcome

    @property
    def name(self) -> str:
        return self[0]

    @property
    def failure(self) -> str | None:
        return self[1]


def how_test_ends(notifier: Notifier) -> TestEnd:
    """How the notifier's test alert ends: its class's `test_end`, else a resolve."""
    end: TestEnd = getattr(notifier, "test_end", "resolve")
    return end


def resolved(firing: Notification, at: datetime) -> Notification:
    """The resolve of the test alert: same dedup key, a message id of its own."""
    return dataclasses.replace(
        firing, id=f"{firing.id}_resolved", state="resolved", sent_at=at, ended_at=at
    )


def send_test(
    send: Send,
    notifiers: Mapping[str, Notifier],
    names: Sequence[str],
    firing: Notification,
    *,
    now: Callable[[], datetime],
    resolve_after_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TestOutcome]:
    """`firing` through each named notifier with `send` (the error text or None), then,
    `resolve_after_s` later (RESOLVE_AFTER_S), the resolves of those that need one; what
    each received, in `names` order."""
    outcomes: dict[str, TestOutcome] = {}
    to_resolve: list[str] = []
    for name in names:
        notifier = notifiers[name]
        failure = send(name, firing)
        end = how_test_ends(notifier)
        if failure is not None:
            outcomes[name] = TestOutcome(name, failure, "")
        elif end == "resolve":
            to_resolve.append(name)
        elif end == "expires":
            ttl = getattr(notifier, "test_ttl_s", None)
            after = f" in {ttl:g} s" if isinstance(ttl, int | float) else ""
            outcomes[name] = TestOutcome(name, None, f"sent, ends by itself{after}")
        else:
            outcomes[name] = TestOutcome(name, None, "sent (a TEST message; nothing to resolve)")
    if to_resolve:
        sleep(RESOLVE_AFTER_S if resolve_after_s is None else resolve_after_s)
        resolve = resolved(firing, now())
        for name in to_resolve:
            failure = send(name, resolve)
            if failure is None:
                outcomes[name] = TestOutcome(name, None, "sent, resolved")
            else:
                outcomes[name] = TestOutcome(
                    name,
                    f"sent, but the resolve failed ({failure}): the test alert is open, "
                    f"close it by hand (dedup key {firing.dedup_key!r})",
                    "sent",
                )
    return [outcomes[name] for name in names]
