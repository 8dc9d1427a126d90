"""Writing: every subsection in parallel (bounded concurrency), each sentence citing corpus papers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from graft.survey.types import Candidate, Citation, Sentence, SentenceDraft


def to_sentence(draft: SentenceDraft, attribution: dict[str, dict[str, float]]) -> Sentence:
    """A draft as a sentence whose citations carry the facets that surfaced each paper."""
    cites = [Citation(paper_id=p, facets=dict(attribution.get(p, {}))) for p in dict.fromkeys(draft.citations)]
    return Sentence(text=draft.text, citations=cites, facet=draft.facet)


def write_parts(jobs: Sequence[tuple[str, str, str, Sequence[Candidate]]], backend, *, topic: str,
                max_concurrency: int, attribution: dict[str, dict[str, float]],
                progress: Callable[[int], None] | None = None) -> list[list[Sentence]]:
    """Write each (section, subsection, description, papers) job; results keep the jobs' order.

    Args:
        jobs: (section title, subsection title, description, papers) per subsection.
        backend: the survey backend (its `write`).
        max_concurrency: subsections written at once.
        attribution: paper id -> facets that surfaced it.
        progress: called with 1 per finished subsection.
    """
    def one(job: tuple[str, str, str, Sequence[Candidate]]) -> list[Sentence]:
        section, subsection, description, papers = job
        drafts = backend.write(topic, section, subsection, description, papers) if papers else []
        if progress is not None:
            progress(1)
        return [to_sentence(d, attribution) for d in drafts if d.citations]

    if max_concurrency <= 1 or len(jobs) <= 1:
        return [one(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=min(max_concurrency, len(jobs)), thread_name_prefix="graft-survey") as pool:
        return list(pool.map(one, jobs))
