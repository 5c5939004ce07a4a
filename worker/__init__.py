"""dream-worker: scheduled maintenance of an AI agent's long-term memory notes."""

__version__ = "0.1.0"
