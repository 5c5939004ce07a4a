"""Pure text analysis shared by the phases and the host API: tokens, grounding, time."""
