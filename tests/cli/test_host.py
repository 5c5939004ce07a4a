"""`dream candidates`, `dream fuse`, `dream keep-apart`, `dream notes add` and `dream api`."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select, update

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import ConfigError, NotFound
from worker.review.changes import archive_change
from worker.review.items import ChangeKind, ProposedChange
from worker.store.models import NoteRow


@pytest.fixture
def db(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path)
    add_notes(app, {"id": "a", "content": "The user writes Python 3.12 with type hints and pytest."},
              {"id": "b", "content": "The user writes Python 3.12 with type hints and unittest."},
              {"id": "x", "agent_id": "agent-2", "content": "Other scope."})
    yield app
    app.dispose()


def statuses(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.execute(select(NoteRow.id, NoteRow.status))}


def test_candidates_keep_apart_and_fuse_from_the_cli(db: App) -> None:
    """The CLI lists the pair, hides it after keep-apart, and fuses with the given text."""
    url = db.settings.database_url
    out = dream(url, "candidates", "--agent", "agent-1", "--threshold", "0.8")
    assert out.exit_code == 0 and "pair" in out.output and "a  b" in out.output
    assert dream(url, "keep-apart", "a", "b").exit_code == 0
    assert "no candidates" in dream(url, "candidates", "--agent", "agent-1",
                                    "--threshold", "0.8").output
    fused = dream(url, "fuse", "a", "b", "--content",
                  "The user writes Python 3.12 with type hints, pytest and unittest.")
    assert fused.exit_code == 0 and "fused 2 notes into" in fused.output
    s = statuses(db)
    assert s["a"] == s["b"] == "revoked" and list(s.values()).count("active") == 2

    undo_id = fused.output.split("`dream undo ")[1].split("`")[0]
    undone = dream(url, "undo", undo_id)
    assert undone.exit_code == 0, undone.output
    assert undone.stdout.startswith(f"undone {undo_id}\n")  # before: "undone run fuse-…"
    s = statuses(db)
    assert s["a"] == s["b"] == "active" and list(s.values()).count("active") == 3
    again = dream(url, "undo", undo_id)
    assert again.exit_code == 4 and "already undone" in again.output


@pytest.mark.parametrize(("args", "code"), [
    (("fuse", "a", "x", "--content", "text"), 2),          # two scopes
    (("fuse", "a", "nope", "--content", "text"), NotFound.exit_code),  # unknown id
    (("fuse", "a", "b", "--content", " "), 2),             # empty text
    (("fuse", "a", "b", "--strict", "--content", "Since 2019 at Acme."), 2),  # invented facts
    (("keep-apart", "a"), 2),                              # one id
    (("notes", "add", "--agent", "agent-1", "--content", "   "), 2),
])
def test_refusals_are_one_line_and_change_nothing(db: App, args: tuple[str, ...],
                                                  code: int) -> None:
    """Every refusal prints one `error:` line, exits with its class's code (2 invalid input,
    3 not found) and leaves every note as it was."""
    before = statuses(db)
    one_error_line(dream(db.settings.database_url, *args), code)
    assert statuses(db) == before


def test_a_refused_fused_text_names_the_option_that_gave_it(db: App) -> None:
    """`dream fuse --content " "` said "fused_content is empty", a name only the API and MCP
    use; the line names `--content` (and `--content` too for a text over the limit)."""
    url = db.settings.database_url
    assert one_error_line(dream(url, "fuse", "a", "b", "--content", " ")) == (
        "error: --content is empty (or only invisible characters)")
    line = one_error_line(dream(url, "fuse", "a", "b", "--content", "x" * 3000))
    assert line.startswith("error: --content has 3000 characters; the limit is 2000"), line


def test_an_unknown_source_id_says_where_the_ids_are(db: App) -> None:
    """`dream fuse` / `dream keep-apart` said only "unknown note id nope"."""
    for args in (("fuse", "a", "nope", "--content", "text"), ("keep-apart", "nope", "b")):
        line = one_error_line(dream(db.settings.database_url, *args), NotFound.exit_code)
        assert line.startswith("error: unknown note id nope; `dream candidates --agent") and (
            "`dream notes export` every id" in line), line


def test_notes_add_reports_the_action(db: App) -> None:
    """`dream notes add` prints ADD then NOOP for the same text, with the same derived id."""
    url = db.settings.database_url
    first = dream(url, "notes", "add", "--agent", "agent-1", "--content", "Standup at 9:30.")
    again = dream(url, "notes", "add", "--agent", "agent-1", "--content", "standup at 9:30")
    assert first.output.startswith("ADD ") and again.output.startswith("NOOP ")
    assert first.output.split()[1] == again.output.split()[1]
    said = dream(url, "notes", "add", "--agent", "agent-1", "--content", "Retro on Thursdays.",
                 "--conversation", "conv-3", "--auto")
    with db.uow() as uow:
        [note] = uow.notes.get_many([said.output.split()[1]])
        [first_note] = uow.notes.get_many([first.output.split()[1]])
    assert note.source_conversation_id == "conv-3" and note.is_auto_generated
    assert not first_note.is_auto_generated


def test_api_refuses_to_start_without_tokens(db: App) -> None:
    """`dream api` without DREAM_API_TOKENS would lock everyone out: one-line error instead."""
    line = one_error_line(dream(db.settings.database_url, "api", "--port", "0"),
                          ConfigError.exit_code)
    assert "DREAM_API_TOKENS" in line


def test_api_refuses_to_start_with_tokens_that_let_no_one_in(db: App) -> None:
    """`{}` passed the unset check and served an API that refused every request; a malformed
    value is named before the port is bound (it was a port-in-use line when the port was); a
    token listed twice is refused (json kept its last grant)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for tokens, says in (("{}", "DREAM_API_TOKENS holds no token; every request would be "
                                    "refused"),
                             ("{not json", "DREAM_API_TOKENS is not valid JSON"),
                             # json kept the last grant: the scoped token became an admin
                             ('{"same-token-0123456789": {"agent_id": "a"}, '
                              '"same-token-0123456789": {"role": "admin"}}',
                              "DREAM_API_TOKENS names a token (or a key of one grant) twice")):
            line = one_error_line(dream(db.settings.database_url, "api", "--port", port,
                                        DREAM_API_TOKENS=tokens), ConfigError.exit_code)
            assert says in line, line


def _open_items(url: str) -> list[tuple[str, list[str]]]:
    """The run and notes of each open item `dream candidates` lists (no similar pair reaches
    the threshold 1; the pairs a dream would ask about, as the scope stands, and the small
    scope's topic are no run's)."""
    out = dream(url, "candidates", "--agent", "agent-1", "--threshold", "1", "--json")
    assert out.exit_code == 0, out.output
    return [(c["run_id"], sorted(c["note_ids"])) for c in json.loads(out.stdout)["candidates"]
            if c["type"] not in ("pair", "topic")]


def _dream(url: str) -> str:
    ran = dream(url, "run", "--agent", "agent-1", "--force")
    assert ran.exit_code == 0, ran.output
    return str(json.loads(dream(url, "runs", "list", "--json").stdout)[0]["id"])


def test_candidates_are_the_open_items_of_the_latest_dream_that_still_stands(app: App) -> None:
    """An undone run's open items went with it: `dream candidates` no longer lists them
    (before: it did, under the undone run's id). A review approval's run plans nothing: the
    dream before it still supplies the open items (before: the approval hid them all) and the
    open-candidates gauge (before: the scope dropped out of it)."""
    url = app.settings.database_url
    add_notes(app, {"id": "b", "content": "Alice lives in Berlin."},
              {"id": "m", "content": "Alice lives in Munich."},
              {"id": "z", "content": "The office printer is on floor two."})
    first = _dream(url)
    assert _open_items(url) == [(first, ["b", "m"])]
    assert dream(url, "undo", first).exit_code == 0
    assert _open_items(url) == []

    second = _dream(url)
    with app.uow() as uow:
        change = archive_change("prune", "z", 1, reason="prune: orphaned", comment="[Pruned]")
        uow.review.add_many(Scope("agent-1"), None, [change.row()], utcnow())
        uow.commit()
        item = uow.review.list(Scope("agent-1"))[-1].id
    approved = dream(url, "review", "approve", str(item), "--agent", "agent-1")
    assert approved.exit_code == 0, approved.output
    assert _open_items(url) == [(second, ["b", "m"])]
    with app.uow() as uow:  # the /metrics gauge reads the same dream (before: no figure)
        run = uow.runs.get(second)
        assert run is not None
        counted = (run.totals or {})["open_candidates"]
        assert uow.run_history.latest_open_candidates(Scope("agent-1")) == {
            Scope("agent-1").key: counted}


def test_candidates_at_threshold_one_list_every_pair_of_identical_vectors(app: App) -> None:
    """`dream candidates --threshold 1`: two notes the host gave one embedding are cosine 1,
    and every such pair is listed (before: some were not, their float32 inner product a hair
    below 1; which ones changed with the kernel FAISS took)."""
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(12, app.embedder.dimensions))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    add_notes(app, *[{"id": f"n{k:02d}{side}", "content": f"Fact {k} as told by {side}.",
                      "embedding": vectors[k].tolist()} for k in range(12) for side in "ab"])
    out = dream(app.settings.database_url, "candidates", "--agent", "agent-1", "--threshold",
                "1", "--json")
    assert out.exit_code == 0, out.output
    # Beside them: one frame, another number; chained, a topic lists its pairs.
    items = json.loads(out.stdout)["candidates"]
    pairs = [p for c in items for p in (c["pairs"] if c["type"] == "topic" else [c])]
    listed = [sorted(p["note_ids"]) for p in pairs if p["sources"] == ["cosine"]]
    assert sorted(listed) == [[f"n{k:02d}a", f"n{k:02d}b"] for k in range(12)]


def test_candidates_leave_out_notes_an_open_review_item_would_change(db: App) -> None:
    """A pair whose notes an open review item already proposes to merge was offered for the
    host to fuse too (fusing it would only make the item stale): it is left out, as a run
    leaves those notes alone, and the text output names the item; once a note of the item
    changed (the item can never apply), the pair is offered again."""
    url = db.settings.database_url
    add_notes(db, {"id": "t1", "content": "The user drinks green tea every morning."},
              {"id": "t2", "content": "The user drinks green tea every morning at home."})
    change = ProposedChange(phase="consolidate", kind=ChangeKind.MERGE,
                            versions={"t1": 1, "t2": 1}, reason="rule: contained",
                            content="The user drinks green tea every morning at home.",
                            source_ids=("t1", "t2"))
    with db.uow() as uow:
        uow.review.add_many(Scope("agent-1"), None, [change.row()], utcnow())
        uow.commit()
        item = uow.review.list(Scope("agent-1"))[-1].id

    def pairs() -> list[list[str]]:
        out = dream(url, "candidates", "--agent", "agent-1", "--threshold", "0.5", "--json")
        assert out.exit_code == 0, out.output
        return [c["note_ids"] for c in json.loads(out.stdout)["candidates"]]

    assert pairs() == [["a", "b"]]  # before: ["t1", "t2"] as well
    text = dream(url, "candidates", "--agent", "agent-1", "--threshold", "0.5")
    assert text.stdout.splitlines()[-1] == (
        f"left out: 2 notes that open review item {item} would change "
        f"(`dream review show {item} --agent agent-1`)"), text.stdout
    host_sets(db, "t1", version=2)  # the host edited it: the item is stale
    # Offered again, and with them the small scope's topic (a-t1 and the others: no pair item).
    assert sorted(pairs()) == [["a", "b"], ["a", "b", "t1", "t2"], ["t1", "t2"]]
    assert "left out" not in dream(url, "candidates", "--agent", "agent-1").stdout


def test_undoing_a_propose_run_frees_its_items_notes_in_review_list_and_candidates(
        app: App) -> None:
    """Undo withdraws a propose run's open items (``declined``, "withdrawn: run … was undone",
    nothing remembered): `dream review list` lists them no more, and `dream candidates` no
    longer leaves their notes out, offering them as the pair they are; the two agree that
    nothing waits for a reviewer. (Not stale: no note changed, the next dream proposes them
    afresh.)"""
    from tests.support.factories import add_entities

    url = app.settings.database_url
    add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"})
    add_notes(app, {"id": "a1", "content": "User prefers green tea in the morning"},
              {"id": "a2", "content": "User prefers green tea in the morning."})
    run_id = _dream(url)
    listed = dream(url, "review", "list", "--agent", "agent-1")
    assert "open" in listed.stdout and "notes a1 a2" in listed.stdout, listed.output
    held = dream(url, "candidates", "--agent", "agent-1")
    assert held.stdout.startswith("no candidates\nleft out: 2 notes that open review item")
    assert dream(url, "undo", run_id).exit_code == 0
    assert dream(url, "review", "list", "--agent", "agent-1").stdout == "no open review items\n"
    freed = dream(url, "candidates", "--agent", "agent-1")
    assert freed.stdout.split() == ["pair", "1.000", "a1", "a2"], freed.output
    withdrawn = dream(url, "review", "list", "--agent", "agent-1", "--status", "any", "--json")
    [item] = json.loads(withdrawn.stdout)["items"]
    assert (item["status"], item["outcome"]) == ("declined", f"withdrawn: run {run_id} was undone")


def test_fuse_and_keep_apart_refuse_a_source_changed_since_the_model_judged_it(db: App) -> None:
    """`--judged ID=VERSION` is the API's source_versions: the version `dream candidates
    --json` showed; a source changed since is one conflict line, nothing written."""
    url = db.settings.database_url
    listed = json.loads(dream(url, "candidates", "--agent", "agent-1", "--threshold", "0.8",
                              "--json").output)["candidates"][0]
    seen = {listed["record_a"]["id"]: listed["record_a"]["version"],
            listed["record_b"]["id"]: listed["record_b"]["version"]}
    assert seen == {"a": 1, "b": 1}
    with db.uow() as uow:  # the host edits note a after its model read it
        uow.session.execute(update(NoteRow).where(NoteRow.id == "a").values(version=2))
        uow.commit()
    before = statuses(db)
    fused = ("fuse", "a", "b", "--content", "The user writes Python 3.12 with pytest and unittest.")
    for args in (fused, ("keep-apart", "a", "b")):
        line = one_error_line(dream(url, *args, "--judged", "a=1", "--judged", "b=1"), 4)
        assert line.startswith("error: note a is at version 2, not version 1"), line
        one_error_line(dream(url, *args, "--judged", "a=one"), 2)
    assert statuses(db) == before
    assert dream(url, *fused, "--judged", "a=2", "--judged", "b=1").exit_code == 0
    assert statuses(db)["a"] == "revoked"


@pytest.mark.parametrize("given", ["a=99999999999999999999999", "a=2147483648", "a=0", "a=\u0661",
                                   "a\u200b=1", "=1"])
def test_judged_refuses_a_version_out_of_range_or_an_id_no_note_can_have(db: App,
                                                                        given: str) -> None:
    """A version past the API's bound (2147483647) or an id no option takes is a usage error
    (exit 2) naming the range, nothing written; before, a huge version read as a note changed
    since (exit 4) and a non-ASCII digit as a number."""
    url = db.settings.database_url
    before = statuses(db)
    fused = ("fuse", "a", "b", "--content", "The user writes Python.")
    for args in (fused, ("keep-apart", "a", "b")):
        line = one_error_line(dream(url, *args, "--judged", given), 2)
        assert "from 1 to 2147483647" in line or "the note id" in line, line
    assert statuses(db) == before

