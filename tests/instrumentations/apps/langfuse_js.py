"""The Langfuse JS/TS SDK: a Node.js RAG app traced with ``@langfuse/tracing`` ``observe``.

``langfuse_js/app.mjs`` sets up tracing as the SDK's docs say (the OpenTelemetry ``NodeSDK``
with ``@langfuse/otel``'s ``LangfuseSpanProcessor``), wraps its steps with ``observe``
(``asType: "retriever"`` for the vector search, a plain span for the rerank) and the OpenAI
client with ``@langfuse/openai``'s ``observeOpenAI``. The Python side hands it the knowledge
base's answers on stdin (per question the 5 candidates and the kept ones, reranked); the
Node side traces the steps as the app would. npm packages: ``langfuse_js/package.json``
(exact versions, ``package-lock.json`` beside it); ``npm ci`` runs when ``node_modules`` is
missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.instrumentations.kit import ToolCallingStub

DESCRIPTION = (
    "Langfuse JS/TS SDK 5 (@langfuse/tracing observe, @langfuse/otel LangfuseSpanProcessor on "
    "the OpenTelemetry NodeSDK): root span 'rag-answer', a retriever observation (5 "
    "candidates), a rerank span (the kept chunks), the generation of @langfuse/openai's "
    "observeOpenAI around the openai npm client"
)

APP_DIR = Path(__file__).resolve().parent / "langfuse_js"


def knowledge_base() -> dict[str, Any]:
    """What the app's stores answer: per question the candidates and the reranked kept ones."""
    from tests.instrumentations.kit import (
        CHUNKS,
        MODEL,
        SCENARIOS,
        SYSTEM_PROMPT,
        candidates,
        rerank_ids,
    )

    def chunk(chunk_id: str) -> dict[str, str]:
        c = CHUNKS[chunk_id]
        return {"id": c.chunk_id, "docId": c.doc_id, "title": c.title, "text": c.text}

    scenarios = []
    for scenario in SCENARIOS:
        found = candidates(scenario.question)
        kept = rerank_ids(scenario.question, [c for c, _ in found])
        scenarios.append(
            {
                "question": scenario.question,
                "candidates": [{**chunk(c), "similarity": s} for c, s in found],
                "reranked": [{"id": c, "score": s} for c, s in kept],
            }
        )
    return {"model": MODEL, "systemPrompt": SYSTEM_PROMPT, "scenarios": scenarios}


class ChunkedRelay:
    """Loopback relay in front of generate.py's capture server, forwarding each request whole.

    Node's OTLP exporters (``@opentelemetry/otlp-exporter-base``) pipe every body into the
    request, so it goes out with ``Transfer-Encoding: chunked`` and no ``Content-Length``;
    the capture server reads ``Content-Length`` bytes only and would record empty exports.
    The relay reads the chunked body and forwards it unchanged, with its length (headers as
    sent, less the hop-by-hop ones).
    """

    def __init__(self, target: str) -> None:
        import threading
        import urllib.request
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                return

            def _body(self) -> bytes:
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()

            def _forward(self) -> None:
                body = self._body() if self.command in ("POST", "PUT") else None
                hop = {"host", "transfer-encoding", "connection", "content-length", "keep-alive"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
                request = urllib.request.Request(
                    target + self.path, data=body, headers=headers, method=self.command
                )
                with urllib.request.urlopen(request, timeout=30) as response:
                    payload = response.read()
                    status = response.status
                    content_type = response.headers.get("Content-Type") or "application/json"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_POST = do_PUT = do_GET = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def run_node(app_dir: Path, script: str, payload: dict[str, Any]) -> None:
    """``npm ci`` when ``node_modules`` is missing, then ``node script`` with payload on stdin.

    The app exports through a ``ChunkedRelay`` to generate.py's capture server; the NodeSDK's
    metrics and logs exporters (unused here) are turned off so nothing dials their default
    ``localhost:4318``.
    """
    import json
    import os
    import subprocess

    if not (app_dir / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=app_dir, check=True)
    relay = ChunkedRelay(os.environ["LANGFUSE_BASE_URL"])
    env = {
        **os.environ,
        "LANGFUSE_BASE_URL": relay.url,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    try:
        subprocess.run(
            ["node", script], cwd=app_dir, input=json.dumps(payload), text=True, check=True, env=env
        )
    finally:
        relay.stop()


def run(stub: ToolCallingStub) -> None:
    from tests.instrumentations.kit import SCENARIOS

    payload = knowledge_base()
    stub.script(*(scenario.answer for scenario in SCENARIOS))
    run_node(APP_DIR, "app.mjs", payload)
