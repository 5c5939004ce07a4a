"""The consolidate phase: core.py plans (pure), service.py loads and orchestrates, judging.py
asks the model or the rules, apply.py writes each cluster, decision.py holds what a step records."""
