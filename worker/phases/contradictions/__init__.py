"""The contradictions phase: core.py plans (pure), service.py loads, judges, applies and records."""
