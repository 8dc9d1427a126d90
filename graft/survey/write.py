"""Writing: every section in parallel (bounded concurrency), each clause citing one corpus paper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from graft.survey.types import Candidate, Citation, Clause, Paragraph, Relation, Sentence, SentenceDraft

#: The facets a sentence may state.
PART_ORDER = ("problem", "method", "result", "gap")


def to_sentence(draft: SentenceDraft, attribution: dict[str, dict[str, float]]) -> Sentence:
    """A draft as a sentence whose clauses' citations carry the facets that surfaced each paper."""
    clauses = [Clause(text=c.text, citation=Citation(paper_id=c.paper_id, facets=dict(attribution.get(c.paper_id, {}))),
                      facet=c.facet, lead=c.lead, source=c.source) for c in draft.clauses]
    return Sentence(clauses=clauses, part=draft.part if draft.part in PART_ORDER else "method", opener=draft.opener,
                    paragraph=draft.paragraph, relation=draft.relation)


def paragraphs(sentences: Sequence[Sentence]) -> list[Paragraph]:
    """Sentences grouped into the section's paragraphs (their `paragraph` numbers), in order."""
    out: dict[int, Paragraph] = {}
    for s in sentences:
        out.setdefault(s.paragraph, Paragraph("group")).sentences.append(s)
    return [out[k] for k in sorted(out)]


def write_sections(jobs: Sequence[tuple[str, str, Sequence[Candidate], Sequence[Relation]]], backend, *, topic: str,
                   max_concurrency: int, attribution: dict[str, dict[str, float]],
                   progress: Callable[[int], None] | None = None) -> list[list[Sentence]]:
    """Write each (section title, description, papers) job; results keep the jobs' order.

    Args:
        jobs: (section title, description, papers, their relations) per section.
        backend: the survey backend (its `write_section`).
        max_concurrency: sections written at once.
        attribution: paper id -> facets that surfaced it.
        progress: called with 1 per finished section.
    """
    def one(job: tuple[str, str, Sequence[Candidate], Sequence[Relation]]) -> list[Sentence]:
        title, description, papers, relations = job
        drafts = backend.write_section(topic, title, description, papers, relations) if papers else []
        if progress is not None:
            progress(1)
        return [to_sentence(d, attribution) for d in drafts if d.clauses]

    if max_concurrency <= 1 or len(jobs) <= 1:
        return [one(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=min(max_concurrency, len(jobs)), thread_name_prefix="graft-survey") as pool:
        return list(pool.map(one, jobs))
