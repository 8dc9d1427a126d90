"""Data passed between the survey steps, with their JSON forms (survey.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Candidate:
    """A retrieved corpus paper with the facets that surfaced it."""

    paper_id: str
    title: str
    year: int | None = None
    n_citations: int = 0
    score: float = 0.0  # fused retrieval score (or the rerank score once reranked)
    facets: dict[str, float] = field(default_factory=dict)  # facet -> contribution (attribution)
    descriptions: list[int] = field(default_factory=list)  # which topic descriptions retrieved it
    similarity: float = 0.0  # cosine between the paper and the description it is ranked for

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Round:
    """One verification round of one (sentence, cited paper) pair."""

    round: int
    paper_id: str
    supported: bool
    score: float
    facet: str  # the claim facet the check compared against
    judge: str  # "offline" or the LLM model name
    action: str = ""  # what followed a failure: rewrite, replace, remove


@dataclass
class Citation:
    """One citation of a sentence and how verification treated it."""

    paper_id: str
    facets: dict[str, float] = field(default_factory=dict)  # facets that surfaced the paper
    status: str = "pending"  # verified | repaired | replaced | removed | unverified
    replaced: str | None = None  # the paper id this citation took the place of
    note: str = ""


@dataclass
class Sentence:
    """A factual sentence of a subsection with its citations and verification history."""

    text: str
    citations: list[Citation]
    facet: str  # the claim type: problem, method, result or contribution
    original: str | None = None  # the text before a rewrite
    rounds: list[Round] = field(default_factory=list)
    dropped: bool = False  # left out of survey.md: no supported citation, or a duplicate
    note: str = ""  # why it was dropped

    def cited(self) -> list[str]:
        return [c.paper_id for c in self.citations if c.status != "removed"]


@dataclass
class Subsection:
    title: str
    papers: list[str]
    sentences: list[Sentence] = field(default_factory=list)


@dataclass
class Section:
    title: str
    description: str
    papers: list[str]
    subsections: list[Subsection] = field(default_factory=list)


@dataclass
class SentenceDraft:
    """What a writer or a rewrite returns: text, cited paper ids, claim facet."""

    text: str
    citations: list[str]
    facet: str
