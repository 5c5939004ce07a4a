"""An imported vector is kept only when this store's model made it: one of another model, or of
none named, is set aside and the note embedded here (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

import numpy as np

from tests.cli.test_commands import dream
from worker.app import App
from worker.export import export_notes
from worker.ingest import import_notes


def _foreign(app: App) -> list[float]:
    """A unit vector of the store's width that its embedder would never make for the text."""
    rng = np.random.default_rng(5)
    v = rng.normal(size=app.embedder.dimensions)
    return [float(x) for x in (v / np.linalg.norm(v)).astype(np.float32)]


def _stored(app: App) -> dict[str, tuple[list[float], str]]:
    return {r["id"]: (r["embedding"], r["embedding_model"])
            for r in map(json.loads, export_notes(app, with_embedding=True))}


def test_a_vector_without_its_model_or_of_another_is_embedded_here(app: App) -> None:
    """Before, a vector without ``embedding_model`` was stamped with this store's model and
    kept, so another model's vectors of the same width sat beside the store's own and every
    cosine between the two kinds was noise; one naming another model stayed until a dream."""
    model = app.embedder.model_name
    own = app.embedder.embed(["Alice writes code in Vim"])[0]
    lines = [
        {"id": "unnamed", "agent_id": "ag", "content": "Alice drinks tea",
         "embedding": _foreign(app)},
        {"id": "other", "agent_id": "ag", "content": "Alice lives in Lyon",
         "embedding": _foreign(app), "embedding_model": "someone-elses-model"},
        {"id": "ours", "agent_id": "ag", "content": "Alice writes code in Vim",
         "embedding": own.tolist(), "embedding_model": model},
    ]
    result = import_notes(app, [json.dumps(n) for n in lines])
    assert result.inserted == 3
    assert len(result.warnings) == 1 and result.warnings[0].startswith("2 notes gave")
    stored = _stored(app)
    made = app.embedder.embed(["Alice drinks tea", "Alice lives in Lyon"])
    for nid, expect in (("unnamed", made[0]), ("other", made[1]), ("ours", own)):
        vector, named = stored[nid]
        assert named == model
        assert np.allclose(vector, expect, atol=1e-6), nid


def test_the_cli_prints_the_warning_and_an_export_imports_without_one(app: App) -> None:
    """``dream notes import`` says so on stderr, once (before, a notes import printed no
    warning at all); the store's own export (vectors with their model) imports again without
    one, its vectors untouched."""
    import_notes(app, [json.dumps({"id": "n1", "agent_id": "ag", "content": "Bob likes tea"})])
    exported = list(export_notes(app, with_embedding=True))
    url = app.settings.database_url
    line = json.dumps({"id": "n2", "agent_id": "ag", "content": "Bob likes coffee",
                       "embedding": _foreign(app)})
    out = dream(url, "notes", "import", "-", input=line + "\n")
    assert out.exit_code == 0, out.output
    assert out.stderr.count("warning: 1 notes gave an embedding without embedding_model") == 1
    again = dream(url, "notes", "import", "-", input="\n".join(exported) + "\n")
    assert again.exit_code == 0 and "warning" not in again.stderr, again.output
    assert _stored(app)["n1"][0] == json.loads(exported[0])["embedding"]
