"""The apart rule against clusters grown by mean similarity, on SQLite and PostgreSQL: two notes
of one frame a span apart share no topical cluster, whether or not they are linked or close
enough to be a cosine pair themselves (the host's own embeddings, imported)."""

from __future__ import annotations

import numpy as np

from tests.phases.consolidate.test_service import _run, _use_stub, merge_reply
from tests.support.factories import add_notes
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.llm.fake import FakeLLM

# "Tomas" and "Priya" are the scope's subjects (capitalised in many notes): the two values of
# the manager attribute name different ones, so they are no topical link; their cosine (0.55)
# is below the threshold, so they are no cosine pair either. The other three link them.
MANAGER = ["The user's manager is Tomas.",
           "Every expense goes to the manager of the user for approval.",
           "The user's manager is Priya.",
           "The manager of the user runs the weekly standup on Monday.",
           "The manager of the user sits next to the window."]
COSINES = {(0, 1): 0.40, (0, 2): 0.55, (0, 3): 0.80, (0, 4): 0.55, (1, 2): 0.80,
           (1, 3): 0.50, (1, 4): 0.40, (2, 3): 0.55, (2, 4): 0.70, (3, 4): 0.55}
_TOMAS = [("plays", "red"), ("sings", "blue"), ("cooks", "green"), ("drives", "gold"),
          ("paints", "grey"), ("hikes", "pink"), ("swims", "teal"), ("reads", "navy"),
          ("writes", "jade")]
_PRIYA = [("works", "north"), ("eats", "south"), ("naps", "east"), ("codes", "west"),
          ("meets", "upper"), ("waits", "lower"), ("calls", "inner"), ("laughs", "outer"),
          ("rests", "main")]
SUBJECTS = ([f"Tomas {verb} on the {team} team." for verb, team in _TOMAS]
            + [f"Priya {verb} at the {side} office." for verb, side in _PRIYA])


def _vectors(dims: int) -> np.ndarray:
    """Unit rows: the manager notes with exactly ``COSINES`` between them, and every subject
    note orthogonal to all others."""
    gram = np.eye(len(MANAGER))
    for (i, j), cosine in COSINES.items():
        gram[i, j] = gram[j, i] = cosine
    rows = np.zeros((len(MANAGER) + len(SUBJECTS), dims))
    rows[:len(MANAGER), :len(MANAGER)] = np.linalg.cholesky(gram)
    for k in range(len(SUBJECTS)):
        rows[len(MANAGER) + k, len(MANAGER) + k] = 1.0
    return rows.astype(np.float32)


def test_two_values_of_one_attribute_never_share_a_topical_cluster_through_others(
    app: App, llm_stub: LLMStub,
) -> None:
    """The manager is Tomas / Priya: neither linked nor a cosine pair, each close to the others
    on the topic. A topical cluster forms and reaches the model, and none it is asked about
    holds both values (before: one cluster of all five notes, both values in it, since the rule
    only looked at linked and cosine pairs)."""
    vectors = _vectors(app.embedder.dimensions)
    add_notes(app, *[{"id": f"m{k:02d}", "user_id": "u1", "type": "Preference",
                      "content": text, "embedding": vectors[k].tolist(), "importance": 0.5}
                     for k, text in enumerate(MANAGER + SUBJECTS)])
    _use_stub(app, llm_stub, FakeLLM(default=merge_reply("The user's manager is kind.")))
    result = _run(app)
    assert result["out"]["topical_clusters"] >= 1
    asked = [set(c.input["note_ids"]) for c in result["children"]]
    assert asked and all(len(c) >= 3 for c in asked)
    assert not any({"m00", "m02"} <= c for c in asked)
