"""A local OpenAI-compatible HTTP server for tests: the real `openai` client talks to it.

Use the ``llm_stub`` fixture (tests/conftest.py)::

    def test_x(llm_stub):
        llm_stub.set_handler(FakeLLM(rules=[...]))          # answer as a scripted FakeLLM, or
        llm_stub.set_handler(lambda req: {"should_consolidate": False, ...})  # JSON content, or
        llm_stub.set_handler(lambda req: StubResponse.rate_limited(retry_after=1))
        llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="m", api_key="k")
        ...
        assert llm_stub.requests[0].prompt_name == "consolidate"

A handler gets a ``StubRequest`` (path, body, headers, prompt_name, system, user) and returns
a dict/list (sent as the JSON reply content), a str (sent as raw content, e.g. broken JSON), or a
``StubResponse`` for full control: ``StubResponse.rate_limited(retry_after)``,
``StubResponse.error(500)``, ``StubResponse.hang(seconds)`` (sleeps, released early by
``stop()``), ``StubResponse.reply(data, delay=...)``, ``StubResponse.trickle(data, every=3)``
(headers at once, then the body one byte every ``every`` seconds: a read timeout never fires),
``StubResponse.raw(text, content_type=...)`` (an HTTP 200 whose body is not a chat completion),
``StubResponse.dropped(data, after=20)`` (headers and part of the body, then the connection
closes). Set ``reject_json_schema = True`` to answer 400 to ``response_format: json_schema`` (as servers without it do) and exercise the fallback.
``POST /v1/embeddings`` answers with the built-in hashing embedder, or with
``embeddings_response`` when it is set (e.g. a ``StubResponse.trickle`` or ``.raw``).
``/v1/files`` and ``/v1/batches`` (the provider batch API) are served by ``stub.batches``
(tests/support/llm_stub_batches.py): expiry, failed and torn lines are set per test there.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.llm_stub_batches import BatchEndpoints, RawAnswer, Refusal
from worker.embeddings.hashing import HashingEmbedder


@dataclass
class StubRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def prompt_name(self) -> str:
        if self.headers.get("x-dream-prompt"):
            return self.headers["x-dream-prompt"]
        fmt = self.body.get("response_format") or {}
        return str((fmt.get("json_schema") or {}).get("name", ""))

    def _message(self, role: str) -> str:
        return "\n".join(m.get("content", "") for m in self.body.get("messages", [])
                         if m.get("role") == role)

    @property
    def system(self) -> str:
        return self._message("system")

    @property
    def user(self) -> str:
        return self._message("user")

    @property
    def response_format(self) -> str | None:
        return (self.body.get("response_format") or {}).get("type")


@dataclass
class StubResponse:
    status: int = 200
    content: Any = None  # dict/list → JSON text; str → raw text
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: dict[str, Any] | None = None  # full body override
    tokens_in: int = 11
    tokens_out: int = 7
    trickle_every: float = 0.0  # > 0: send the body one byte at a time, this many seconds apart
    raw_body: str | None = None  # sent as-is instead of a JSON body
    content_type: str = "application/json"
    drop_after: int | None = None  # send this many bytes of the body, then close the connection

    @classmethod
    def reply(cls, content: Any, delay: float = 0.0) -> StubResponse:
        return cls(content=content, delay=delay)

    @classmethod
    def rate_limited(cls, retry_after: float = 1.0) -> StubResponse:
        return cls(status=429, headers={"Retry-After": str(retry_after)},
                   body={"error": {"message": "rate limited", "type": "rate_limit"}})

    @classmethod
    def error(cls, status: int = 500) -> StubResponse:
        return cls(status=status, body={"error": {"message": f"stub error {status}"}})

    @classmethod
    def hang(cls, seconds: float) -> StubResponse:
        return cls(status=500, delay=seconds, body={"error": {"message": "hung"}})

    @classmethod
    def trickle(cls, content: Any, every: float = 3.0) -> StubResponse:
        return cls(content=content, trickle_every=every)

    @classmethod
    def dropped(cls, content: Any, after: int = 20) -> StubResponse:
        """Headers and the first ``after`` bytes of a whole reply, then the connection closes:
        the server answered (and billed) it, the client never got it all."""
        return cls(content=content, drop_after=after)

    @classmethod
    def raw(cls, text: str, content_type: str = "text/html") -> StubResponse:
        return cls(raw_body=text, content_type=content_type)

    @classmethod
    def completion(cls, content: str | None, **fields: Any) -> StubResponse:
        """A whole chat completion body, ``fields`` replacing its own keys (usage, model,
        choices): what an endpoint may say around the reply."""
        body: dict[str, Any] = {
            "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "stub-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
        return cls(body=body | fields)


Handler = Callable[[StubRequest], Any]


class _Handler(BaseHTTPRequestHandler):
    """One request to the stub; ``stub`` is set on the subclass each server uses."""

    protocol_version = "HTTP/1.1"
    stub: LLMStub

    def log_message(self, *args: Any) -> None:
        pass

    def _send_json(self, status: int, payload: Any) -> None:
        content_type = "application/json"
        headers: dict[str, str] = {}
        if isinstance(payload, Refusal):
            headers = payload.headers()
            payload = {"error": {"message": f"stub refuses ({payload.status})"}}
        if isinstance(payload, RawAnswer):
            payload, content_type = payload.data, payload.content_type
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _batch_api(self, raw: bytes | None, delete: bool = False) -> bool:
        """The files and batches endpoints (llm_stub_batches); False for any other path."""
        if not self.path.split("?")[0].rstrip("/").split("/v1/")[-1].startswith(
                ("files", "batches")):
            return False
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.stub._lock:
            self.stub.requests.append(StubRequest(self.path, {}, headers))
        status, payload = (self.stub.batches.delete(self.path) if delete
                           else self.stub.batches.get(self.path) if raw is None
                           else self.stub.batches.post(self.path, headers, raw))
        if (raw is not None and not isinstance(payload, Refusal)
                and self.stub.batches.lose_create_answer(self.path)):
            self.close_connection = True  # created, and the answer never sent
            return True
        self._send_json(status, payload)
        return True

    def do_GET(self) -> None:
        if not self._batch_api(None):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_DELETE(self) -> None:
        if not self._batch_api(None, delete=True):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self._batch_api(raw):
            return
        body = json.loads(raw or b"{}")
        req = StubRequest(self.path, body, {k.lower(): v for k, v in self.headers.items()})
        with self.stub._lock:
            self.stub.requests.append(req)
        with self.stub.answering():
            status, payload, headers = self.stub._answer(req)
        resp = self.stub._last_response.get(id(req))
        if resp is not None and resp.raw_body is not None:
            data = resp.raw_body.encode()
        else:
            data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", resp.content_type if resp else
                             "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if resp is not None and resp.drop_after is not None:
                self.wfile.write(data[:resp.drop_after])
                self.wfile.flush()
                self.close_connection = True
            elif resp is not None and resp.trickle_every > 0:
                self.wfile.flush()
                for at in range(len(data)):
                    if self.stub._released.wait(resp.trickle_every):
                        return
                    self.wfile.write(data[at:at + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left
        finally:
            self.stub._last_response.pop(id(req), None)



class LLMStub:
    """Threaded stdlib HTTP server; ``url`` is the base URL to give the client (ends in /v1)."""

    def __init__(self) -> None:
        self.requests: list[StubRequest] = []
        self.reject_json_schema = False
        self._handler: Handler = lambda req: StubResponse.error(503)
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._embedder = HashingEmbedder(512)
        self._server: ThreadingHTTPServer | None = None
        self._last_response: dict[int, StubResponse] = {}  # per request being answered
        self.embeddings_response: StubResponse | None = None
        self.url = ""
        self.in_flight = 0
        self.peak_in_flight = 0  # the most requests ever being answered at once
        # /v1/files and /v1/batches; each batch line is answered by the handler (_answer_line).
        self.batches = BatchEndpoints(self._answer_line, StubRequest)

    def set_handler(self, handler: Handler | Any) -> None:
        """A callable(StubRequest), or an object with ``complete_json`` (e.g. a FakeLLM)."""
        if hasattr(handler, "complete_json"):
            fake = handler

            def from_fake(req: StubRequest) -> Any:
                reply = fake.complete_json(prompt_name=req.prompt_name, system=req.system,
                                           user=req.user, schema={})
                return StubResponse(content=reply.raw, tokens_in=reply.tokens_in,
                                    tokens_out=reply.tokens_out)

            self._handler = from_fake
        else:
            self._handler = handler

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Counts one request in flight while its answer is made (``peak_in_flight``)."""
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def chat_requests(self) -> list[StubRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> LLMStub:
        stub = self

        handler = type("_BoundHandler", (_Handler,), {"stub": stub})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ---- answering ---------------------------------------------------------------------
    def _answer_line(self, req: StubRequest) -> tuple[int, Any, dict[str, str]]:
        """One batch line, answered as the same request online would be."""
        try:
            return self._answer(req)
        finally:
            self._last_response.pop(id(req), None)

    def _answer(self, req: StubRequest) -> tuple[int, Any, dict[str, str]]:
        if req.path.endswith("/embeddings") and self.embeddings_response is not None:
            resp = self.embeddings_response
            self._last_response[id(req)] = resp
            return resp.status, resp.content, resp.headers
        if req.path.endswith("/embeddings"):
            texts = req.body.get("input") or []
            texts = [texts] if isinstance(texts, str) else texts
            dims = int(req.body.get("dimensions") or 512)
            if dims != self._embedder.dimensions:
                self._embedder = HashingEmbedder(dims)
            vecs = self._embedder.embed(texts)
            return 200, {"object": "list", "model": req.body.get("model", "stub"),
                         "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                                  for i, v in enumerate(vecs)],
                         "usage": {"prompt_tokens": 1, "total_tokens": 1}}, {}
        if self.reject_json_schema and req.response_format == "json_schema":
            return 400, {"error": {"message": "response_format json_schema is not supported",
                                   "type": "invalid_request_error"}}, {}
        out = self._handler(req)
        resp = out if isinstance(out, StubResponse) else StubResponse(content=out)
        self._last_response[id(req)] = resp
        if resp.delay:
            self._released.wait(resp.delay)
        if resp.body is not None:
            return resp.status, resp.body, resp.headers
        content = resp.content if isinstance(resp.content, str) else json.dumps(resp.content)
        return resp.status, {
            "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
            "model": req.body.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": resp.tokens_in, "completion_tokens": resp.tokens_out,
                      "total_tokens": resp.tokens_in + resp.tokens_out},
        }, resp.headers
