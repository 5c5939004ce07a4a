"""The keep-or-archive judge shared by prune and archive (judging.py); it plans and writes nothing."""
