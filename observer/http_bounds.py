"""Bounds on what one HTTP answer may cost, and where a redirect may lead (docs/operating.md).

`bounded_client(...)` builds the `httpx.Client` an outbound client (Langfuse's
API client, the judge's OpenAI client) runs on, with two event hooks:

- **Redirects.** A write (any method but GET and HEAD) never follows one: a
  301/302/303 would turn the POST into a GET and lose the body, a 307/308 would
  send it elsewhere. A read follows one only within its origin (scheme, host
  and port): another origin would be sent the credentials. Both raise
  `Misdirected` naming the `Location`, a configuration error.
- **Size, decompression, time.** An answer whose `Content-Length` is past
  `max_bytes` is refused before its body is read; otherwise the body is read
  through a counter that stops at `max_bytes`, decompressed here (gzip and
  deflate) with the output bounded by the same limit (a 2 MB gzip bomb stops at
  the limit, not at 8 GB), and the whole exchange must end by `deadline_s`
  after the request was sent (a body that trickles forever is cut). Each
  raises `TooLarge` or `Unreachable` naming the setting that was exceeded.

httpx's own timeouts (connect, each read) still apply; the deadline bounds the
sum. Proxies from the environment work as with any `httpx.Client`. The openai
client runs on `httpx2`, a fork with the same API: `http=httpx2` builds its client.
"""

from __future__ import annotations

import functools
import sys
import time
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Final

import httpx

from observer.errors import Misdirected, TooLarge, Unreachable

_READS: Final = frozenset({"GET", "HEAD"})
_DEADLINE: Final = "observer.deadline"
_CHUNK: Final = 64 * 1024


def _origin(url: Any) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default


def _where(request: Any) -> str:
    return f"{request.method} {request.url.path}"


def check_redirect(response: Any, fix: str) -> None:
    """Raise Misdirected for a redirect observer must not follow (module docstring)."""
    if not response.has_redirect_location:
        return
    request = response.request
    # Where it points, without its query (the request's own parameters, repeated).
    target = request.url.join(response.headers["location"]).copy_with(query=None)
    if request.method not in _READS:
        raise Misdirected(
            f"{_where(request)}: answered {response.status_code} redirecting to {target}; a "
            f"write never follows a redirect (its body would be lost or sent elsewhere): {fix}",
            response.status_code,
            location=str(target),
        )
    if _origin(target) != _origin(request.url):
        raise Misdirected(
            f"{_where(request)}: answered {response.status_code} redirecting to another "
            f"origin, {target}; refused (the credentials would go there): {fix}",
            response.status_code,
            location=str(target),
        )


class _BoundedBody:
    """The body, counted, decompressed with a bounded output, and cut at the deadline
    (mixed into the client module's own SyncByteStream: `_stream_class`)."""

    def __init__(
        self,
        raw: Any,
        request: Any,
        encoding: str,
        max_bytes: int,
        limit_name: str,
        deadline_name: str,
    ) -> None:
        self._raw = raw
        self._request = request
        self._max = max_bytes
        self._limit_name = limit_name
        self._deadline_name = deadline_name
        self._decoder = _Decoder(encoding, _where(request))

    def _too_large(self, what: str) -> TooLarge:
        return TooLarge(
            f"{_where(self._request)}: the answer's {what} is larger than {self._limit_name} "
            f"({self._max:,} bytes); refused"
        )

    def __iter__(self) -> Iterator[bytes]:
        raw = decoded = 0
        deadline = self._request.extensions.get(_DEADLINE)
        for chunk in self._raw:
            raw += len(chunk)
            if raw > self._max:
                raise self._too_large("body")
            if deadline is not None and time.monotonic() > deadline[0]:
                raise Unreachable(
                    f"{_where(self._request)}: the answer did not end within "
                    f"{self._deadline_name} ({deadline[1]:g} s); cut"
                )
            for part in self._decoder(chunk, self._max - decoded + 1):
                decoded += len(part)
                if decoded > self._max:
                    raise self._too_large("decompressed body")
                yield part

    def close(self) -> None:
        self._raw.close()


@functools.cache
def _stream_class(base: type) -> type:
    """`_BoundedBody` as a stream of `base`'s module (httpx checks the class it reads)."""
    return type("BoundedStream", (_BoundedBody, base), {})


class _Decoder:
    """Content-Encoding undone chunk by chunk, each output at most `room` bytes (zlib's
    max_length), so no decompressed body is ever held past the bound."""

    def __init__(self, encoding: str, where: str) -> None:
        self._encoding = encoding
        self._z: zlib._Decompress | None = None
        if encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(47)  # gzip or zlib header, detected
        elif encoding == "deflate":
            self._z = zlib.decompressobj(15)  # zlib, else raw deflate (below)
        elif encoding not in ("", "identity"):
            raise TooLarge(f"{where}: the answer's Content-Encoding {encoding!r} is unreadable")
        self._where = where
        self._started = False

    def __call__(self, chunk: bytes, room: int) -> Iterator[bytes]:
        z = self._z
        if z is None:
            yield chunk
            return
        try:
            out = z.decompress(chunk, room)
        except zlib.error:
            if self._encoding != "deflate" or self._started:
                raise TooLarge(f"{self._where}: the answer's compressed body is corrupt") from None
            self._z = z = zlib.decompressobj(-15)  # deflate sent raw, as some servers do
            out = z.decompress(chunk, room)
        self._started = True
        yield out
        while z.unconsumed_tail and out:
            out = z.decompress(z.unconsumed_tail, room)
            yield out


def module_of(client_class: type) -> ModuleType:
    """The HTTP library a client class is built on (openai 1.x: httpx; openai 3: httpx2)."""
    base = next(c for c in client_class.__mro__[1:] if c.__name__ == "Client")
    return sys.modules[base.__module__.partition(".")[0]]


def bounded_client(
    *,
    timeout_s: float,
    max_bytes: int,
    deadline_s: float,
    limit_name: str,
    deadline_name: str,
    fix: str,
    headers: dict[str, str] | None = None,
    http: ModuleType = httpx,
) -> Any:
    """An `http.Client` (httpx's, or httpx2's) whose answers are bounded and whose
    redirects are checked.

    `limit_name` and `deadline_name` are the settings an error names; `fix` says what to
    change when a redirect is refused ("set LANGFUSE_BASE_URL to ...")."""
    stream_class = _stream_class(http.SyncByteStream)

    def stamp(request: Any) -> None:
        request.extensions[_DEADLINE] = (time.monotonic() + deadline_s, deadline_s)

    def guard(response: Any) -> None:
        check_redirect(response, fix)
        request = response.request
        length = response.headers.get("content-length", "")
        if length.strip().isdigit() and int(length) > max_bytes:
            raise TooLarge(
                f"{_where(request)}: the answer's Content-Length {int(length):,} is larger than "
                f"{limit_name} ({max_bytes:,} bytes); refused before reading it"
            )
        encoding = ",".join(response.headers.get_list("content-encoding")).strip().lower()
        response.stream = stream_class(
            response.stream, request, encoding, max_bytes, limit_name, deadline_name
        )
        # Decoded above, bounded: httpx must not decode it again.
        response.headers.pop("content-encoding", None)

    return http.Client(
        timeout=timeout_s,
        follow_redirects=True,
        headers=headers,
        event_hooks={"request": [stamp], "response": [guard]},
    )
