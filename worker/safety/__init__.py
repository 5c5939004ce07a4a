"""Safety machinery shared by every phase: crash points, guardrails, undo, erasure."""
