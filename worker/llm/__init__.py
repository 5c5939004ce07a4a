"""LLM layer: protocol, OpenAI-compatible client, scripted fake, rule-based judge."""

from worker.llm.base import LLMClient, LLMError, LLMReply

__all__ = ["LLMClient", "LLMError", "LLMReply"]
