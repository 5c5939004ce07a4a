"""How the dashboard shows a run's steps: a phase's counters as labelled columns, and each child
step named by what it judged ("merge of 3 notes", "pair ab12… vs cd34…").

Pure, from the step dicts of ``worker.reporting.run_tree``. Labels use ids, counts, verdicts and
the reason lines the step already stores; never note content (a merge's fused text stays out).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from worker.reporting import step_actions

# Counters a phase always shows (in this order); the others appear only when not zero.
PRIMARY = {
    "consolidate": ("notes_scanned", "clusters_found", "clusters_merged", "notes_revoked",
                    "clusters_deferred", "clusters_open"),
    "contradictions": ("pairs_considered", "pairs_judged", "conflicts_resolved",
                       "equivalents_merged", "conflicts_flagged", "topics_deferred"),
    "prune": ("notes_checked", "notes_archived"),
    "archive": ("notes_expired", "notes_stale", "manual_preserved", "protected_preserved"),
}
# Shown in their own columns (tokens) or as the step's own figures, not as counters.
_NOT_COUNTERS = {"tokens_in", "tokens_out"}
ID_CHARS = 8
ACTIONS_SHOWN = 3  # a contradictions step's decisions in its outcome cell; the rest counted


def humanize(key: str) -> str:
    return key.replace("_", " ")


def short_id(note_id: object) -> str:
    text = str(note_id)
    return text if len(text) <= ID_CHARS + 1 else text[:ID_CHARS] + "…"


def counter_columns(step: dict[str, Any]) -> list[tuple[str, int | float]]:
    """(label, value) of a parent step's numeric counters: the phase's primary ones first."""
    output = step.get("output") or {}
    numbers = {k: v for k, v in output.items() if isinstance(v, int | float)
               and not isinstance(v, bool) and k not in _NOT_COUNTERS}
    primary = [k for k in PRIMARY.get(step.get("phase", ""), ()) if k in numbers]
    rest = [k for k in numbers if k not in primary and numbers[k]]
    return [(humanize(k), numbers[k]) for k in (*primary, *rest)]


def _ids(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _pair(a: object, b: object) -> str:
    return f"pair {short_id(a)} vs {short_id(b)}"


def _notes(n: int) -> str:
    return f"{n} note" if n == 1 else f"{n} notes"


def _consolidate(step: dict[str, Any], _: dict[str, Any]) -> tuple[str, str]:
    inp, out = step.get("input") or {}, step.get("output") or {}
    ids = _ids(inp.get("note_ids") or out.get("note_ids"))
    verdict = str(out.get("verdict") or step.get("status") or "")
    what = "merge" if verdict == "merge" else "cluster"
    shown = ", ".join(short_id(i) for i in ids[:3]) + (f", +{len(ids) - 3}" if len(ids) > 3 else "")
    return f"{what} of {_notes(len(ids))}" + (f" ({shown})" if ids else ""), verdict


def _relations(verdicts: list[dict[str, Any]], key: str) -> str:
    counts = Counter(str(v.get(key) or v.get("action") or "?") for v in verdicts)
    return ", ".join(f"{n} {r}" for r, n in counts.most_common())


def _decided(step: dict[str, Any], otherwise: str) -> str:
    """What a contradictions step decided, a pair a clause ("ab12… ~ cd34…: conflicting,
    revoke cd34… (newer note wins)"; ``reporting.step_actions``, as `dream runs show` says
    it), the first ACTIONS_SHOWN; ``otherwise`` when it decided nothing."""
    said = step_actions(step, short_id)
    more = f"; +{len(said) - ACTIONS_SHOWN} more" if len(said) > ACTIONS_SHOWN else ""
    return "; ".join(said[:ACTIONS_SHOWN]) + more if said else otherwise


def _contradictions(step: dict[str, Any], _: dict[str, Any]) -> tuple[str, str]:
    inp, out = step.get("input") or {}, step.get("output") or {}
    name = step.get("name")
    if name == "open_pair" and len(_ids(inp.get("note_ids"))) == 2:
        a, b = _ids(inp.get("note_ids"))
        return _pair(a, b), str(out.get("verdict") or "open")
    if name == "rules":
        verdicts = [v for v in out.get("verdicts") or [] if isinstance(v, dict)]
        relations = _decided(step, _relations(verdicts, "relation"))
        if len(verdicts) == 1:
            return _pair(verdicts[0].get("a"), verdicts[0].get("b")), relations
        return f"rule verdicts on {len(verdicts)} pairs", relations
    if name == "model":
        topics = [t for t in inp.get("topics") or [] if isinstance(t, dict)]
        pairs = [p for t in topics for p in t.get("pairs") or [] if isinstance(p, dict)]
        actions = [a for a in out.get("actions") or [] if isinstance(a, dict)]
        outcome = _decided(step, _relations(actions, "relation") if actions
                           else str(step.get("status") or ""))
        if len(pairs) == 1:
            return _pair(pairs[0].get("a"), pairs[0].get("b")), outcome
        return (f"model call {inp.get('call', '?')} (round {inp.get('round', '?')}): "
                f"{len(topics)} topics, {len(pairs)} pairs", outcome)
    return _generic(step, _)


_SUBJECT_PART = {"agent": "agent_id", "user": "user_id", "company": "company_id"}


def _orphan_of(reason: str, run: dict[str, Any]) -> str:
    """'referenced agent is disabled' → 'agent X (disabled)' with X from the run's scope."""
    for kind, part in _SUBJECT_PART.items():
        if reason.startswith(f"referenced {kind} "):
            state = reason.removeprefix(f"referenced {kind} ").removeprefix("is ")
            return f"{kind} {run.get(part) or '?'} ({state})"
    if reason.startswith("source conversation "):
        return f"a conversation that {reason.removeprefix('source conversation ')}"
    return reason


def _prune(step: dict[str, Any], run: dict[str, Any]) -> tuple[str, str]:
    inp, out = step.get("input") or {}, step.get("output") or {}
    name = str(step.get("name") or "")
    if name == "orphans":
        found = out.get("archived")
        archived: dict[str, Any] = found if isinstance(found, dict) else {}
        reasons = Counter(_orphan_of(str(r[0]), run) for r in archived.values()
                          if isinstance(r, list) and r)
        label = ("orphans of " + "; ".join(reasons) if reasons
                 else f"orphan check of {_notes(int(inp.get('notes_checked') or 0))}")
        extra = [f"{len(_ids(out.get(k)))} {k.replace('_', ' ')}"
                 for k in ("kept_by_review", "deferred", "stale") if _ids(out.get(k))]
        return label, ", ".join([f"{_notes(len(archived))} archived", *extra])
    if name.startswith("review"):
        ids = _ids(inp.get("note_ids"))
        if "deferred" in out:
            return f"keep review of {_notes(len(ids))}", "deferred"
        return (f"keep review of {_notes(len(ids))}",
                f"{len(_ids(out.get('kept')))} kept, {len(_ids(out.get('archive')))} to archive")
    return _generic(step, run)


def _archive(step: dict[str, Any], run: dict[str, Any]) -> tuple[str, str]:
    inp, out = step.get("input") or {}, step.get("output") or {}
    name = str(step.get("name") or "")
    if "archived" in out and isinstance(out.get("archived"), list):
        planned = int(inp.get("planned") or len(out["archived"]))
        stale = len(_ids(out.get("stale")))
        return (f"{name} ({planned} planned)",
                f"{len(out['archived'])} archived" + (f", {stale} stale" if stale else ""))
    if name == "preserved":
        kept = [f"{len(_ids(out.get(k)))} {humanize(k)}" for k in
                ("protected", "manual", "unread", "manual_examples", "kept_by_review",
                 "deferred")
                if _ids(out.get(k))]
        return "preserved", ", ".join(kept) or "nothing"
    return _generic(step, run)


def _generic(step: dict[str, Any], _: dict[str, Any]) -> tuple[str, str]:
    inp, out = step.get("input") or {}, step.get("output") or {}
    name = str(step.get("name") or "step")
    if out.get("guard"):
        return f"blast-radius guard held {_notes(len(_ids(inp.get('note_ids'))))}", "stopped"
    ids = _ids(inp.get("note_ids"))
    label = f"{name} of {_notes(len(ids))}" if ids else name
    return label, str(out.get("verdict") or step.get("status") or "")


_BY_PHASE: dict[str, Callable[[dict[str, Any], dict[str, Any]], tuple[str, str]]] = {
    "consolidate": _consolidate, "contradictions": _contradictions, "prune": _prune,
    "archive": _archive,
}


def child_view(step: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """What a child row shows: label, outcome, why (the stored reason line), usage."""
    out = step.get("output") or {}
    if out.get("guard"):
        label, outcome = _generic(step, run)
    else:
        label, outcome = _BY_PHASE.get(step.get("phase", ""), _generic)(step, run)
    why = out.get("reason") or step.get("error") or ""
    return {"label": label, "outcome": outcome, "why": str(why), "status": step.get("status"),
            "model": step.get("model"), "tokens_in": step.get("tokens_in") or 0,
            "tokens_out": step.get("tokens_out") or 0, "duration_ms": step.get("duration_ms")}
