"""The contradictions phase: core.py and topics.py plan (pure); service.py loads and runs it,
judging.py asks the model, apply.py writes decisions, steps.py records child steps."""
