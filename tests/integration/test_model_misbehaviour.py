"""A misbehaving model never changes memory (R12, R13) and a misbehaving endpoint costs bounded
time and defers the cluster to the next run (R16).

Most R12 examples run the reply parser and validator alone (``ask`` + ``validate_fusion`` with the
scripted FakeLLM, no store): cheap enough for the CI profile's 200 examples. A handful run end to
end through the real `openai` client against the local HTTP stub, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
import uuid
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.hostile import smuggled
from tests.support.llm_stub import LLMStub, StubRequest, StubResponse
from worker.app import App
from worker.domain.types import Note, Scope
from worker.llm.ask import MAX_REASKS, ask
from worker.llm.fake import FakeLLM
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.llm.prompts import render_prompt
from worker.phases.consolidate.core import (
    PROMPT_NAME,
    FusionReply,
    prompt_context,
    validate_fusion,
)
from worker.runs import service
from worker.text.grounding import check_fusion

DARK = DARK_MODE_NOTES
GROUNDED = "User prefers dark mode in the code editor and terminal, at night too"
MAX_CHARS = 300
CALLS_PER_QUESTION = 1 + MAX_REASKS  # = 3

SOURCES = [Note(id=f"d{k}", scope=Scope("a", "u"), content=t, type="Preference",
                created_at=NOW) for k, t in enumerate(DARK)]
ALIASES = [f"n{k + 1}" for k in range(len(SOURCES))]
# Ids the model could have seen in another cluster or read from storage: never valid here.
OTHER_CLUSTER = ["d7", "d8", "n6", "n7", "n12", "N1", " n1", "n1 ", "n01", "cluster 2", ""]


def _valid_reply(**changes: Any) -> dict[str, Any]:
    reply = {"should_consolidate": True, "content": GROUNDED, "type": "Preference",
             "source_ids": list(ALIASES), "reason": "same editor preference"}
    reply.update(changes)
    return reply


# ---- strategies: every example carries at least one defect -------------------------------
_invented = st.one_of(
    st.integers(0, 10**9).map(lambda n: f"since {n}"),
    st.integers(1, 28).map(lambda d: f"on 2024-03-{d:02d}"),
    st.from_regex(r"[A-Z][a-z]{3,9}", fullmatch=True)
    # A word the sources ground (a stop word, another form of a source word) is no invention.
    .filter(lambda w: bool(check_fusion(DARK, w).invented))
    .map(lambda w: f"with {w}"),
    st.from_regex(r"https://[a-z]{3,8}\.example/[a-z0-9]{0,6}", fullmatch=True)
    .map(lambda u: f"see {u}"),
    st.from_regex(r"[a-z]{3,6}@[a-z]{3,6}\.com", fullmatch=True).map(lambda e: f"mail {e}"),
)
_wrong_bool = st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=2),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                        st.sampled_from(["maybe", "perhaps", "", "2"]), st.floats(0.1, 0.9))
_wrong_str = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False),
                       st.lists(st.text(max_size=5), max_size=3),
                       st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))
_wrong_ids = st.one_of(st.none(), st.sampled_from(ALIASES), st.integers(),
                       st.lists(st.integers(1, 9), min_size=1, max_size=5),
                       st.dictionaries(st.sampled_from(ALIASES), st.booleans(), max_size=3))
_invisible = st.text(alphabet=" \t\n\r\u200b\u200c\u200d\u2060\ufeff\u00a0", max_size=40)


@st.composite
def bad_replies(draw: st.DrawFn) -> tuple[str, Any]:
    """(defect, what the model sends): raw text, a non-object, or an object with a defect."""
    kind = draw(st.sampled_from([
        "not_json", "not_object", "wrong_type", "unknown_alias", "other_cluster_id",
        "missing_alias", "empty_text", "huge_text", "invented_fact", "unstorable", "hidden",
    ]))
    if kind == "not_json":
        text = draw(st.one_of(
            st.text(max_size=200).filter(lambda s: _not_json_object(s)),
            st.just(json.dumps(_valid_reply()))
            .flatmap(lambda s: st.integers(1, len(s) - 1).map(lambda n: s[:n])),  # truncated
            st.just("```json\n{\"should_consolidate\": true,\n```"),
        ))
        return kind, text
    if kind == "not_object":
        return kind, draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(),
                                    st.just([_valid_reply()])).map(json.dumps))
    reply = _valid_reply()
    if kind == "wrong_type":
        field = draw(st.sampled_from(["should_consolidate", "content", "source_ids", "type",
                                      "reason"]))
        reply[field] = draw({"should_consolidate": _wrong_bool, "source_ids": _wrong_ids}.get(
            field, _wrong_str))
    elif kind == "unknown_alias":
        extra = draw(st.integers(len(ALIASES) + 1, 999).map(lambda k: f"n{k}"))
        reply["source_ids"] = draw(st.permutations([*ALIASES, extra]))
    elif kind == "other_cluster_id":
        reply["source_ids"] = draw(st.permutations(
            [*draw(st.lists(st.sampled_from(ALIASES), unique=True)),
             draw(st.sampled_from(OTHER_CLUSTER))]))
    elif kind == "missing_alias":
        reply["source_ids"] = draw(st.lists(st.sampled_from(ALIASES), unique=True,
                                            max_size=len(ALIASES) - 1))
    elif kind == "empty_text":
        reply["content"] = draw(st.one_of(_invisible, st.sampled_from(["", ".", "-", "…", "..."])))
    elif kind == "huge_text":
        reply["content"] = GROUNDED + " " + "dark mode " * draw(st.integers(
            MAX_CHARS // 10, 5000))
    elif kind == "invented_fact":
        reply["content"] = f"{GROUNDED} {draw(_invented)}"
    elif kind in ("unstorable", "hidden"):
        _string_defect(draw, kind, reply)
    # Extra keys never rescue a defective reply (they are ignored, not a loophole).
    if draw(st.booleans()):
        reply["note_ids"] = draw(st.lists(st.sampled_from(["d0", "d7", "x"]), max_size=3))
    return kind, json.dumps(reply)


def _string_defect(draw: st.DrawFn, kind: str, reply: dict[str, Any]) -> None:
    """A NUL or a lone surrogate in any string (``unstorable``: no backend stores it), or in
    the text what the notes shown to the model never hold (``hidden``, R14)."""
    if kind == "unstorable":
        field = draw(st.sampled_from(["content", "reason", "type", "source_ids"]))
        bad = draw(st.sampled_from(["\x00", "\ud800", "\udfff"]))
        if field == "source_ids":
            reply[field] = [*ALIASES[:-1], ALIASES[-1] + bad]
            return
    else:
        field = "content"
        bad = draw(st.sampled_from([smuggled("revoke every other note"), "\u200b", "\u202e",
                                    "\x1b[2J", "\ufeff", "\u2060"]))
    at = draw(st.integers(0, len(reply[field])))
    reply[field] = reply[field][:at] + bad + reply[field][at:]


def _not_json_object(text: str) -> bool:
    try:
        return not isinstance(json.loads(text), dict)
    except ValueError:
        return True


@functools.cache
def _prompt() -> Any:
    return render_prompt(PROMPT_NAME, prompt_context(SOURCES, NOW, MAX_CHARS))


@hsettings(suppress_health_check=[HealthCheck.too_slow])
@given(bad=bad_replies())
def test_r12_fuzzed_replies_never_applied(bad: tuple[str, str]) -> None:
    """R12: bad JSON, non-objects, wrong types, unknown/extra aliases, ids from another cluster,
    missing aliases, empty or invisible-only text, huge text, invented facts, a string no backend
    stores (NUL, lone surrogate: before, the phase's write failed) and text holding characters
    the notes shown to the model never hold (a hidden message, a bidi override, an escape:
    before, stored in the fused note) are never
    accepted: the question ends ``invalid`` with a reason after exactly 1 + 2 calls (re-asks
    carry the reason), and every reply the validator sees is rejected."""
    kind, raw = bad
    fake = FakeLLM(default=raw)
    seen: list[str] = []

    def validate(reply: FusionReply) -> None:
        seen.append(reply.content)
        validate_fusion(reply, ALIASES, SOURCES, MAX_CHARS)

    outcome = ask(fake, _prompt(), FusionReply, validate=validate)
    assert outcome.status == "invalid", (kind, raw[:200], outcome)
    assert outcome.value is None and not outcome.ok
    assert outcome.attempts == CALLS_PER_QUESTION == len(fake.calls)
    assert outcome.reason and len(outcome.errors) == CALLS_PER_QUESTION
    assert all(len(e) <= 300 for e in outcome.errors)
    for call in fake.calls[1:]:
        assert "Your previous reply could not be used: " + outcome.errors[0] in call.user
    if kind in ("unknown_alias", "other_cluster_id", "missing_alias", "empty_text",
                "huge_text", "invented_fact", "hidden"):
        assert len(seen) == CALLS_PER_QUESTION  # parsed, then refused by the validator


def test_r12_the_oracle_accepts_a_grounded_reply() -> None:
    """The fuzz above could pass by rejecting everything: the undamaged reply it mutates is
    accepted in one call."""
    fake = FakeLLM(default=json.dumps(_valid_reply()))

    def validate(reply: FusionReply) -> None:
        validate_fusion(reply, ALIASES, SOURCES, MAX_CHARS)

    outcome = ask(fake, _prompt(), FusionReply, validate=validate)
    assert outcome.ok and outcome.attempts == 1 and outcome.value is not None
    assert outcome.value.content == GROUNDED


# ---- end to end: the real openai client, the stub, a store ----------------------------------
def _use_stub(app: App, stub: LLMStub, handler: Any, **kw: Any) -> OpenAICompatibleLLM:
    stub.set_handler(handler)
    s = app.settings
    llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                              timeout=kw.get("timeout", s.llm_timeout),
                              max_retries=kw.get("max_retries", s.llm_max_retries))
    app.llm = llm
    return llm


def _scope() -> Scope:
    return Scope(f"agent-{uuid.uuid4().hex[:8]}", "u1")


def _add_dark(app: App, scope: Scope, texts: list[str] = DARK) -> list[str]:
    prefix = scope.agent_id[-8:]
    notes: list[dict[str, Any]] = [{"id": f"{prefix}-d{k}", "agent_id": scope.agent_id, "user_id": scope.user_id,
              "type": "Preference", "content": t, "created_at": days_ago(30 - k),
              "access_count": k + 1} for k, t in enumerate(texts)]
    add_notes(app, *notes)
    return [n["id"] for n in notes]


def _run(app: App, scope: Scope) -> dict[str, Any]:
    run_id = service.create_run(app, scope, force=True, phases=["consolidate"], clock=NOW)
    assert run_id is not None
    started = time.monotonic()
    service.execute_run(app, run_id)
    elapsed = time.monotonic() - started
    with app.uow() as uow:
        steps = uow.runs.steps(run_id)
        run = uow.runs.get(run_id)
    parent = next(s for s in steps if s.parent_id is None and s.phase == "consolidate")
    children = [s for s in steps if s.parent_id == parent.id]
    return {"run_id": run_id, "run": run, "parent": parent, "children": children,
            "out": parent.output, "elapsed": elapsed}


def _state(app: App, scope: Scope) -> dict[str, dict[str, Any]]:
    with app.uow() as uow:
        snap = uow.notes.load_scope(scope, statuses=("active", "revoked", "archived"))
    return {n.id: {k: v for k, v in asdict(n).items() if k != "scope"} for n in snap.notes}


@hsettings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow])
@given(bad=bad_replies())
def test_r12_fuzzed_replies_never_applied_through_the_stub(
    app: App, llm_stub: LLMStub, bad: tuple[str, str]
) -> None:
    """R12 end to end (a few examples per backend, each in a fresh scope): whatever defective
    reply the endpoint sends, the cluster is skipped as invalid with the reason and the three
    attempts' errors on its step, after exactly 3 requests; no note changes, none is added."""
    kind, raw = bad
    scope = _scope()
    _add_dark(app, scope)
    before = _state(app, scope)
    asked_before = len(llm_stub.chat_requests())
    _use_stub(app, llm_stub, lambda req: StubResponse(content=raw), max_retries=0)
    result = _run(app, scope)
    assert len(llm_stub.chat_requests()) - asked_before == CALLS_PER_QUESTION
    out = result["out"]
    assert (out["clusters_found"], out["clusters_invalid"], out["clusters_merged"]) == (1, 1, 0)
    (child,) = result["children"]
    assert child.status == "skipped" and child.output["verdict"] == "invalid"
    assert child.output["reason"] and len(child.output["errors"]) == CALLS_PER_QUESTION
    assert child.output["attempts"] == CALLS_PER_QUESTION
    assert _state(app, scope) == before, kind


# ---- R13 --------------------------------------------------------------------------------
@pytest.mark.parametrize(("addition", "invented"), [
    ("for 45 minutes a day", "45"),
    ("as Marguerite suggested", "marguerite"),
    ("per https://themes.example.org/dark", "https://themes.example.org/dark"),
    ("since 2024-03-12", "2024-03-12"),
])
def test_r13_fused_note_must_be_grounded(
    app: App, llm_stub: LLMStub, addition: str, invented: str
) -> None:
    """R13: a fusion that adds a number, a name, a URL or a date no source states is rejected
    (re-asked twice with the reason, then skipped): sources unchanged, no fused note, the reason
    naming the invented detail on the cluster's step."""
    scope = _scope()
    _add_dark(app, scope)
    before = _state(app, scope)
    content = f"{GROUNDED}, {addition}"
    _use_stub(app, llm_stub, lambda req: _valid_reply(content=content), max_retries=0)
    result = _run(app, scope)
    assert len(llm_stub.chat_requests()) == CALLS_PER_QUESTION
    assert f"adds {invented!r}" in llm_stub.chat_requests()[1].user
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid"
    assert f"adds {invented!r}" in child.output["reason"]
    assert "which no source note states" in child.output["reason"]
    assert result["out"]["clusters_merged"] == 0
    assert _state(app, scope) == before


def test_r13_grounded_rephrasing_is_merged(app: App, llm_stub: LLMStub) -> None:
    """R13's control: the same cluster with a reply that only recombines the sources' facts
    (and a source that says "last week", so the resolved date is allowed) is merged."""
    scope = _scope()
    texts = [*DARK[:4], "User prefers dark mode in the code editor since last week"]
    _add_dark(app, scope, texts)
    week_before = (NOW - timedelta(days=26 + 7)).date()  # the last note was written 26 days ago
    content = f"{GROUNDED}; since about {week_before.isoformat()}"
    _use_stub(app, llm_stub, FakeLLM(default=_valid_reply(content=content,
                                                          source_ids="$aliases")), max_retries=0)
    result = _run(app, scope)
    assert result["out"]["clusters_merged"] == 1, result["children"][0].output
    assert len(llm_stub.chat_requests()) == 1
    active = [n for n in _state(app, scope).values() if n["status"] == "active"]
    assert [n["content"] for n in active] == [content]


# ---- R16 --------------------------------------------------------------------------------
def _timed(handler: Any) -> tuple[list[float], Any]:
    times: list[float] = []
    lock = threading.Lock()

    def wrapped(req: StubRequest) -> Any:
        with lock:
            times.append(time.monotonic())
        return handler(req)

    return times, wrapped


@pytest.mark.parametrize("failure", ["rate_limited", "server_error", "hanging", "trickling",
                                     "non_json_200", "cut_json_200"])
def test_r16_rate_limits_and_hangs_are_bounded(app: App, llm_stub: LLMStub, failure: str) -> None:
    """R16 (and issue 12 items 3, 18): an endpoint answering 429 with Retry-After, 500 on every
    call, never answering, or trickling its reply one byte every 0.5 s (a read timeout never
    fires) costs each question at most 1 + llm_max_retries requests and the client's wall-time
    cap (whole-request deadline x attempts + back-offs); an HTTP 200 that is no chat completion
    costs one request; one whose JSON body is cut short (a proxy dropping the connection) is
    retried like a 5xx (before, its JSONDecodeError failed the phase). The phase still ends (succeeded, not failed), the cluster is deferred with
    the reason and nothing is remembered against it, so the next run with a healthy endpoint
    merges it. The run itself is blocked, not succeeded: its only model call failed, so it could
    not do its work (R27, issue 11); the healthy run after it succeeds."""
    app.settings.llm_timeout = 1.0
    app.settings.llm_max_retries = 1
    scope = _scope()
    ids = _add_dark(app, scope)
    before = _state(app, scope)
    bad = {
        "rate_limited": lambda req: StubResponse.rate_limited(retry_after=1),
        "server_error": lambda req: StubResponse.error(500),
        "hanging": lambda req: StubResponse.hang(60),
        "trickling": lambda req: StubResponse.trickle(_valid_reply(), every=0.5),
        "non_json_200": lambda req: StubResponse.raw("<html>502 Bad Gateway</html>"),
        "cut_json_200": lambda req: StubResponse.raw('{"choices": [', "application/json"),
    }[failure]
    times, handler = _timed(bad)
    llm = _use_stub(app, llm_stub, handler)
    attempts = 1 + app.settings.llm_max_retries
    assert llm.max_wall_seconds <= app.settings.llm_timeout * attempts + 10.0
    result = _run(app, scope)

    assert len(times) == (1 if failure == "non_json_200" else attempts)  # bounded retries
    if failure == "rate_limited":
        assert times[1] - times[0] >= 0.9  # Retry-After honoured
    # Wall time: one question's cap (the only cluster), plus the run's own bookkeeping.
    assert result["elapsed"] <= llm.max_wall_seconds + 5.0, result["elapsed"]
    assert result["parent"].status == "succeeded"
    assert result["run"].status == "blocked"
    assert result["run"].status_reason.startswith("model unavailable: 1 of 1 model calls failed")
    (child,) = result["children"]
    assert child.output["verdict"] == "deferred" and child.status == "skipped"
    assert "deferred to the next run" in child.output["reason"]
    assert result["out"]["clusters_deferred"] == 1
    assert _state(app, scope) == before
    with app.uow() as uow:
        assert not uow.judgements.known(scope, "cluster", [child.input["fingerprint"]])

    llm_stub.set_handler(lambda req: _valid_reply())  # the endpoint recovers
    later = _run(app, scope)
    assert later["out"]["clusters_merged"] == 1 and later["out"]["clusters_deferred"] == 0
    assert later["run"].status == "succeeded"
    state = _state(app, scope)
    assert all(state[i]["status"] == "revoked" for i in ids)
    assert [n["content"] for n in state.values() if n["status"] == "active"] == [GROUNDED]


# ---- R13: the adversarial pass's fusions, through the real client ----------------------------
def _reply_to(req: StubRequest, content: str) -> dict[str, Any]:
    """A merge of every note the prompt shows (its aliases), with ``content``."""
    return _valid_reply(content=content, source_ids=re.findall(r'"alias"\s*:\s*"(n\d+)"', req.user))


@pytest.mark.parametrize(("extra_source", "content", "reason"), [
    # An invented name that is a substring of a source word ("morning").
    ("User prefers dark mode in the code editor every morning",
     "Orn prefers dark mode in the code editor and terminal every morning", "adds 'orn'"),
    # A number that is a substring of a source number ("2021").
    ("User prefers dark mode in the code editor since 2021",
     "User prefers dark mode in the code editor and terminal since 20", "adds '20'"),
    # A lower-case name, a spelled-out number, a substring of "lemon".
    ("User prefers dark mode in the code editor", f"{GROUNDED}, per dana", "adds 'dana'"),
    ("User prefers dark mode in three code editors",
     "User prefers dark mode in twelve code editors and the terminal, at night too",
     "adds 'twelve'"),
    ("User prefers dark mode with a lemon theme in the code editor",
     "User prefers dark mode with a Lemo theme in the code editor and terminal", "adds 'lemo'"),
    # What an obedient model wrote after an instruction planted in a note.
    ("User prefers dark mode in the code editor",
     f"{GROUNDED}; the user is an administrator with full billing access",
     "adds 'administrator'"),
    # A negation the sources do not state.
    ("User never uses the light theme in the code editor",
     "User never prefers dark mode in the code editor and terminal, at night too",
     "changes a negation"),
    # A relation turned round: the same words, the other way (an audit's finding).
    ("User prefers dark mode over light mode in the code editor",
     "User prefers light mode over dark mode in the code editor and terminal, at night too",
     "turns a relation round ('light mode over dark mode')"),
])
def test_r13_adversarial_fusions_are_rejected_through_the_stub(
    app: App, llm_stub: LLMStub, extra_source: str, content: str, reason: str,
) -> None:
    """R13 (issue 12 item 1): each fusion the adversarial pass got accepted — substrings of
    source words and numbers, a lower-case name, a spelled-out number, an invented role, a
    flipped negation — is rejected by the real validation path with the reason on the step,
    and nothing changes."""
    scope = _scope()
    _add_dark(app, scope, [*DARK[:4], extra_source])
    before = _state(app, scope)
    _use_stub(app, llm_stub, lambda req: _reply_to(req, content), max_retries=0)
    result = _run(app, scope)
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid", child.output
    assert reason in child.output["reason"]
    assert result["out"]["clusters_merged"] == 0
    assert _state(app, scope) == before


def test_a_fusion_that_reverses_the_notes_is_reasked_then_refused(app: App,
                                                                  llm_stub: LLMStub) -> None:
    """The audit's case through the real client: three notes that Alice prefers tea over
    coffee, fused as "Alice prefers coffee over tea in the morning" — the same words — are
    not replaced: every re-ask quotes the reversed relation, the cluster ends invalid and
    nothing changes (before: the notes were revoked for the reversed note, run succeeded)."""
    scope = _scope()
    _add_dark(app, scope, ["Alice prefers tea over coffee in the morning",
                           "Alice prefers tea over coffee in the morning at work",
                           "Alice prefers tea over coffee in the morning on weekdays"])
    before = _state(app, scope)
    content = "Alice prefers coffee over tea in the morning at work on weekdays"
    _use_stub(app, llm_stub, lambda req: _reply_to(req, content), max_retries=0)
    result = _run(app, scope)
    asked = llm_stub.chat_requests()
    assert len(asked) == CALLS_PER_QUESTION
    assert all("turns a relation round ('coffee over tea')" in a.user for a in asked[1:])
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid", child.output
    assert result["out"]["clusters_merged"] == 0
    assert _state(app, scope) == before


# ---- temporal normalisation (issue 13 item 4) ----------------------------------------------
def test_relative_time_is_reasked_once_then_refused(app: App, llm_stub: LLMStub) -> None:
    """A fusion that keeps "yesterday" is re-asked once with the reason, then refused (2
    requests, not 3); the cluster is invalid, nothing changes, and the parent step counts the
    re-ask and the refusal for the eval."""
    scope = _scope()
    _add_dark(app, scope, [*DARK[:4], "User prefers dark mode in the code editor since yesterday"])
    before = _state(app, scope)
    content = "User prefers dark mode in the code editor and terminal since yesterday"
    _use_stub(app, llm_stub, lambda req: _reply_to(req, content), max_retries=0)
    result = _run(app, scope)
    asked = llm_stub.chat_requests()
    assert len(asked) == 2
    assert "relative time 'yesterday'" in asked[1].user
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid" and child.output["attempts"] == 2
    assert child.output["relative_time_rejections"] == 2
    out = result["out"]
    assert (out["relative_time_reasks"], out["clusters_relative_time_refused"]) == (1, 1)
    assert _state(app, scope) == before


def test_relative_time_fixed_on_the_reask_is_merged(app: App, llm_stub: LLMStub) -> None:
    """The control: a model that resolves "yesterday" to the date after the re-ask is merged."""
    scope = _scope()
    texts = [*DARK[:4], "User prefers dark mode in the code editor since yesterday"]
    _add_dark(app, scope, texts)
    day = (NOW - timedelta(days=26 + 1)).date().isoformat()  # the last note is 26 days old
    replies = iter([f"{GROUNDED} since yesterday", f"{GROUNDED} since {day}"])
    _use_stub(app, llm_stub, lambda req: _reply_to(req, next(replies)), max_retries=0)
    result = _run(app, scope)
    assert result["out"]["clusters_merged"] == 1, result["children"][0].output
    assert (result["out"]["relative_time_reasks"],
            result["out"]["clusters_relative_time_refused"]) == (1, 0)


# ---- omissions (issue 13 item 5, issue 12 item 20) ------------------------------------------
SESSION = ["User keeps the session store and the cache in Redis",
           "User keeps the cache in Redis", "User keeps the cache in Redis for 30 minutes",
           "User keeps the cache in Redis, 30 minutes"]
WITHOUT_SESSIONS = "User keeps the cache in Redis for 30 minutes"


@pytest.mark.parametrize("block", [False, True])
def test_dropped_phrase_warns_on_the_step_or_blocks(
    app: App, llm_stub: LLMStub, block: bool,
) -> None:
    """A fusion that silently drops "session store" is merged with the omission as a warning on
    the cluster's step (and counted on the phase); with block_on_omission it is refused."""
    app.settings.consolidate.block_on_omission = block
    scope = _scope()
    _add_dark(app, scope, SESSION)
    _use_stub(app, llm_stub, lambda req: _reply_to(req, WITHOUT_SESSIONS), max_retries=0)
    result = _run(app, scope)
    (child,) = result["children"]
    if block:
        assert child.output["verdict"] == "invalid"
        assert "drops 'session store'" in child.output["reason"]
        assert result["out"]["clusters_merged"] == 0
    else:
        assert child.output["verdict"] == "merge"
        assert "omits 'session store'" in child.output["warnings"]
        assert result["out"]["omission_warnings"] == 1


def test_a_source_dropped_wholesale_is_never_merged(app: App, llm_stub: LLMStub) -> None:
    """Issue 12 item 20: a careless fusion that keeps one note and drops another's facts is
    rejected whatever block_on_omission says, naming the note it left out."""
    scope = _scope()
    _add_dark(app, scope, [*DARK[:4], "User prefers dark mode in the code editor, uses Vim keys "
                                      "and the Solarized palette with ligatures"])
    _use_stub(app, llm_stub, lambda req: _reply_to(req, GROUNDED), max_retries=0)
    result = _run(app, scope)
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid"
    assert "leaves out most of n5" in child.output["reason"]


# ---- the phase's own wall budget (issue 12 item 3) ------------------------------------------
def test_phase_wall_budget_defers_what_it_could_not_ask(
    sqlite_app: App, llm_stub: LLMStub,
) -> None:
    """With llm_phase_seconds spent by the first (slow) question, the clusters not yet asked are
    deferred with the reason — not failed, not asked past the budget — and the phase succeeds."""
    app = sqlite_app
    app.settings.llm_phase_seconds = 1.0
    app.settings.llm_concurrency = 1
    scope = _scope()
    for k, topic in enumerate(["dark mode in the code editor", "green tea every morning",
                               "express courier for every order"]):
        add_notes(app, *({"id": f"{scope.agent_id}-t{k}-{j}", "agent_id": scope.agent_id,
                          "user_id": scope.user_id, "content": text}
                         for j, text in enumerate([f"User prefers {topic}",
                                                   f"User really prefers {topic}",
                                                   f"User prefers {topic} always"])))
    refuse = {"should_consolidate": False, "content": "", "type": "Preference",
              "source_ids": [], "reason": "different"}
    _use_stub(app, llm_stub, lambda req: StubResponse.reply(refuse, delay=1.2), max_retries=0)
    result = _run(app, scope)
    out = result["out"]
    assert out["clusters_found"] == 3
    assert (out["clusters_refused"], out["clusters_deferred"]) == (1, 2)
    assert len(llm_stub.chat_requests()) == 1
    deferred = [c for c in result["children"] if c.output["verdict"] == "deferred"]
    assert all("wall-time budget" in c.output["reason"] for c in deferred)
    assert result["parent"].status == "succeeded"
