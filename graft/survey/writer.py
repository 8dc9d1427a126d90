"""The offline writer: a section's papers as prose organised by how they relate, and a table of what
the prose does not say, with no LLM.

A section is written as paragraphs of related papers (`graft.survey.relate`: the same problem with
different methods, similar methods, one building on another). Within a paragraph each paper is
written in one place: its problem, its method and its result, in that order, the paper named once
and then referred to as "it" / "they". A sentence opens with a connective only when a relation
stands behind it ("Building on MAML [1],", "Addressing the same problem as X [2] with a different
method,", "On Omniglot, also used by X [2],"). Every clause is one paper's own sentence (the facet item
restored to the whole abstract sentence it was cut from, see `prose.full_sentence`), rendered in the
third person, and cites that paper only. The table gives each paper's year, the benchmarks and
metrics its abstract names, and the surveyed papers it builds on.
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
    PRIOR_WORK,
    PaperName,
    Vocabulary,
    as_clause,
    clean_clause,
    full_sentence,
    paper_name,
    self_contained,
    split_sentences,
    words,
)
from graft.survey.relate import benchmarks, builds_on_links, content_words, metrics
from graft.survey.support import citation_like
from graft.survey.types import Candidate, ClauseDraft, Relation, SentenceDraft, TableRow, ref, unref

#: Clause length, in words, a survey sentence takes from a paper (longer items are cut sentences or lists).
MIN_WORDS, MAX_WORDS = 6, 45


@dataclass
class Profile:
    """What the writer knows of one paper."""

    paper_id: str
    name: PaperName | None
    title: str
    clauses: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # facet -> (sentence, item row)
    year: int | None = None
    abstract: str = ""


#: A sentence in the authors' voice: what the paper itself does.
OWN_VOICE = re.compile(r"^(?:we|our (?:method|approach|model|framework|system|algorithm)|(?:this|the present) "
                       r"(?:paper|work|study|article))\b", re.I)
#: Facets whose sentences must be the paper's own: a report of earlier work is not used for them.
OWN_FACETS = ("method", "result", "contribution")


class Composer:
    """Sections of related papers from the papers' own sentences (see the module docstring).

    Args:
        index: the opened index; vectors: its `PaperVectors` (item texts and embeddings).
        encode: the sentence encoder.
    """

    def __init__(self, index: Any, vectors: Any, encode: Any) -> None:
        self.index, self.vectors, self.encode = index, vectors, encode
        self._profiles: dict[str, Profile] = {}
        self._names: dict[str, PaperName] = {}
        self._lock = threading.Lock()
        self._vocab: Vocabulary | None = None

    @property
    def vocabulary(self) -> Vocabulary:
        """The corpus's own words (titles and abstracts), to repair glued words."""
        with self._lock:
            if self._vocab is None:
                papers = self.index.papers
                self._vocab = Vocabulary([str(t or "") for t in papers["title"].to_list()]
                                         + [str(a or "") for a in papers["abstract"].to_list()])
            return self._vocab

    def profile(self, paper_id: str) -> Profile:
        with self._lock:
            if paper_id in self._profiles:
                return self._profiles[paper_id]
        vocab = self.vocabulary
        node = self.index.row(paper_id)
        papers = self.index.papers
        title = str(papers["title"][node] or "")
        abstract = str(papers["abstract"][node] or "")
        got = papers["authors"][node] if "authors" in papers.columns else None
        authors = [str(a) for a in got] if got is not None else []
        sentences = split_sentences(abstract)
        year = papers["year"][node]
        prof = Profile(paper_id, paper_name(title, authors, abstract), title, year=int(year) if year else None,
                       abstract=abstract)
        vectors = self.vectors
        for facet in ("problem", "method", "result", "contribution"):
            seen: set[str] = set()
            out = []
            for row in vectors.facet_items(paper_id, facet):
                text = vocab.repair(full_sentence(vectors.item_text[row], sentences))
                key = " ".join(plain_text(text).lower().split())
                if key in seen or not MIN_WORDS <= words(text) <= MAX_WORDS or not self_contained(text):
                    continue
                if citation_like(text) or text.rstrip().endswith((":", "?")):
                    continue
                if facet in OWN_FACETS and PRIOR_WORK.search(plain_text(text)):
                    continue  # what earlier work did, not what this paper does
                seen.add(key)
                out.append((text, row))
            prof.clauses[facet] = out
        with self._lock:
            self._profiles.setdefault(paper_id, prof)
        return prof

    def settle_names(self, paper_ids: Sequence[str]) -> None:
        """Fix the names of the papers one survey discusses: each its short name (`prose.paper_name`)
        unless another paper of the survey has the same one, in which case both are named by their
        titles; two papers never share a name."""
        profs = [self.profile(p) for p in dict.fromkeys(paper_ids)]
        count: dict[str, int] = {}
        for prof in profs:
            if prof.name is not None:
                count[prof.name.text.lower()] = count.get(prof.name.text.lower(), 0) + 1
        with self._lock:
            for prof in profs:
                if prof.name is not None and count[prof.name.text.lower()] == 1:
                    self._names[prof.paper_id] = prof.name
                else:
                    self._names[prof.paper_id] = title_name(prof.title)

    def name_of(self, prof: Profile, nth: int = 0) -> PaperName:
        """The paper's name: as settled for the survey (`settle_names`), else its short name, else
        its title in italics (never "one study")."""
        with self._lock:
            got = self._names.get(prof.paper_id)
        if got is not None:
            return got
        return prof.name if prof.name is not None else title_name(prof.title)

    def pick(self, prof: Profile, facet: str, focus: np.ndarray, used: set[str],
             cue: re.Pattern[str] | None = None) -> tuple[str, int] | None:
        """The paper's facet sentence closest to `focus` not used yet (only sentences matching `cue`);
        for a method, a sentence in the authors' voice ("We propose ...", "This paper introduces ...")
        before any other (a background sentence the facet holds says less of what the paper does)."""
        best, best_key = None, (-1, -2.0)
        for text, row in prof.clauses.get(facet, []):
            if text in used or (cue is not None and not cue.search(plain_text(text))):
                continue
            own = int(facet in ("method", "contribution") and bool(OWN_VOICE.match(clean_clause(text))))
            key = (own, float(self.vectors.items[row] @ focus))
            if key > best_key:
                best, best_key = (text, row), key
        return best

    def order(self, papers: Sequence[Candidate], relations: Sequence[Relation]) -> list[list[str]]:
        """The section's papers as paragraphs: groups of papers joined by a relation (same problem,
        similar method, builds on), the group of the section's first paper first; inside a group the
        older paper first (ties: the section's order); papers related to none are a paragraph together."""
        ids = [c.paper_id for c in papers]
        rank = {p: i for i, p in enumerate(ids)}
        parent = {p: p for p in ids}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for r in relations:
            if r.kind in ("same_problem", "similar_method", "builds_on", "cites") and all(p in parent for p in r.papers):
                parent[find(r.papers[0])] = find(r.papers[1])
        groups: dict[str, list[str]] = {}
        for p in ids:
            groups.setdefault(find(p), []).append(p)
        together = [g for g in groups.values() if len(g) > 1]
        alone = [g[0] for g in groups.values() if len(g) == 1]
        years = {p: self.profile(p).year or 9999 for p in ids}
        out = [sorted(g, key=lambda p: (years[p], rank[p])) for g in sorted(together, key=lambda g: rank[g[0]])]
        return out + ([alone] if alone else [])

    def write_section(self, description: str, papers: Sequence[Candidate],
                      relations: Sequence[Relation] = ()) -> list[SentenceDraft]:
        """The section's sentences: paragraphs of related papers (`order`), each paper's problem,
        method and result together, openers only where a relation stands behind them."""
        focus = np.asarray(self.encode([description])[0], dtype=np.float32)
        drafts: list[SentenceDraft] = []
        written: list[str] = []  # papers already written about in this section
        for k, group in enumerate(self.order(papers, relations)):
            for pid in group:
                drafts += self._paper_sentences(self.profile(pid), focus, relations, written, k)
                written.append(pid)
        return drafts

    def _paper_sentences(self, prof: Profile, focus: np.ndarray, relations: Sequence[Relation],
                         before: list[str], paragraph: int) -> list[SentenceDraft]:
        """One paper's sentences: problem, method, result; a relation to a paper written about before
        it in the section opens the sentence it concerns."""
        pid = prof.paper_id
        used: set[str] = set()

        def take(facet: str, *more: str, prefer: str = "") -> tuple[str, str, int] | None:
            for f in (facet, *more):
                options = prof.clauses.get(f, [])
                if prefer:  # the sentence that names a shared benchmark, when there is one
                    named = [(t, r) for t, r in options if prefer in plain_text(t) and t not in used]
                    if named:
                        used.add(named[0][0])
                        return f, named[0][0], named[0][1]
                got = self.pick(prof, f, focus, used)
                if got is not None:
                    used.add(got[0])
                    return f, got[0], got[1]
            return None

        def related(kind: str) -> list[str]:
            return [r.papers[1] if r.papers[0] == pid else r.papers[0] for r in relations
                    if r.kind == kind and r.detail != "cites" and pid in r.papers and (r.papers[1] if r.papers[0] == pid else r.papers[0])
                    in before]

        earlier = [r.papers[1] for r in relations if r.kind == "builds_on" and r.papers[0] == pid
                   and r.papers[1] in before]
        same_problem, similar = related("same_problem"), related("similar_method")
        shared = [(r.detail, r.papers[0] if r.papers[1] == pid else r.papers[1]) for r in relations
                  if r.kind == "same_benchmark" and pid in r.papers
                  and (r.papers[0] if r.papers[1] == pid else r.papers[1]) in before]
        out: list[SentenceDraft] = []
        name = self.name_of(prof)
        pronoun = PaperName("they" if name.plural else "it", name.plural)

        def sentence(item: tuple[str, str, int], opener: str = "", relation: str = "") -> None:
            facet, text, _ = item
            clause = as_clause(text, pronoun if out else name, facet)
            if out and not clause.lower().startswith(pronoun.text + " "):  # "in it, ...", "it, based on": name it
                clause = as_clause(text, name, facet)
            out.append(SentenceDraft([ClauseDraft(text=clause, paper_id=pid, facet=facet, source="item")],
                                     "problem" if facet == "problem" else "result" if facet == "result" else "method",
                                     opener, paragraph, relation))

        problem = None if same_problem else take("problem")
        method = take("method", "contribution")
        result = take("result", prefer=shared[0][0] if shared else "")
        if problem:
            sentence(problem)
        if method:
            # the same problem is said once in the section's summary; as a connective only for a pair of
            # papers that share it with no other (else each paper of a chain would open with it)
            pair = len(same_problem) == 1 and all(
                sum(r.kind == "same_problem" and p in r.papers for r in relations) == 1 for p in (pid, same_problem[0]))
            # "Like X," only where the clause says what X's own method sentences say (two shared
            # content words beyond the field's generic ones): a similar method overall is not a
            # similar claim ("Like MAML, it demonstrates that the dimension of this subspace ...")
            alike = [q for q in similar if shares_words(method[1], self.profile(q), prof)]
            kind, to = (("builds_on", earlier) if earlier else ("same_problem", same_problem) if pair
                        else ("similar_method", alike) if alike else ("", []))
            sentence(method, self.opener(kind, to) if kind else "", kind)
        if result:
            bench = [(b, q) for b, q in shared if b in plain_text(result[1])]
            if bench:
                sentence(result, self.opener("same_benchmark", [bench[0][1]], bench[0][0]), "same_benchmark")
            else:
                sentence(result)
        return out

    def opener(self, kind: str, others: Sequence[str], detail: str = "") -> str:
        """The connective a relation to papers written about before stands behind (`relate`):
        "Building on MAML [1],", "Addressing the same problem as X [2] with a different method,",
        "Like X [2],", "On Omniglot, also used by X [2],"."""
        names = self._names_of(others)
        if kind in ("same_problem", "similar_method") and detail == "cites":  # the summary says it, with the citation
            return ""
        if kind == "builds_on":
            return f"Building on {names},"
        if kind == "same_problem":
            return f"Addressing the same problem as {names} with a different method,"
        if kind == "similar_method":
            return f"Like {names},"
        if kind == "same_benchmark" and detail:
            return f"On {unref(detail)}, also used by {names},"
        return ""

    def _names_of(self, paper_ids: Sequence[str]) -> str:
        names = [f"{unref(self.name_of(self.profile(p)).text)} {ref(p)}" for p in paper_ids[:3]]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    def table(self, papers: Sequence[Candidate], cited: Sequence[str] = ()) -> list[TableRow]:
        """One row per paper: its year, the benchmarks and metrics its abstract names, and the papers
        of `cited` (the survey's) it builds on (cites and is not newer than)."""
        ids = [c.paper_id for c in papers]
        pool = list(dict.fromkeys([*ids, *cited]))
        builds: dict[str, list[str]] = {}
        for later, earlier in builds_on_links(self.index, pool):
            if later in ids:
                builds.setdefault(later, []).append(earlier)
        own = [self.name_of(self.profile(p)).text for p in pool]
        rows = []
        for pid in ids:
            prof = self.profile(pid)
            cells = {"year": str(prof.year) if prof.year else "",
                     "benchmarks": unref(", ".join(benchmarks(prof.abstract, own, background=[
                         t for t, _ in prof.clauses.get("problem", [])])[:4])),
                     "metrics": unref(", ".join(metrics(prof.abstract)[:3])),
                     "builds_on": ", ".join(ref(p) for p in builds.get(pid, []))}
            rows.append(TableRow(paper_id=pid, name=self.name_of(prof).text, cells=cells))
        return rows


def shares_words(text: str, other: Profile, own: Profile, least: int = 2) -> bool:
    """Whether a clause about `own` shares `least` content words with `other`'s method and
    contribution sentences, neither paper's title words counted."""
    theirs = set().union(*(content_words(t) for f in ("method", "contribution") for t, _ in other.clauses.get(f, [])))
    names = content_words(other.title) | content_words(own.title)
    return len((content_words(text) - names) & (theirs - names)) >= least


def title_name(title: str) -> PaperName:
    """A paper named by its title, in italics: the title's part before a colon when that is short
    (`short_title`), else the whole title."""
    text = short_title(title) or " ".join(plain_text(title).split())
    text = re.sub(r"[\s*†‡.]+$", "", text)  # a footnote mark or a stop at the end of a title
    return PaperName("\\textit{" + text.replace("{", "").replace("}", "") + "}")


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
