"""The files and batches endpoints of the local model stub (tests/support/llm_stub.py).

``POST /v1/files`` (multipart upload), ``GET /v1/files/{id}`` and ``/v1/files/{id}/content``,
``DELETE /v1/files/{id}`` (``sent`` keeps every upload, deleted or not; ``deleted`` the ids);
``POST /v1/batches``, ``GET /v1/batches/{id}`` and ``POST /v1/batches/{id}/cancel`` (a batch
still validating or in progress becomes ``cancel_to``, "cancelled" unless the test asks for
"cancelling"; ``cancelled`` keeps the ids; a finished one answers 409, as OpenAI does). Each
retrieve moves a batch one status on:
validating → in_progress → (after ``polls`` in progress) completed, or what the test asked for.
Per test, on ``stub.batches``: ``polls`` (retrieves spent in progress), ``finish_as``
("completed", "expired", "failed"), ``answer_before_expiry`` (lines answered when it expires),
``batch_errors`` (a failed batch's ``errors.data``) and ``failed_files`` (False: a failed
batch writes no file), ``fail_line(req) -> bool`` (an error-file line instead of a reply), ``corrupt_line(req) ->
bool`` (a broken JSON line in the output file), ``refuse_status`` (every request answers it)
and ``batch_prefix`` (what a batch id starts with); ``garbage[route]`` (route one of "upload",
"create", "retrieve", "cancel", "delete") is a ``RawAnswer``, an HTTP 200 body that is none of
the API's objects (a proxy's HTML page, JSON cut short), sent instead of the route's answer.
``lost_creates`` / ``lost_uploads``: the next so many batch creates / uploads are carried out
and their answer never sent (the connection closes). ``GET /v1/batches`` and ``GET /v1/files``
list them newest first (``limit``, ``after``; files by ``purpose``), as OpenAI pages them;
``refuse_list`` makes both answer that status; while ``list_late`` is set, a batch created is
left out of the list (``unlisted``) until the test clears it, as a provider may list one late.
``refuse_next[route]`` (route "upload" or "create"): a ``Refusal`` (status, Retry-After) each
of the next requests answers instead, carrying nothing out. Every answered line goes through the stub's
handler exactly as an online chat completion would.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Answer = Callable[[Any], tuple[int, Any, dict[str, str]]]  # StubRequest → (status, body, headers)


@dataclass(frozen=True)
class RawAnswer:
    """An HTTP 200 body sent as it is, with its content type."""

    data: bytes
    content_type: str = "application/json"


@dataclass(frozen=True)
class Refusal:
    """An error status answered before the route does anything, with its Retry-After."""

    status: int
    retry_after: float | None = None

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"retry-after": f"{self.retry_after:g}"}


@dataclass
class StubBatch:
    id: str
    input_file_id: str
    endpoint: str
    status: str = "validating"
    retrieves: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: int = field(default_factory=lambda: int(time.time()))
    errors: list[dict[str, Any]] | None = None

    def body(self, lines: int) -> dict[str, Any]:
        done = self.status in ("completed", "expired", "failed", "cancelled")
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint,
            "input_file_id": self.input_file_id, "completion_window": "24h",
            "status": self.status, "created_at": self.created_at,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
            "metadata": self.metadata,
            **({"errors": {"object": "list", "data": self.errors}} if self.errors else {}),
            "request_counts": {"total": lines, "completed": lines if done else 0, "failed": 0},
        }


class BatchEndpoints:
    """State and answers of the files and batches API; thread-safe (the server is threaded)."""

    def __init__(self, answer: Answer, request_type: Any) -> None:
        self._answer = answer
        self._request_type = request_type
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.files: dict[str, bytes] = {}  # what the provider holds now
        self.sent: dict[str, bytes] = {}  # every upload, deleted or not
        self.deleted: list[str] = []
        self.purposes: dict[str, str] = {}
        self.batches: dict[str, StubBatch] = {}
        self.line_requests: list[Any] = []  # every batch line the handler answered
        self.polls = 1
        self.finish_as = "completed"
        self.answer_before_expiry = 0
        self.fail_line: Callable[[Any], bool] | None = None
        self.corrupt_line: Callable[[Any], bool] | None = None
        self.refuse_status: int | None = None  # every files/batches request answers this
        self.refuse_delete: int | None = None  # every DELETE answers this (the files stay)
        self.cancel_to = "cancelled"  # what a cancel makes of a working batch
        self.batch_prefix = "batch_"  # a batch's id is this and a number
        self.cancelled: list[str] = []  # every batch a cancel stopped
        self.garbage: dict[str, RawAnswer] = {}  # route → the body it answers instead
        # A failed batch's ``errors.data`` (OpenAI: why it failed validation); with
        # ``failed_files`` False it writes no output or error file, as OpenAI's do.
        self.batch_errors: list[dict[str, Any]] | None = None
        self.failed_files = True
        # The next this many batch creates are carried out and their answer lost (the
        # connection closes before it): the client cannot tell a batch was created.
        self.lost_creates = 0
        self.lost_uploads = 0  # likewise for file uploads
        self.refuse_list: int | None = None  # every batches/files list answers this
        self.list_late = False  # batches created now are not listed (``unlisted``)
        self.unlisted: set[str] = set()
        self.refuse_next: dict[str, list[Refusal]] = {}  # route -> what its next ones answer
        self.posts: list[str] = []  # every POST's route ("upload", "create", "cancel")
        self.names: dict[str, str] = {}  # file id -> the name it was uploaded under
        self.lists: list[str] = []  # every list request's path and query

    def lose_create_answer(self, path: str) -> bool:
        """Whether to drop the answer to this POST (a batch create, ``lost_creates``, or an
        upload, ``lost_uploads``)."""
        route = path.split("?")[0].rstrip("/")
        with self._lock:
            if route.endswith("/batches") and self.lost_creates > 0:
                self.lost_creates -= 1
                return True
            if route.endswith("/files") and self.lost_uploads > 0:
                self.lost_uploads -= 1
                return True
            return False

    # ---- routing -----------------------------------------------------------------------
    def post(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if self.refuse_status is not None:
            return self.refuse_status, {"error": {"message": f"stub refuses ({self.refuse_status})"}}
        route = ("cancel" if path.endswith("/cancel") else "upload" if path.endswith("/files")
                 else "create")
        with self._lock:
            self.posts.append(route)
            queued = self.refuse_next.get(route)
            refusal = queued.pop(0) if queued else None
        if refusal is not None:
            return refusal.status, refusal
        if path.endswith("/files"):
            return self.garbled("upload") or self._upload(headers.get("content-type", ""), raw)
        if path.endswith("/cancel"):
            return self.garbled("cancel") or self._cancel(path.rstrip("/").split("/")[-2])
        if path.endswith("/batches"):
            return self.garbled("create") or self._create(json.loads(raw or b"{}"))
        return 404, {"error": {"message": f"no route {path}"}}

    def get(self, path: str) -> tuple[int, Any]:
        if self.refuse_status is not None:
            return self.refuse_status, {"error": {"message": f"stub refuses ({self.refuse_status})"}}
        parts = path.split("?")[0].rstrip("/").split("/")
        if parts[-1] in ("batches", "files"):
            return self._list(parts[-1], path)
        if len(parts) >= 3 and parts[-2] == "batches":
            return self.garbled("retrieve") or self._retrieve(parts[-1])
        if parts[-1] == "content" and parts[-3] == "files":
            with self._lock:
                data = self.files.get(parts[-2])
            return (200, data) if data is not None else (404, {"error": {"message": "no file"}})
        if parts[-2] == "files" and parts[-1] in self.files:
            return 200, self._file_body(parts[-1])
        return 404, {"error": {"message": f"no route {path}"}}

    def delete(self, path: str) -> tuple[int, Any]:
        refused = self.refuse_status or self.refuse_delete
        if refused is not None:
            return refused, {"error": {"message": f"stub refuses ({refused})"}}
        if garbled := self.garbled("delete"):
            return garbled
        parts = path.split("?")[0].rstrip("/").split("/")
        with self._lock:
            if parts[-2] != "files" or self.files.pop(parts[-1], None) is None:
                return 404, {"error": {"message": f"no file at {path}"}}
            self.deleted.append(parts[-1])
        return 200, {"id": parts[-1], "object": "file", "deleted": True}

    def garbled(self, route: str) -> tuple[int, RawAnswer] | None:
        """The garbage ``route`` answers in this test, if any."""
        answer = self.garbage.get(route)
        return None if answer is None else (200, answer)

    def _list(self, kind: str, path: str) -> tuple[int, Any]:
        """A page of batches or batch files, newest first, after the ``after`` id."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        with self._lock:
            self.lists.append(path)
            if self.refuse_list is not None:
                return self.refuse_list, {"error": {"message": "stub refuses to list"}}
            if kind == "batches":
                rows = [b.body(self._line_count(b)) for b in reversed(self.batches.values())
                        if b.id not in self.unlisted]
            else:
                purpose = query.get("purpose", [None])[0]
                rows = [self._file_body(f) for f in reversed(self.files)
                        if purpose is None or self.purposes[f] == purpose]
        after = query.get("after", [None])[0]
        if after is not None:
            rows = rows[[r["id"] for r in rows].index(after) + 1:]
        limit = int(query.get("limit", ["20"])[0])
        return 200, {"object": "list", "data": rows[:limit], "has_more": len(rows) > limit,
                     "first_id": rows[0]["id"] if rows else None,
                     "last_id": rows[:limit][-1]["id"] if rows else None}

    # ---- files ---------------------------------------------------------------------------
    def _upload(self, content_type: str, raw: bytes) -> tuple[int, Any]:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"content-type: {content_type}\r\n\r\n".encode() + raw)
        fields: dict[str, bytes] = {}
        filename = "upload"
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            fields[str(name)] = payload if isinstance(payload, bytes) else b""
            if name == "file":
                filename = part.get_filename() or filename
        if "file" not in fields:
            return 400, {"error": {"message": "no file in the upload"}}
        file_id = self._store(fields["file"], fields.get("purpose", b"").decode(), filename)
        return 200, self._file_body(file_id)

    def _store(self, data: bytes, purpose: str, filename: str | None = None) -> str:
        with self._lock:
            file_id = f"file-{next(self._ids)}"
            self.files[file_id], self.purposes[file_id] = data, purpose
            self.sent[file_id] = data
            self.names[file_id] = filename or f"{file_id}.jsonl"
        return file_id

    def _file_body(self, file_id: str) -> dict[str, Any]:
        return {"id": file_id, "object": "file", "bytes": len(self.sent[file_id]),
                "created_at": int(time.time()), "filename": self.names[file_id],
                "purpose": self.purposes[file_id], "status": "processed"}

    # ---- batches -------------------------------------------------------------------------
    def _create(self, body: dict[str, Any]) -> tuple[int, Any]:
        file_id = body.get("input_file_id")
        if file_id not in self.files or self.purposes.get(file_id) != "batch":
            return 400, {"error": {"message": "input_file_id is not a batch file"}}
        if body.get("completion_window") != "24h":
            return 400, {"error": {"message": "completion_window must be 24h"}}
        with self._lock:
            batch = StubBatch(f"{self.batch_prefix}{next(self._ids)}", file_id,
                              str(body.get("endpoint")),
                              metadata=dict(body.get("metadata") or {}))
            self.batches[batch.id] = batch
            if self.list_late:
                self.unlisted.add(batch.id)
        return 200, batch.body(self._line_count(batch))

    def _retrieve(self, batch_id: str) -> tuple[int, Any]:
        with self._lock:
            batch = self.batches.get(batch_id)
        if batch is None:
            return 404, {"error": {"message": f"no batch {batch_id}"}}
        batch.retrieves += 1
        if batch.status == "validating":
            batch.status = "in_progress"
        elif batch.status == "in_progress" and batch.retrieves > self.polls:
            self._finish(batch)
        elif batch.status == "cancelling":  # done cancelling: what it did not answer, listed
            lines = self.files.get(batch.input_file_id, b"").splitlines()
            batch.error_file_id = self._store(b"".join(
                json.dumps({"custom_id": json.loads(x)["custom_id"], "response": None,
                            "error": {"code": "batch_cancelled"}}).encode() + b"\n"
                for x in lines if x.strip()), "batch_output")
            batch.status = "cancelled"
        return 200, batch.body(self._line_count(batch))

    def _cancel(self, batch_id: str) -> tuple[int, Any]:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return 404, {"error": {"message": f"no batch {batch_id}"}}
            if batch.status not in ("validating", "in_progress"):
                return 409, {"error": {"message": f"cannot cancel a batch that is {batch.status}"}}
            batch.status = self.cancel_to
            self.cancelled.append(batch_id)
        return 200, batch.body(self._line_count(batch))

    def _line_count(self, batch: StubBatch) -> int:
        return len(self.sent[batch.input_file_id].splitlines())

    def _finish(self, batch: StubBatch) -> None:
        """Answer the batch's lines the way the test asked, into its output and error files."""
        if self.finish_as == "failed":
            batch.errors = self.batch_errors
            if not self.failed_files:
                batch.status = "failed"
                return
        out, errors = [], []
        lines = [json.loads(x) for x in self.files[batch.input_file_id].splitlines() if x.strip()]
        for index, line in enumerate(lines):
            req = self._request_type(line["url"], line["body"], {})
            if self.finish_as != "completed" and index >= self.answer_before_expiry:
                code = "batch_expired" if self.finish_as == "expired" else "batch_failed"
                errors.append({"id": f"req_{index}", "custom_id": line["custom_id"],
                               "response": None, "error": {"code": code, "message": code}})
                continue
            if self.fail_line is not None and self.fail_line(req):
                errors.append({"id": f"req_{index}", "custom_id": line["custom_id"],
                               "response": {"status_code": 500, "body": {"error": {
                                   "message": "server error"}}}, "error": None})
                continue
            self.line_requests.append(req)
            status, body, _ = self._answer(req)
            row = json.dumps({"id": f"req_{index}", "custom_id": line["custom_id"], "error": None,
                              "response": {"status_code": status, "body": body}})
            if self.corrupt_line is not None and self.corrupt_line(req):
                row = row[: len(row) // 2]  # a torn line: not JSON
            out.append(row)
        if out:
            batch.output_file_id = self._store(("\n".join(out) + "\n").encode(), "batch_output")
        if errors:
            batch.error_file_id = self._store(
                ("\n".join(json.dumps(e) for e in errors) + "\n").encode(), "batch_output")
        batch.status = self.finish_as
