"""LLM backends shared by the facet extractor and the survey writer.

`ChatClient` talks to any OpenAI-compatible chat-completions endpoint (vLLM, Ollama, llama.cpp
server, hosted APIs); `LLMCache` keeps every answer in `<index>/cache/llm.sqlite` so reruns and
crashed runs resume without asking again.
"""

from __future__ import annotations

from graft.llm.cache import CACHE_RELPATH, CachedResponse, LLMCache, canonical_request, request_key
from graft.llm.client import ChatClient, ChatRequest, LLMConfig, LLMError, Message, parse_retry_after

__all__ = [
    "CACHE_RELPATH",
    "CachedResponse",
    "ChatClient",
    "ChatRequest",
    "LLMCache",
    "LLMConfig",
    "LLMError",
    "Message",
    "canonical_request",
    "parse_retry_after",
    "request_key",
]
