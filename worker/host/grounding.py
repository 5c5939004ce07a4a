"""Grounding check for host-fused text (R13), using the consolidate phase's own fact extraction
so that the host path and the LLM path judge "invented facts" the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence

from worker.domain.types import Note
from worker.phases.consolidate.core import allowed_dates, specifics

_TOKEN = re.compile(r"[\w.@/:+-]+")


def ungrounded_facts(sources: Sequence[Note], fused: str) -> list[str]:
    """Numbers, dates, URLs, e-mail addresses and capitalised names in ``fused`` that no source
    states (relative dates such as "last week" in a source allow the dates they resolve to)."""
    source_text = "\n".join(n.content for n in sources)
    lowered = source_text.casefold()
    tokens = {t.casefold() for t in _TOKEN.findall(source_text)}
    tokens |= specifics(source_text).all()
    extra = allowed_dates(sources)
    return sorted(s for s in specifics(fused).all()
                  if s not in tokens and s not in extra and s not in lowered)
