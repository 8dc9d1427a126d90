"""The support test: does a cited paper's own text say what a clause says, better than the papers
most like it?

A clause is compared with each *unit* of the cited paper — its title, the sentences of its abstract
(`prose.split_sentences`) and its facet items — by two pieces of evidence:

- word overlap: the idf-weighted share of the clause's content words (stemmed; stop words, the
  writer's framing words and the paper's own name left out) that occur in the unit;
- meaning: the cosine between the clause and the unit under the index's sentence encoder.

A unit's score is `overlap_weight * overlap + (1 - overlap_weight) * cosine`, and the paper's score
`s(clause, paper)` its best unit's. The clause is supported when

1. `s(clause, paper) >= threshold` (the paper says it), and
2. `s(clause, paper) >= s(clause, rival) + margin` for every rival: the cited paper's nearest
   neighbours in the facet graph and any papers the caller adds (those cited beside it). A
   clause taken from a neighbour and pinned on this paper is said better by the neighbour and fails,
   however close the two papers' topics are;
3. every number of the clause occurs in the paper's text.

No NLI or cross-encoder model is involved (none can be installed offline); the test's precision
and recall on a labelled set of (clause, paper) pairs from real corpus text are measured by
`experiments/support_test.py` (docs/results/support_test_cs768.md).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graft.facets import FACETS
from graft.survey.compose import STOPWORDS, numbers
from graft.survey.latex import plain_text
from graft.survey.prose import split_sentences
from graft.text import normalize_text

#: Words the writer adds around a paper's statement ("X reports that", "one study notes that"):
#: not part of the claim.
FRAME_WORDS = frozenset("""
report reports reported note notes noted author authors study studies one another further work works paper papers
observation et al line lines along contrast similarly likewise while whereas instead
""".split())


def stem(word: str) -> str:
    """A crude suffix stripper: enough to match "networks"/"network", "trained"/"training"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("ly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)] + keep
    return word


def content_terms(text: str, ignore: frozenset[str] = frozenset()) -> list[str]:
    """Stemmed content words of a text (LaTeX read as plain text; stop and framing words out)."""
    out = []
    for w in normalize_text(plain_text(text)).split():
        if w in STOPWORDS or w in FRAME_WORDS or w in ignore or (len(w) < 3 and not w.isdigit()):
            continue
        out.append(stem(w))
    return out


@dataclass
class SupportVerdict:
    """The support test's answer for one (clause, paper) pair."""

    supported: bool
    score: float  # s(clause, paper): the best unit's combined score
    overlap: float  # that unit's word overlap
    cosine: float  # that unit's cosine
    evidence: str  # that unit's text (the paper's own words closest to the clause)
    rival: str | None = None  # the best-scoring rival paper
    rival_score: float = 0.0
    reason: str = ""  # why it failed ("" when supported)


@dataclass
class SupportSettings:
    """The support test's decision rule; the defaults are the best of a grid on the labelled set's dev
    part (experiments/support_test.py)."""

    threshold: float = 0.55  # s(clause, paper) needed: the combined score of the best unit
    margin: float = 0.02  # by how much the paper must beat every rival (negative: a near-tie passes)
    overlap_weight: float = 0.7  # weight of word overlap against cosine in a unit's score
    rivals: int = 8  # nearest graph neighbours of the cited paper that are its rivals


#: Units of papers per (index path, corpus hash), shared by the support tests of one process: the
#: surveys of an evaluation run over one index embed each paper's sentences once.
_UNITS: dict[tuple[str, str], dict[int, tuple[list[str], list[Counter], np.ndarray]]] = {}
_UNITS_LOCK = threading.Lock()


class SupportTest:
    """The support test over one index (see the module docstring).

    Args:
        index: the opened index (papers, facet items, facet graphs).
        encode: the index's sentence encoder, `encode(texts) -> (n, d)` unit rows.
        settings: the decision rule.
    """

    def __init__(self, index: Any, encode: Callable[[list[str]], np.ndarray],
                 settings: SupportSettings | None = None) -> None:
        self.index = index
        self.encode = encode
        self.settings = settings or SupportSettings()
        key = (str(getattr(index, "path", id(index))), str(getattr(index, "manifest", {}).get("corpus_hash")))
        with _UNITS_LOCK:
            self._units = _UNITS.setdefault(key, {})
        self._lock = _UNITS_LOCK
        self._idf: dict[str, float] | None = None
        self._graph: Any = None
        self._idf_default = 1.0

    # ---- the papers' units ------------------------------------------------------------------------
    def _paper_texts(self, node: int) -> tuple[str, str]:
        papers = self.index.papers
        return str(papers["title"][node] or ""), str(papers["abstract"][node] or "")

    def idf(self) -> dict[str, float]:
        """Inverse document frequency of each content term over the papers' titles and abstracts."""
        if self._idf is None:
            df: Counter = Counter()
            papers = self.index.papers
            for title, abstract in zip(papers["title"].to_list(), papers["abstract"].to_list()):
                df.update(set(content_terms(f"{title or ''} {abstract or ''}")))
            n = max(self.index.n, 1)
            self._idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
            self._idf_default = math.log(1 + n) + 1.0
        return self._idf

    def unit_texts(self, node: int) -> list[str]:
        """A paper's units: title, abstract sentences and facet items (duplicates once)."""
        title, abstract = self._paper_texts(node)
        pid = self.index.paper_ids[node]
        items = [t for f in FACETS for t in self.index.paper_facets(pid).get(f, [])]
        out = [plain_text(t) for t in [title, *split_sentences(abstract), *items] if t and t.strip()]
        return list(dict.fromkeys(" ".join(t.split()) for t in out))

    def prepare(self, nodes: Sequence[int]) -> None:
        """Embed the units of the papers not seen yet, in one encoder call."""
        with self._lock:
            todo = [n for n in dict.fromkeys(nodes) if n not in self._units]
            if not todo:
                return
            texts = {n: self.unit_texts(n) for n in todo}
            flat = [t for n in todo for t in texts[n]]
            vecs = np.asarray(self.encode(flat), dtype=np.float32) if flat else np.zeros((0, 1), np.float32)
            pos = 0
            for n in todo:
                k = len(texts[n])
                self._units[n] = (texts[n], [Counter(content_terms(t)) for t in texts[n]], vecs[pos : pos + k])
                pos += k

    def units(self, node: int) -> tuple[list[str], list[Counter], np.ndarray]:
        if node not in self._units:
            self.prepare([node])
        return self._units[node]

    def paper_text(self, node: int) -> str:
        return " ".join(self.units(node)[0])

    # ---- rivals -------------------------------------------------------------------------------------
    def neighbours(self, node: int, k: int | None = None) -> list[int]:
        """The paper's `k` nearest papers in the facet graph: summed edge weight over the facets,
        both directions, strongest first (ties by row)."""
        k = self.settings.rivals if k is None else k
        if k <= 0:
            return []
        with self._lock:
            if self._graph is None:
                total = None
                for m in self.index.graphs.values():
                    total = m + m.T if total is None else total + m + m.T
                self._graph = total.tocsr() if total is not None else None
        if self._graph is None:
            return []
        lo, hi = self._graph.indptr[node], self._graph.indptr[node + 1]
        cols, vals = self._graph.indices[lo:hi], self._graph.data[lo:hi]
        order = np.lexsort((cols, -vals))
        return [int(cols[i]) for i in order if cols[i] != node][:k]

    # ---- scoring ------------------------------------------------------------------------------------
    def unit_scores(self, clause_vec: np.ndarray, terms: Counter, node: int) -> tuple[np.ndarray, np.ndarray]:
        """(word overlap, cosine) of a clause with each unit of a paper."""
        texts, unit_terms, vecs = self.units(node)
        if not texts:
            return np.zeros(0), np.zeros(0)
        idf = self.idf()
        default = self._idf_default
        total = sum(idf.get(t, default) for t in terms) or 1.0
        overlap = np.array([sum(idf.get(t, default) for t in terms if t in ut) / total for ut in unit_terms])
        return overlap, np.asarray(vecs @ clause_vec, dtype=np.float64)

    def score(self, clause_vec: np.ndarray, terms: Counter, node: int) -> tuple[float, float, float, str]:
        """(combined, overlap, cosine, unit text) of the paper's best unit for a clause."""
        overlap, cos = self.unit_scores(clause_vec, terms, node)
        if not len(overlap):
            return 0.0, 0.0, 0.0, ""
        w = self.settings.overlap_weight
        combined = w * overlap + (1 - w) * cos
        best = int(np.argmax(combined))
        return float(combined[best]), float(overlap[best]), float(cos[best]), self.units(node)[0][best]

    def clause_terms(self, clause: str, ignore: Sequence[str] = ()) -> Counter:
        """The clause's content terms, the words naming the cited paper (`ignore`) left out."""
        named = normalize_text(" ".join(ignore)).split()
        skip = frozenset(named) | frozenset(stem(w) for w in named)
        return Counter(t for t in content_terms(clause, skip) if t not in skip)

    def check(self, clause: str, paper_id: str, rivals: Sequence[str] = (), *, ignore: Sequence[str] = (),
              use_neighbours: bool = True, clause_vec: np.ndarray | None = None) -> SupportVerdict:
        """Is `clause` supported by paper `paper_id`, better than its rivals?

        Args:
            clause: the clause as printed (its citation marker left out).
            paper_id: the cited paper.
            rivals: further papers the clause must fit worse (those cited beside it).
            ignore: words that name the cited paper in the clause (author surnames, its short name).
            use_neighbours: add the cited paper's nearest graph neighbours to the rivals.
            clause_vec: the clause's embedding, when the caller has it.
        """
        node = self.index.row(paper_id)
        terms = self.clause_terms(clause, ignore)
        others = [self.index.row(r) for r in dict.fromkeys(rivals) if r != paper_id and r in self.index.row_of]
        if use_neighbours:
            others += [j for j in self.neighbours(node) if j not in others]
        self.prepare([node, *others])
        vec = clause_vec if clause_vec is not None else np.asarray(self.encode([plain_text(clause)])[0], np.float32)
        score, overlap, cos, evidence = self.score(vec, terms, node)
        rival, rival_score = None, -1.0
        for j in others:
            s = self.score(vec, terms, j)[0]
            if s > rival_score:
                rival, rival_score = self.index.paper_ids[j], s
        st = self.settings
        reason = ""
        if not terms:
            reason = "the clause has no content word to check"
        elif score < st.threshold:
            reason = f"the paper's closest sentence scores {score:.2f} < {st.threshold:.2f}"
        elif rival is not None and score < rival_score + st.margin:
            reason = f"paper {rival} says it better ({rival_score:.2f} vs {score:.2f})"
        else:
            nums = numbers(clause)
            missing = sorted(nums - numbers(self.paper_text(node))) if nums else []
            if missing:
                reason = "numbers not in the paper: " + ", ".join(missing)
        return SupportVerdict(not reason, round(score, 4), round(overlap, 4), round(cos, 4), evidence, rival,
                              round(max(rival_score, 0.0), 4), reason)


_CITATION_LIKE = re.compile(
    r"\bet\s+al\b\.?\s*,?\s*\(?\s*(?:19|20)\d\d|"  # Smith et al. (2099), Smith et al., 2099
    r"\b[A-Z][a-z]+(?:\s+(?:and|&)\s+[A-Z][a-z]+)?\s*,?\s*\(?(?:19|20)\d\d[a-z]?\)|"  # Smith (2099), Smith and Lee (2020)
    r"\((?:[A-Z][A-Za-z-]+(?:\s+et\s+al\.?)?,?\s+(?:19|20)\d\d[a-z]?(?:;\s*)?)+\)|"  # (Smith, 2099; Lee, 2020)
    r"\barxiv\s*[:/]?\s*\d{4}\.\d{4,5}|\bdoi\s*:?\s*10\.\d{4,}|\b10\.\d{4,}/\S+|https?://\S+|www\.\S+|"
    r"\[\s*\d+(?:\s*[,;–-]\s*\d+)*\s*\]|\[\s*[A-Za-z]+\d*\s*\]",  # [12], [1, 2], [P3]
    re.I)


def citation_like(text: str) -> str | None:
    """A citation-like string written into prose ("Smith et al. (2099)", "arXiv:2099.99999", a URL,
    a bracketed number or key), or None. A clause cites through its citation only: a source named in
    its words would be printed unchecked."""
    m = _CITATION_LIKE.search(plain_text(text))
    return m.group(0) if m else None
