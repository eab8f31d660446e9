"""The Redis Streams fleet: several `observer run` as one daemon (docs/operating.md).

    keys      the fleet's key names in Redis (pure)
    entry     a complete trace as a stream entry, and back (pure)
    connect   the Redis client, built in one place; Redis errors translated
    epoch     the epoch a member knows; the scripts that refuse to act in another
    lease     one reader at a time: a fenced, renewed lease
    stream    the trace stream, its consumer group, the watermark and marks
    reader    what the lease holder's pipeline publishes instead of scoring
    worker    every member: read entries, score, outbox, acknowledge
    budget    the judge's budget counted once for the fleet
    member    the threads of one member (lease keeper, reader, worker)
    status    `observer fleet status`

Errors:

    RemoteError (observer.errors)
     +-- Unreachable
          +-- FleetUnreachable   Redis refused, timed out or answered an error
    LeaseLost                    a fenced write found another holder (or none)
"""

from __future__ import annotations
