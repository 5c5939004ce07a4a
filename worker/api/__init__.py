"""The HTTP shell: host API, ops endpoints and dashboard (FastAPI)."""

from worker.api.app import create_api

__all__ = ["create_api"]
