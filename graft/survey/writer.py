"""The offline writer: a section's papers as facet-ordered prose and a comparison table, with no LLM.

A section moves from the problems its papers address, to their methods (grouped by the similarity
of their method items and set side by side), to the results they report, to the open questions
they state, and ends with a table of paper x problem / method / result. Every clause is one
paper's own sentence (the facet item restored to the whole abstract sentence it was cut from, see
`prose.full_sentence`), rendered in the third person with that paper's name as subject, and cites
that paper only; a sentence about two papers joins their clauses ("A ... [1], while B ... [2]").
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graft.survey.latex import plain_text
from graft.survey.prose import (
    PaperName,
    as_clause,
    clean_clause,
    full_sentence,
    paper_name,
    self_contained,
    split_sentences,
    words,
)
from graft.survey.support import citation_like
from graft.survey.types import Candidate, ClauseDraft, SentenceDraft, TableRow

#: Clause length, in words, a survey sentence takes from a paper (longer items are cut sentences or lists).
MIN_WORDS, MAX_WORDS = 6, 45
#: Two clauses share a sentence when both are at most this long.
PAIR_WORDS = 24
#: Words a table cell keeps of a facet item.
CELL_WORDS = 14
#: A sentence that states a limitation or an open question (the "open gaps" paragraph).
GAP_CUES = re.compile(
    r"\b(?:remain(?:s|ed)?\b|open (?:problem|question|challenge)|lack(?:s|ing)?\b|limit(?:ed|ation|ations)\b|"
    r"challeng\w*|unclear|unknown|not yet|little (?:is|work|attention)|few (?:works|studies|methods)|"
    r"fail(?:s|ed)? to|insufficient|bottleneck|struggle|hard to|difficult|poorly understood|under-?explored)",
    re.I)
_OPENERS = {"problem": ["", "Relatedly,", "From another angle,", "In a related setting,"],
            "method": ["", "Similarly,", "Along the same lines,", "In a similar spirit,", "Likewise,"],
            "result": ["", "Likewise,", "On the empirical side,", "In turn,"],
            "gap": ["", "Further,"]}
#: Transitions between methods that share no group (no similarity is claimed between them).
_APART_OPENERS = ("", "In other work,", "Elsewhere,", "Independently,")
#: Transitions between groups of methods, in turn.
_GROUP_OPENERS = ("In contrast,", "Taking a different route,", "Separately,", "Beyond these,")


@dataclass
class Profile:
    """What the writer knows of one paper."""

    paper_id: str
    name: PaperName | None
    title: str
    clauses: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # facet -> (sentence, item row)


class Composer:
    """Facet-ordered sections from the papers' own sentences (see the module docstring).

    Args:
        index: the opened index; vectors: its `PaperVectors` (item texts and embeddings).
        encode: the sentence encoder.
    """

    def __init__(self, index: Any, vectors: Any, encode: Any) -> None:
        self.index, self.vectors, self.encode = index, vectors, encode
        self._profiles: dict[str, Profile] = {}
        self._lock = threading.Lock()

    def profile(self, paper_id: str) -> Profile:
        with self._lock:
            if paper_id in self._profiles:
                return self._profiles[paper_id]
        node = self.index.row(paper_id)
        papers = self.index.papers
        title = str(papers["title"][node] or "")
        abstract = str(papers["abstract"][node] or "")
        got = papers["authors"][node] if "authors" in papers.columns else None
        authors = [str(a) for a in got] if got is not None else []
        sentences = split_sentences(abstract)
        prof = Profile(paper_id, paper_name(title, authors, abstract), title)
        vectors = self.vectors
        for facet in ("problem", "method", "result", "contribution"):
            seen: set[str] = set()
            out = []
            for row in vectors.facet_items(paper_id, facet):
                text = full_sentence(vectors.item_text[row], sentences)
                key = " ".join(plain_text(text).lower().split())
                if key in seen or not MIN_WORDS <= words(text) <= MAX_WORDS or not self_contained(text):
                    continue
                if citation_like(text) or text.rstrip().endswith((":", "?")):
                    continue
                seen.add(key)
                out.append((text, row))
            prof.clauses[facet] = out
        with self._lock:
            self._profiles.setdefault(paper_id, prof)
        return prof

    def name_of(self, prof: Profile, nth: int) -> PaperName:
        """The paper's name; a short title in italics; else "one study" / "another study"."""
        if prof.name is not None:
            return prof.name
        title = short_title(prof.title)
        if title:
            return PaperName("\\textit{" + title + "}")
        return PaperName("one study" if nth == 0 else "another study")

    def pick(self, prof: Profile, facet: str, focus: np.ndarray, used: set[str],
             cue: re.Pattern[str] | None = None) -> tuple[str, int] | None:
        """The paper's facet sentence closest to `focus` not used yet (only sentences matching `cue`)."""
        best, best_sim = None, -2.0
        for text, row in prof.clauses.get(facet, []):
            if text in used or (cue is not None and not cue.search(plain_text(text))):
                continue
            sim = float(self.vectors.items[row] @ focus)
            if sim > best_sim:
                best, best_sim = (text, row), sim
        return best

    def write_section(self, description: str, papers: Sequence[Candidate]) -> list[SentenceDraft]:
        """The section's sentences, paragraph by paragraph (problem, method, result, gap)."""
        focus = np.asarray(self.encode([description])[0], dtype=np.float32)
        profiles = [self.profile(c.paper_id) for c in papers]
        used: dict[str, set[str]] = {p.paper_id: set() for p in profiles}
        drafts: list[SentenceDraft] = []

        def take(prof: Profile, facet: str, cue: re.Pattern[str] | None = None,
                 facets: Sequence[str] = ()) -> tuple[Profile, str, str, int] | None:
            for f in (facet, *facets):
                got = self.pick(prof, f, focus, used[prof.paper_id], cue)
                if got is not None:
                    used[prof.paper_id].add(got[0])
                    return prof, f, got[0], got[1]
            return None

        problems = [x for x in (take(p, "problem") for p in profiles[:3]) if x]
        methods = [x for x in (take(p, "method", facets=("contribution",)) for p in profiles) if x]
        results = [x for x in (take(p, "result") for p in profiles) if x][:4]
        gaps = [x for x in (take(p, "problem", GAP_CUES, ("result", "contribution")) for p in profiles) if x][:2]
        drafts += self._sentences("problem", problems, lead="while")
        drafts += self._method_sentences(methods)
        drafts += self._sentences("result", results, lead="while")
        drafts += self._sentences("gap", gaps, lead="and")
        return drafts

    def _clause(self, item: tuple[Profile, str, str, int], nth: int, lead: str = "") -> ClauseDraft:
        prof, facet, text, _ = item
        return ClauseDraft(text=as_clause(text, self.name_of(prof, nth), facet), paper_id=prof.paper_id,
                           facet=facet, lead=lead, source="item")

    def _sentences(self, part: str, items: Sequence[tuple[Profile, str, str, int]], lead: str,
                   first_opener: str = "", openers: Sequence[str] | None = None) -> list[SentenceDraft]:
        """Clauses two to a sentence when both are short, else one a sentence, with transitions
        (the part's, in turn, none twice in a row)."""
        out: list[SentenceDraft] = []
        openers = list(openers or _OPENERS[part])
        i = 0
        while i < len(items):
            nth = len(out)
            opener = first_opener if nth == 0 else openers[1 + (nth - 1) % (len(openers) - 1)]
            a = items[i]
            if i + 1 < len(items) and words(a[2]) <= PAIR_WORDS and words(items[i + 1][2]) <= PAIR_WORDS:
                out.append(SentenceDraft([self._clause(a, 0), self._clause(items[i + 1], 1, lead)], part, opener))
                i += 2
            else:
                out.append(SentenceDraft([self._clause(a, 0)], part, opener))
                i += 1
        return out

    def _method_sentences(self, items: list[tuple[Profile, str, str, int]]) -> list[SentenceDraft]:
        """Method clauses grouped by similarity (greedy: cosine >= 0.45 with a group's first item),
        groups of two or more first, each written side by side, the papers that fit no group last;
        groups are set apart by a transition."""
        groups: list[list[tuple[Profile, str, str, int]]] = []
        for it in items:
            v = self.vectors.items[it[3]]
            for g in groups:
                if float(self.vectors.items[g[0][3]] @ v) >= 0.45:
                    g.append(it)
                    break
            else:
                groups.append([it])
        together = [g for g in groups if len(g) > 1]
        alone = [it for g in groups if len(g) == 1 for it in g]
        ordered = together + ([alone] if alone else [])
        out: list[SentenceDraft] = []
        for k, g in enumerate(ordered):
            opener = "" if k == 0 else _GROUP_OPENERS[(k - 1) % len(_GROUP_OPENERS)]
            lead = "whereas" if g is alone and len(ordered) > 1 or not together else "and"
            out += self._sentences("method", g, lead=lead, first_opener=opener,
                                   openers=_APART_OPENERS if g is alone else None)
        return out

    def table(self, papers: Sequence[Candidate]) -> list[TableRow]:
        """One row per paper: its problem, method and result items, each cut to CELL_WORDS words."""
        rows = []
        for c in papers:
            prof = self.profile(c.paper_id)
            cells = {}
            for facet in ("problem", "method", "result"):
                items = prof.clauses.get(facet) or [(self.vectors.item_text[r], r)
                                                    for r in self.vectors.facet_items(c.paper_id, facet)]
                cells[facet] = shorten(clean_clause(items[0][0])) if items else ""
            name = self.name_of(prof, 0)
            if not name.text.startswith("\\textit") and prof.name is None:  # no name: the title's first words
                words_ = plain_text(prof.title).split()
                name = PaperName("\\textit{" + " ".join(words_[:6]).replace("{", "").replace("}", "")
                                 + (" …" if len(words_) > 6 else "") + "}")
            rows.append(TableRow(paper_id=c.paper_id, name=name.text, cells=cells))
        return rows


def short_title(title: str, max_words: int = 8) -> str | None:
    """A title short enough to name a paper in a sentence: the whole title, or its part before a
    colon, of at most `max_words` words; None when neither is."""
    text = " ".join(plain_text(title).split()).rstrip(".")
    if "{" in text or "}" in text:
        return None
    for cand in (text, text.split(":", 1)[0].strip()):
        if 1 <= len(cand.split()) <= max_words:
            return cand
    return None


def shorten(text: str, n: int = CELL_WORDS) -> str:
    """The first `n` words of a text (cut at a clause boundary when one comes late enough), with an
    ellipsis when cut; a math span is never cut."""
    tokens = text.split()
    if len(tokens) <= n:
        return text
    cut = " ".join(tokens[:n])
    if cut.count("$") % 2:
        cut = cut[: cut.rfind("$")].rstrip()
    m = list(re.finditer(r"[,;:]", cut))
    if m and m[-1].start() > len(cut) // 2:
        cut = cut[: m[-1].start()]
    return cut.rstrip(" ,;:(") + " …"
