"""Writing: every section in parallel (bounded concurrency), each clause citing one corpus paper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from graft.survey.types import Candidate, Citation, Clause, Paragraph, Sentence, SentenceDraft

#: The order of a section's paragraphs.
PART_ORDER = ("problem", "method", "result", "gap")


def to_sentence(draft: SentenceDraft, attribution: dict[str, dict[str, float]]) -> Sentence:
    """A draft as a sentence whose clauses' citations carry the facets that surfaced each paper."""
    clauses = [Clause(text=c.text, citation=Citation(paper_id=c.paper_id, facets=dict(attribution.get(c.paper_id, {}))),
                      facet=c.facet, lead=c.lead, source=c.source) for c in draft.clauses]
    return Sentence(clauses=clauses, part=draft.part if draft.part in PART_ORDER else "method", opener=draft.opener)


def paragraphs(sentences: Sequence[Sentence]) -> list[Paragraph]:
    """Sentences grouped into the section's paragraphs, in PART_ORDER."""
    return [Paragraph(part, [s for s in sentences if s.part == part]) for part in PART_ORDER
            if any(s.part == part for s in sentences)]


def write_sections(jobs: Sequence[tuple[str, str, Sequence[Candidate]]], backend, *, topic: str,
                   max_concurrency: int, attribution: dict[str, dict[str, float]],
                   progress: Callable[[int], None] | None = None) -> list[list[Sentence]]:
    """Write each (section title, description, papers) job; results keep the jobs' order.

    Args:
        jobs: (section title, description, papers) per section.
        backend: the survey backend (its `write_section`).
        max_concurrency: sections written at once.
        attribution: paper id -> facets that surfaced it.
        progress: called with 1 per finished section.
    """
    def one(job: tuple[str, str, Sequence[Candidate]]) -> list[Sentence]:
        title, description, papers = job
        drafts = backend.write_section(topic, title, description, papers) if papers else []
        if progress is not None:
            progress(1)
        return [to_sentence(d, attribution) for d in drafts if d.clauses]

    if max_concurrency <= 1 or len(jobs) <= 1:
        return [one(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=min(max_concurrency, len(jobs)), thread_name_prefix="graft-survey") as pool:
        return list(pool.map(one, jobs))
