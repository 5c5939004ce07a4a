"""Batch pricing (DREAM_LLM_BATCH): a run whose questions go as provider batches, through the
real `openai` client's files and batches API against the local stub (llm_stub_batches.py).

A batch run ends exactly like the online run; what a batch does not answer usably (expired,
failed lines, garbage, not finished in time) is deferred, never applied, and asked next run.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.factories import DARK_MODE_NOTES, NOW, add_entities, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest, StubResponse
from tests.support.llm_stub_batches import RawAnswer
from tests.support.topic_judge import topic_reply
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.llm import batch_lookup
from worker.llm.base import BatchItem
from worker.llm.batch import BatchPending
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.runs.scheduling import GateResult, recover_runs

TEA_NOTES = ["User drinks green tea every morning", "User drinks green tea each morning",
             "User drinks a cup of green tea every morning"]


def _notes_of(req: StubRequest) -> list[dict[str, Any]]:
    start = req.user.index("[")
    notes, _ = json.JSONDecoder().raw_decode(req.user[start:])
    return list(notes)


def _relation(a: str, b: str) -> str:
    sides = [("tabs" in t, "spaces" in t) for t in (a, b)]
    return "conflicting" if sides[0] != sides[1] and all(any(s) for s in sides) else "independent"


def answer(req: StubRequest) -> Any:
    """A careful judge: fuses a cluster keeping its first note, tabs vs spaces conflict,
    archives the orphan shown by prune, keeps the important note shown by archive."""
    if req.prompt_name == "consolidate":
        notes = _notes_of(req)
        return {"should_consolidate": True, "content": notes[0]["content"], "type": "Preference",
                "source_ids": [n["alias"] for n in notes], "reason": "one preference"}
    if req.prompt_name == "contradictions":
        return topic_reply(req.user, _relation)
    verdict = "archive" if req.prompt_name == "prune" else "keep"
    return {"decisions": [{"id": n["id"], "decision": verdict, "reason": "scripted"}
                          for n in _notes_of(req)]}


def _store(app: App, scope: Scope, clusters: tuple[list[str], ...] = (DARK_MODE_NOTES,),
           every_phase: bool = True) -> None:
    """Notes for every judge: clusters to fuse, a conflicting pair, an orphan of a deleted
    conversation (prune review) and an important idle note (archive review)."""
    p = scope.agent_id
    notes: list[dict[str, Any]] = [{"id": f"{p}-c{c}-{k}", "type": "Preference", "content": text,
              "created_at": days_ago(30 - k), "agent_id": p}
             for c, texts in enumerate(clusters) for k, text in enumerate(texts)]
    if every_phase:
        add_entities(app, {"kind": "agent", "id": p},
                     {"kind": "conversation", "id": f"{p}-gone", "status": "deleted"})
        notes += [
            {"id": f"{p}-tabs", "content": "User indents Python code with tabs",
             "created_at": days_ago(200), "agent_id": p},
            {"id": f"{p}-spaces", "content": "User indents Python code with spaces",
             "created_at": days_ago(10), "agent_id": p,
             "last_accessed_at": days_ago(1)},  # the host records reads: "old" is idle
            {"id": f"{p}-orphan", "content": "User asked about the invoice from that chat",
             "source_conversation_id": f"{p}-gone", "agent_id": p},
            {"id": f"{p}-old", "content": "Emergency contact is the office reception",
             "importance": 0.9, "created_at": days_ago(400), "agent_id": p},
        ]
    add_notes(app, *notes)


@pytest.fixture
def stub_app(app: App, llm_stub: LLMStub) -> App:
    llm_stub.set_handler(answer)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    app.settings.prune.review = "llm"
    app.settings.archive.review = "llm"
    app.settings.llm_batch_poll = 0.05
    app.settings.llm_batch_wait = 20
    return app


def _run(app: App, scope: Scope, phases: list[str] | None = None) -> str:
    run_id = service.create_run(app, scope, force=True, phases=phases, clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)
    return run_id


def _end_state(app: App, scope: Scope) -> list[tuple[str, str]]:
    with app.uow() as uow:
        notes = uow.notes.load_scope(scope, ("active", "archived", "revoked")).notes
    return sorted((n.status, n.content) for n in notes)


def _verdicts(app: App, run_id: str) -> list[tuple[str, str, str, Any]]:
    """Each child step's phase, name, status and verdict, without the batch records and ids."""
    with app.uow() as uow:
        steps = uow.runs.steps(run_id)
    return sorted((s.phase, s.name, s.status, (s.output or {}).get("verdict")) for s in steps
                  if s.parent_id is not None and not s.name.startswith("llm batch "))


def _usage(app: App, run_id: str) -> tuple[int, int]:
    with app.uow() as uow:
        steps = uow.runs.steps(run_id)
    parents = [s for s in steps if s.parent_id is None]
    return sum(s.tokens_in for s in parents), sum(s.tokens_out for s in parents)


def test_batch_run_ends_like_the_online_run(stub_app: App, llm_stub: LLMStub) -> None:
    """The same store in two scopes, one run online and one in batch mode: the same end state,
    the same steps and verdicts, the same token usage; the batch run sends no chat completion,
    only one batch per fan-out, each recorded on its run step."""
    online, batched = Scope("online"), Scope("batched")
    _store(stub_app, online)
    _store(stub_app, batched)
    online_run = _run(stub_app, online)
    chats = len(llm_stub.chat_requests())
    assert chats >= 4  # every judge asked: consolidate, contradictions, prune, archive
    stub_app.settings.llm_batch = True
    batch_run = _run(stub_app, batched)
    assert len(llm_stub.chat_requests()) == chats  # nothing online
    end = _end_state(stub_app, batched)
    assert end == _end_state(stub_app, online)
    assert {("archived", "User asked about the invoice from that chat"),
            ("revoked", "User indents Python code with tabs"),
            ("active", DARK_MODE_NOTES[0])} <= set(end)
    assert ("consolidate", "cluster 1", "succeeded", "merge") in _verdicts(stub_app, batch_run)
    assert _verdicts(stub_app, batch_run) == _verdicts(stub_app, online_run)
    assert _usage(stub_app, batch_run) == _usage(stub_app, online_run) != (0, 0)
    assert len(llm_stub.batches.line_requests) == chats
    with stub_app.uow() as uow:
        records = [s for s in uow.runs.steps(batch_run) if s.name.startswith("llm batch ")]
        online_row, batch_row = uow.runs.get(online_run), uow.runs.get(batch_run)
        assert online_row is not None and batch_row is not None
        status = {online_run: online_row.status, batch_run: batch_row.status}
    assert sorted(r.phase for r in records) == ["archive", "consolidate", "contradictions",
                                                "prune"]
    assert {(r.input or {})["batch_id"] for r in records} == set(llm_stub.batches.batches)
    assert status[batch_run] == status[online_run]
    assert all(llm_stub.batches.purposes[b.input_file_id] == "batch"
               for b in llm_stub.batches.batches.values())


def _consolidate_run(app: App, scope: Scope) -> tuple[str, list[tuple[Any, Any]]]:
    run_id = _run(app, scope, ["consolidate"])
    with app.uow() as uow:
        steps = uow.runs.steps(run_id)
    clusters = sorted(((s.output or {}).get("verdict"), (s.output or {}).get("reason", ""))
                      for s in steps if s.parent_id is not None and s.name.startswith("cluster"))
    return run_id, clusters


def _active(app: App, scope: Scope) -> list[str]:
    return [c for status, c in _end_state(app, scope) if status == "active"]


def test_expired_batch_defers_its_items_and_the_next_run_asks_again(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A batch that expires before answering: the cluster is deferred (nothing merged); the
    next run submits a new batch and merges it."""
    scope = Scope("expiring")
    _store(stub_app, scope, every_phase=False)
    stub_app.settings.llm_batch = True
    llm_stub.batches.finish_as = "expired"
    _, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    assert "expired: the provider's 24 h completion window ended" in clusters[0][1]
    assert len(_active(stub_app, scope)) == len(DARK_MODE_NOTES)
    llm_stub.batches.finish_as = "completed"
    _, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["merge"]
    assert _active(stub_app, scope) == [DARK_MODE_NOTES[0]]
    assert len(llm_stub.batches.batches) == 2


def _is_tea(req: StubRequest) -> bool:
    return "green tea" in req.user


def _negative_usage(req: StubRequest) -> Any:
    """The careful judge's answer with a usage that gives a billion tokens back."""
    reply = answer(req)
    return StubResponse(body={
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "stub-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": json.dumps(reply)}}],
        "usage": {"prompt_tokens": -10**9, "completion_tokens": 1, "total_tokens": 1}})


def _refused() -> StubResponse:
    """A refusal: no content, the API's ``refusal`` field."""
    return StubResponse(body={
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "stub-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": None, "refusal": "I can't help with that."}}]})


@pytest.mark.parametrize("broken", ["failed_line", "torn_line", "garbage_reply",
                                    "negative_usage", "unstorable_reply", "refusal"])
def test_a_failed_torn_or_garbage_line_defers_only_its_item(
        stub_app: App, llm_stub: LLMStub, broken: str) -> None:
    """Two clusters in one batch; the tea cluster's line fails (error file), is torn (not
    JSON), answers garbage (a NUL in a string too) or a negative token count (charged before: the run's budget was
    given a billion tokens back and the fusion applied): that cluster is deferred, the other
    merges, and no count below zero reaches the run's usage."""
    scope = Scope(f"partial-{broken}")
    _store(stub_app, scope, clusters=(DARK_MODE_NOTES, TEA_NOTES), every_phase=False)
    stub_app.settings.llm_batch = True
    if broken == "failed_line":
        llm_stub.batches.fail_line = _is_tea
    elif broken == "torn_line":
        llm_stub.batches.corrupt_line = _is_tea
    elif broken == "garbage_reply":
        llm_stub.set_handler(lambda req: "no JSON here" if _is_tea(req) else answer(req))
    elif broken == "unstorable_reply":  # before: PostgreSQL refused the write, the phase failed
        llm_stub.set_handler(lambda req: {**answer(req), "reason": "one\x00preference"}
                             if _is_tea(req) else answer(req))
    elif broken == "refusal":
        llm_stub.set_handler(lambda req: _refused() if _is_tea(req) else answer(req))
    else:
        llm_stub.set_handler(lambda req: _negative_usage(req) if _is_tea(req) else answer(req))
    run_id, clusters = _consolidate_run(stub_app, scope)
    assert sorted(v for v, _ in clusters) == ["deferred", "merge"]
    if broken == "refusal":
        assert any(r.startswith("the model refused to answer") for _, r in clusters)
    assert min(_usage(stub_app, run_id)) >= 0
    active = _active(stub_app, scope)
    assert DARK_MODE_NOTES[0] in active and not set(DARK_MODE_NOTES[1:]) & set(active)
    assert set(TEA_NOTES) <= set(active)


def test_a_batch_not_finished_in_time_is_deferred_in_process(
        stub_app: App, llm_stub: LLMStub) -> None:
    """In-process the wait is bounded (DREAM_LLM_BATCH_WAIT): a batch still in progress after
    it is deferred, with the reason on the step; nothing is applied."""
    scope = Scope("slow")
    _store(stub_app, scope, every_phase=False)
    stub_app.settings.llm_batch = True
    stub_app.settings.llm_batch_wait = 0.3
    llm_stub.batches.polls = 10_000
    _, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    assert re.search(r"not finished within DREAM_LLM_BATCH_WAIT", clusters[0][1])
    assert len(_active(stub_app, scope)) == len(DARK_MODE_NOTES)


def test_batch_requests_leave_through_the_outbound_boundary(
        stub_app: App, llm_stub: LLMStub) -> None:
    """R29 in batch mode: with redaction on the uploaded batch file carries placeholders, never
    the address; the reply's placeholder is put back when the batch is read."""
    email = "jane.doe@example.com"
    scope = Scope("redacted")
    stub_app.settings.privacy.redact = True
    stub_app.settings.llm_batch = True
    _store(stub_app, scope, clusters=([f"{DARK_MODE_NOTES[0]}, mail {email}",
                                       *DARK_MODE_NOTES[1:]],), every_phase=False)
    _consolidate_run(stub_app, scope)
    uploads = [data for fid, data in llm_stub.batches.sent.items()
               if llm_stub.batches.purposes[fid] == "batch"]
    assert uploads and all(email.encode() not in data for data in uploads)
    assert b"[EMAIL_1]" in uploads[0]
    assert _active(stub_app, scope) == [f"{DARK_MODE_NOTES[0]}, mail {email}"]


def test_a_finished_batch_leaves_no_file_at_the_provider(
        stub_app: App, llm_stub: LLMStub) -> None:
    """The uploaded requests (every prompt: note text) and the output and error files (every
    reply) stayed with the provider after the run read them; a provider keeps uploaded files
    until they are deleted, so no erasure could ever reach them. Now each is deleted once its
    batch is read; the run ends as before."""
    scope = Scope("forgotten")
    _store(stub_app, scope, clusters=(DARK_MODE_NOTES, TEA_NOTES))
    llm_stub.batches.fail_line = _is_tea  # an error file too
    stub_app.settings.llm_batch = True
    _run(stub_app, scope)
    batches = llm_stub.batches
    assert any(b.error_file_id for b in batches.batches.values())
    assert batches.files == {} and sorted(batches.deleted) == sorted(batches.sent)
    assert len(batches.sent) >= 2 * len(batches.batches)  # input and output of each
    assert ("active", DARK_MODE_NOTES[0]) in _end_state(stub_app, scope)


def test_a_provider_that_keeps_the_files_fails_nothing(
        stub_app: App, llm_stub: LLMStub, capsys: pytest.CaptureFixture[str]) -> None:
    """Deleting is best effort: a provider refusing it leaves the run as it was and each file
    it keeps is named (by id, never its text) in a warning."""
    scope = Scope("kept")
    _store(stub_app, scope, every_phase=False)
    stub_app.settings.llm_batch = True
    llm_stub.batches.refuse_delete = 500
    _, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["merge"]
    assert llm_stub.batches.files and not llm_stub.batches.deleted
    logged = capsys.readouterr()
    assert "llm.batch_file_kept" in logged.out + logged.err
    assert DARK_MODE_NOTES[1] not in logged.out + logged.err


def test_a_result_line_nested_past_the_parser_depth_answers_nothing() -> None:
    """A line of the output file nested 100,000 deep made json.loads raise RecursionError out
    of reading the batch: the phase failed. It is a line that is no result (its request stays
    unanswered, so deferred); the lines around it are read."""
    from worker.llm.base import BatchState
    from worker.llm.openai_batch import read_output

    good = {"custom_id": "q-2", "response": {"status_code": 200, "body": {
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "{}"}}]}}}
    state = BatchState("batch_1", "completed")
    read_output('{"custom_id": "q-1", "response": ' + "[" * 100_000 + "\n" + json.dumps(good),
                state, "m")
    assert list(state.replies) == ["q-2"] and not state.failed


def _result(custom_id: str, content: str) -> str:
    return json.dumps({"custom_id": custom_id, "response": {"status_code": 200, "body": {
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}]}}})


def test_a_request_answered_twice_is_failed_not_the_last_answer_read() -> None:
    """A provider's output holding two results for one custom id (two replies that disagree,
    or a reply in the output file and a failure in the error file): before, the last reply
    read was applied (or the reply beat the failure). Now the request is failed (deferred),
    the others are read as usual."""
    from worker.llm.base import BatchState
    from worker.llm.openai_batch import read_output

    state = BatchState("batch_1", "completed")
    read_output("\n".join([_result("q-1", '{"verdict": "merge"}'), _result("q-2", "{}"),
                           _result("q-1", '{"verdict": "keep"}'), _result("q-3", "{}")]),
                state, "m")
    read_output(json.dumps({"custom_id": "q-3", "response": None,
                            "error": {"code": "batch_expired"}}), state, "m")
    assert list(state.replies) == ["q-2"]
    assert state.failed == {"q-1": "the batch answered this request more than once",
                            "q-3": "the batch answered this request more than once"}


def test_both_answers_of_a_request_answered_twice_are_billed() -> None:
    """Neither of two replies to one request is used, but the provider billed both: their
    tokens are the state's unused ones, which the run's budget is charged (before: lost)."""
    from worker.llm.base import BatchState
    from worker.llm.openai_batch import read_output

    def billed(custom_id: str, tokens_in: int, tokens_out: int) -> str:
        row = json.loads(_result(custom_id, "{}"))
        row["response"]["body"]["usage"] = {"prompt_tokens": tokens_in,
                                            "completion_tokens": tokens_out,
                                            "total_tokens": tokens_in + tokens_out}
        return json.dumps(row)

    state = BatchState("batch_1", "completed")
    read_output("\n".join([billed("q-1", 10, 3), billed("q-2", 5, 1), billed("q-1", 20, 4)]),
                state, "m")
    assert list(state.replies) == ["q-2"] and (state.unused_in, state.unused_out) == (30, 7)


@pytest.mark.parametrize("prefix", ["batch_" + "x" * 300, "batch\x1b[2J_"])
def test_a_batch_id_that_is_no_id_defers_the_items(
        stub_app: App, llm_stub: LLMStub, prefix: str) -> None:
    """A provider answering a batch id of 300 characters (the batch's step name holds 200:
    PostgreSQL refused the ledger's write, the phase failed and the batch was left running
    with nobody to release it) or with an escape sequence (printed raw by `dream runs
    cancel`): the items are deferred with one line naming the problem, the uploaded requests
    (note text) deleted, nothing applied."""
    scope = Scope("bad-batch-id")
    _store(stub_app, scope, every_phase=False)
    stub_app.settings.llm_batch = True
    llm_stub.batches.batch_prefix = prefix
    run_id, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    assert "batch id that is no id" in clusters[0][1] and "\x1b" not in clusters[0][1]
    assert llm_stub.batches.sent and llm_stub.batches.files == {}
    assert len(_active(stub_app, scope)) == len(DARK_MODE_NOTES)
    with stub_app.uow() as uow:
        steps = [s for s in uow.runs.steps(run_id) if s.name.startswith("llm batch ")]
    # Only the submission written ahead, closed with the reason (no batch id recorded).
    assert [(s.status, "batch_id" in (s.input or {})) for s in steps] == [("skipped", False)]
    assert "batch id that is no id" in (steps[0].output or {})["lookup"]["why"]


def _pending_batch(llm_stub: LLMStub) -> Any:
    """One question submitted as a provider batch the stub keeps pending: its batch."""
    from tests.llm.test_batch import MemoryLedger, _ask, _batch_ctx
    from worker.llm.batch import reschedule_while_pending

    llm_stub.set_handler(answer)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _ask(ctx, 1, ledger)
    (batch,) = llm_stub.batches.batches.values()
    return batch


@pytest.mark.parametrize("status", ["in_progress\x1b]0;owned\x07", "x" * 500, "Completed"])
def test_a_batch_status_that_is_no_status_is_unknown(llm_stub: LLMStub, status: str) -> None:
    """A provider's status is recorded on the batch's step, logged and printed by `dream runs
    cancel` ("provider batch B: already <status>"): an escape sequence went out raw, pages of
    text were stored. What is no status reads ``unknown``, which is never finished (waited on,
    then given up)."""
    from worker.llm.openai_batch import release_batch

    batch = _pending_batch(llm_stub)
    batch.status = status
    llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                              timeout=10, max_retries=0)
    assert llm.batch_state(batch.id, []).status == "unknown"
    release = release_batch(llm, batch.id)
    assert release.status == "unknown" and status not in str(release.as_dict())


_NOT_AN_OBJECT = {"html": RawAnswer(b"<html><body>Welcome to nginx!</body></html>", "text/html"),
                  "cut": RawAnswer(b'{"id": "file-1", "object": "fi'),
                  "other": RawAnswer(b'{"unexpected": 1}')}


@pytest.mark.parametrize("body", sorted(_NOT_AN_OBJECT))
@pytest.mark.parametrize(("route", "says"), [
    ("upload", "model endpoint answered HTTP 200 without a file; check DREAM_LLM_BASE_URL"),
    ("create", "model endpoint answered HTTP 200 without a batch; check DREAM_LLM_BASE_URL"),
    ("retrieve", "model endpoint answered HTTP 200 without a batch; check DREAM_LLM_BASE_URL"),
])
def test_an_http_200_that_is_no_file_or_batch_defers_the_items(
        stub_app: App, llm_stub: LLMStub, route: str, says: str, body: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy's HTML page, JSON cut short or another JSON object in answer to the upload, the
    batch's creation or a poll was an AttributeError ('str' object has no attribute 'id') or a
    JSONDecodeError that failed the phase. It is the endpoint's failure: the cluster is
    deferred with one line naming it, nothing applied, no uploaded request (note text) left at
    the provider (after a create, once a look made when a batch would be listed finds none),
    and the next run with a sane endpoint merges it."""
    scope = Scope(f"garbage-{route}-{body}")
    _store(stub_app, scope, every_phase=False)
    stub_app.settings.llm_batch = True
    llm_stub.batches.garbage[route] = _NOT_AN_OBJECT[body]
    run_id, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    assert clusters[0][1].startswith(says), clusters[0][1]
    assert len(_active(stub_app, scope)) == len(DARK_MODE_NOTES)
    with stub_app.uow() as uow:
        run = uow.runs.get(run_id)
    assert run is not None and run.status == "blocked"
    if route == "create":  # the batch may exist, listed late: its input kept for a later look
        assert list(llm_stub.batches.files) == list(llm_stub.batches.sent)
        monkeypatch.setattr(batch_lookup, "LISTED_WITHIN", 0.0)
        recover_runs(stub_app, utcnow(), GateResult([], {}, [], []))
    if route != "retrieve":  # a batch that runs keeps its input until it is read or released
        assert llm_stub.batches.files == {}
    llm_stub.batches.garbage.clear()
    _, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["merge"]


@pytest.mark.parametrize("route", ["cancel", "delete"])
def test_a_release_or_delete_answered_with_garbage_fails_nothing(
        llm_stub: LLMStub, route: str) -> None:
    """Cancelling a batch or deleting its files answered by JSON cut short: the release says
    what went wrong (no JSONDecodeError out of it) and the file is reported kept."""
    from worker.llm.openai_batch import release_batch

    batch = _pending_batch(llm_stub)
    llm_stub.batches.garbage[route] = _NOT_AN_OBJECT["cut"]
    llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                              timeout=10, max_retries=0)
    release = release_batch(llm, batch.id)
    if route == "cancel":
        assert release.problem == ("model endpoint answered HTTP 200 without a batch; check "
                                   "DREAM_LLM_BASE_URL")
    else:
        assert release.cancelled and release.kept == [batch.input_file_id]
        assert release.problem == f"the provider kept file {batch.input_file_id}"


def test_a_batch_create_whose_answer_is_lost_is_not_sent_again(llm_stub: LLMStub) -> None:
    """The provider created the batch and the answer never came (the connection closed): the
    client does not create it again (a second batch billed for the same questions, the first
    unknown to the run: never charged, never released). Before, the openai client's own
    retries created up to three batches; the batch made is found by its key and adopted."""
    llm_stub.set_handler(answer)
    llm_stub.batches.lost_creates = 1
    llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                              timeout=10, max_retries=2)
    item = BatchItem("q-1", "consolidate", "sys", "user", {"type": "object"})
    batch_id = llm.submit_batch([item], "dw-" + "a" * 32)
    assert list(llm_stub.batches.batches) == [batch_id]
    assert llm_stub.batches.batches[batch_id].metadata["submission"] == "dw-" + "a" * 32
