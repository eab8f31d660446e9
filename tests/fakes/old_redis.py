"""A Redis 6.2 on loopback, for what no real server on this machine can be: too old.

The fleet refuses a Redis older than 7.0 (docs/operating.md#redis); the Debian
`redis-server` here is 7, so this fake answers as 6.2 does, for the handshake the real
redis-py client makes and the two commands `check` and `run` send:

- RESP2 requests (arrays of bulk strings) and replies, one connection per client
  (redis.io/docs/latest/develop/reference/protocol-spec);
- `AUTH password` and `SELECT db` answer `+OK`, `PING` `+PONG`;
- `CLIENT SETINFO`, which redis-py 5+ sends on connect, exists only since Redis 7.2
  (redis.io/docs/latest/commands/client-setinfo): 6.2 answers it with its
  "Unknown subcommand" error, which redis-py ignores;
- `INFO` is a bulk string of `# Section` headers and `field:value` lines
  (redis.io/docs/latest/commands/info), here `redis_version:6.2.14`, `aof_enabled:1`
  and `maxmemory_policy:noeviction`: only the version is wrong;
- any other command: `-ERR unknown command`.
"""

from __future__ import annotations

import socketserver
import threading
from types import TracebackType

INFO = (
    "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n\r\n"
    "# Persistence\r\naof_enabled:1\r\n\r\n"
    "# Memory\r\nmaxmemory_policy:noeviction\r\n"
)


class _Connection(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while True:
            command = self._request()
            if command is None:
                return
            self.wfile.write(_reply(command))

    def _request(self) -> list[str] | None:
        head = self.rfile.readline()
        if not head.startswith(b"*"):
            return None
        words = []
        for _ in range(int(head[1:])):
            size = int(self.rfile.readline()[1:])
            words.append(self.rfile.read(size + 2)[:-2].decode())
        return words


def _reply(command: list[str]) -> bytes:
    name = command[0].upper()
    if name in ("AUTH", "SELECT"):
        return b"+OK\r\n"
    if name == "PING":
        return b"+PONG\r\n"
    if name == "CLIENT" and len(command) > 1 and command[1].upper() == "SETINFO":
        return (
            b"-ERR Unknown subcommand or wrong number of arguments for 'SETINFO'. "
            b"Try CLIENT HELP.\r\n"
        )
    if name == "INFO":
        body = INFO.encode()
        return b"$%d\r\n%s\r\n" % (len(body), body)
    return b"-ERR unknown command `%s`\r\n" % command[0].encode()


class OldRedis:
    """`with OldRedis() as redis:` serves on `redis.port` until the block ends."""

    def __init__(self) -> None:
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Connection)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])

    def __enter__(self) -> OldRedis:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
