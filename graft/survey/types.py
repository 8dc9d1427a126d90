"""Data passed between the survey steps, with their JSON forms (survey.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from graft.survey.prose import lower_first


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
    """One verification round of one (clause, cited paper) pair."""

    round: int
    paper_id: str
    supported: bool
    score: float  # the support test's score of the paper for the clause
    facet: str  # the facet the clause states
    judge: str  # "support test", or "support test + <LLM model>" when an LLM judged too
    action: str = ""  # what followed a failure: repair, remove
    reason: str = ""  # why the check failed ("" when it passed)
    rival: str | None = None  # the paper the support test compared against most closely
    rival_score: float = 0.0


@dataclass
class Citation:
    """The citation of one clause and how verification treated it."""

    paper_id: str
    facets: dict[str, float] = field(default_factory=dict)  # facets that surfaced the paper
    status: str = "pending"  # verified | repaired | removed | unverified
    replaced: str | None = None  # kept for survey.json readers: the paper id this citation took the place of
    note: str = ""


@dataclass
class Clause:
    """A clause about one paper, citing that paper only."""

    text: str  # as printed, without its citation marker (may hold LaTeX, rendered at output)
    citation: Citation
    facet: str  # the facet the clause states: problem, method, result or contribution
    lead: str = ""  # the connective printed before it ("while", "and"; "" for a sentence's first clause)
    source: str = ""  # where the words come from: item, abstract, llm, evidence
    original: str | None = None  # the text before a repair
    rounds: list[Round] = field(default_factory=list)

    @property
    def kept(self) -> bool:
        return self.citation.status != "removed"


#: How prose refers to a paper inside a computed statement (an opener, a section's summary, a table
#: cell): the paper's id between these marks, printed as its reference number ("[3]").
REF_OPEN, REF_CLOSE = "\u27e6", "\u27e7"


def ref(paper_id: str) -> str:
    """The mark of a reference to `paper_id` inside a computed statement."""
    return f"{REF_OPEN}{paper_id}{REF_CLOSE}"


def unref(text: str) -> str:
    """Paper text (a name, a title) made safe inside a computed statement: the reference marks removed."""
    return text.replace(REF_OPEN, "").replace(REF_CLOSE, "")


@dataclass
class Relation:
    """A relation between papers of one section, computed from the index (not a claim of a paper):
    `same_problem` (similar problem items, different method items), `similar_method` (either with
    `detail` "cites": papers[0] cites papers[1], so not necessarily a different method), `builds_on`
    (papers[0] cites papers[1], is not older and names it), `cites` (the same, not named) or
    `same_benchmark` (both abstracts name `detail`)."""

    kind: str
    papers: list[str]
    detail: str = ""
    score: float = 0.0


@dataclass
class Sentence:
    """A sentence of the survey: one or more clauses, each citing its own paper."""

    clauses: list[Clause]
    part: str  # the facet its clauses state: problem, method, result or gap
    opener: str = ""  # a transition printed before the first clause, from a relation ("Building on X [1],")
    paragraph: int = 0  # the paragraph of its section it belongs to
    relation: str = ""  # the kind of the relation its opener states ("" for none)
    dropped: bool = False  # left out of survey.md: no clause kept, or a duplicate
    note: str = ""  # why it was dropped

    def kept_clauses(self) -> list[Clause]:
        return [c for c in self.clauses if c.kept]

    def cited(self) -> list[str]:
        return list(dict.fromkeys(c.citation.paper_id for c in self.kept_clauses()))

    @property
    def text(self) -> str:
        """The sentence as plain text with `[paper id]` markers (for logs and survey.json)."""
        return join_clauses([(c.lead, c.text, c.citation.paper_id) for c in self.kept_clauses()], self.opener)


def join_clauses(parts: list[tuple[str, str, str]], opener: str = "") -> str:
    """Clauses (lead, text, marker) as one sentence: "A [1], while B [2]." The first clause's first
    letter is upper-cased (after an opener, lower-cased unless it starts a name); a clause without a
    lead is joined by a semicolon."""
    out = []
    for i, (lead, text, marker) in enumerate(parts):
        if i == 0 and opener:  # "Like X [2], inspired by ...": the clause goes on the opener's sentence
            text = f"{opener} {lower_first(text)}"
        piece = f"{text} [{marker}]"
        out.append((f", {lead} " if lead else "; ") + piece if i else piece)
    sentence = "".join(out).strip()
    return (sentence[:1].upper() + sentence[1:] + ".") if sentence else ""


@dataclass
class Paragraph:
    """The sentences of one paragraph of a section: a group of related papers ("group")."""

    part: str
    sentences: list[Sentence] = field(default_factory=list)


#: The columns of a section's table, (key, heading): what the prose does not say about each paper.
TABLE_COLUMNS = (("year", "Year"), ("benchmarks", "Benchmarks named"), ("metrics", "Metrics named"),
                 ("builds_on", "Cites (surveyed, not newer)"))


@dataclass
class TableRow:
    """A row of a section's comparison table: one paper's year, the benchmarks and metrics its abstract
    names, and the surveyed papers it builds on (`TABLE_COLUMNS`)."""

    paper_id: str
    name: str
    cells: dict[str, str]  # column key -> text ("" when there is none or it failed the check)


@dataclass
class Section:
    title: str
    description: str
    papers: list[str]  # the papers the section writes about, most central first
    paragraphs: list[Paragraph] = field(default_factory=list)
    table: list[TableRow] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    summary: str = ""  # what its papers share and where they differ, computed (with `ref` marks)

    def sentences(self) -> list[Sentence]:
        return [s for p in self.paragraphs for s in p.sentences]


@dataclass
class ClauseDraft:
    """A clause a writer or a rewrite returns: text about one paper, that paper, the facet it states."""

    text: str
    paper_id: str
    facet: str
    lead: str = ""
    source: str = ""


@dataclass
class SentenceDraft:
    """What a writer returns for one sentence: its clauses and the paragraph it goes to."""

    clauses: list[ClauseDraft]
    part: str
    opener: str = ""
    paragraph: int = 0
    relation: str = ""
