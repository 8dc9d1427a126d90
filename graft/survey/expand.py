"""Query expansion: a topic -> several topic descriptions (the topic itself first)."""

from __future__ import annotations

from graft.survey.retrieve import TopicRetriever
from graft.survey.types import Candidate


def expand_topic(topic: str, retriever: TopicRetriever, backend, n: int, k: int = 20) -> tuple[list[str], list[Candidate]]:
    """Describe the topic `n` ways.

    The topic is retrieved once (pseudo-relevance feedback); the backend turns the topic and the
    top papers into descriptions: the offline backend joins the topic with the facet item of those
    papers closest to it, one per facet; an LLM writes them.

    Returns:
        (descriptions, pseudo-relevant candidates of the first retrieval).
    """
    pseudo = retriever.search([topic], k)
    if n <= 1:
        return [topic], pseudo
    descriptions = backend.expand(topic, n, pseudo)
    out = list(dict.fromkeys(d for d in descriptions if d.strip()))
    return (out or [topic])[:n], pseudo
