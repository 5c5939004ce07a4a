"""The phase kit: snapshot read → pure plan → judging with no transaction open → one guarded
write per phase per scope, with typed change items, one ``supersede`` and typed counters."""

from worker.phases.kit.changes import Change, ChangeKind, ItemResult, ItemStatus, Member, NewNote
from worker.phases.kit.counters import Counters
from worker.phases.kit.snapshot import PhaseSnapshot, RunJournal, read_snapshot
from worker.phases.kit.supersede import apply_changes, embed_new_notes, members_of, supersede
from worker.phases.kit.write import PhaseWrite, WriteConflict, WriteTarget, open_write

__all__ = [
    "Change", "ChangeKind", "Counters", "ItemResult", "ItemStatus", "Member", "NewNote",
    "PhaseSnapshot", "PhaseWrite", "RunJournal", "WriteConflict", "WriteTarget", "apply_changes",
    "embed_new_notes", "members_of", "open_write", "read_snapshot", "supersede",
]
