"""A labelled set of (clause, paper) pairs for measuring a citation support test.

Made from an index's own text, and independent of any support test: a *source* paper is drawn at
random, one clause is taken from it (a sentence of its abstract, split by the build's splitter
`graft.text.split_sentences`, or one of its facet items), and the clause is paired

- with the source itself: a positive (the paper says it);
- with each of the source's `neighbours` nearest papers in the facet graph (largest summed
  out-edge weight over the four facets): negatives that share the source's topic.

Each clause comes in three variants, as a survey would print it: `verbatim` (the paper's own
sentence), `rendered` (in the third person with the *paired* paper's name as subject, as the offline
writer renders a clause, so a wrong pairing reads exactly as a wrong citation would) and `fragment`
(the longest part of the sentence between commas, semicolons and connectives: a clause that says
less than the sentence). A negative whose clause the neighbour's own text also contains word for
word is left out (the neighbour does say it) and counted. Source papers are split in halves,
`dev` (for tuning a test) and `test` (for reporting it).
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from graft.facets import FACETS
from graft.text import normalize_text, split_sentences

VARIANTS = ("verbatim", "rendered", "fragment")


@dataclass
class SupportCase:
    """One labelled (clause, paper) pair."""

    case_id: str
    clause: str
    paper_id: str  # the paper the clause is paired with (the one a citation would name)
    source_id: str  # the paper the clause was taken from
    label: bool  # True when the paired paper is the source
    origin: str  # "abstract" or "item"
    facet: str  # the facet the clause states ("abstract" sentences: the facet of the item it overlaps most)
    variant: str  # "verbatim", "rendered" or "fragment"
    part: str  # "dev" or "test"
    name: str  # the paired paper's name as printed in a rendered clause ("" when none)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _nearest(index: Any, node: int, k: int) -> list[int]:
    """The k papers with the largest summed out-edge weight from `node` over the facet graphs."""
    weight: dict[int, float] = {}
    for m in index.graphs.values():
        lo, hi = m.indptr[node], m.indptr[node + 1]
        for j, w in zip(m.indices[lo:hi].tolist(), m.data[lo:hi].tolist()):
            if j != node:
                weight[j] = weight.get(j, 0.0) + float(w)
    return [j for j, _ in sorted(weight.items(), key=lambda x: (-x[1], x[0]))[:k]]


_SPLIT = re.compile(r"\s*(?:[,;:]\s+|\s(?:which|while|whereas|where|and thus|thereby|but)\s)\s*")


def fragment(sentence: str, min_words: int = 6) -> str | None:
    """The longest part of a sentence between commas, semicolons and connectives, when it has at
    least `min_words` words and is shorter than the sentence."""
    parts = [p.strip(" .") for p in _SPLIT.split(sentence) if p and p.strip(" .")]
    best = max(parts, key=lambda p: (len(p.split()), -parts.index(p)), default="")
    if len(best.split()) < min_words or len(best.split()) >= len(sentence.split()) - 1:
        return None
    return best


def _facet_of(sentence: str, items: dict[str, list[str]]) -> str:
    words = set(normalize_text(sentence).split())
    best, facet = -1.0, "method"
    for f in FACETS:
        for it in items.get(f, []):
            other = set(normalize_text(it).split())
            score = len(words & other) / max(len(words | other), 1)
            if score > best:
                best, facet = score, f
    return facet


def support_cases(index: Any, *, papers: int = 300, neighbours: int = 2, seed: int = 0,
                  min_words: int = 8, max_words: int = 60) -> tuple[list[SupportCase], dict[str, int]]:
    """The labelled set over `papers` source papers (see the module docstring).

    Args:
        index: an opened index (papers, facet items, facet graphs).
        papers: source papers drawn (fewer when fewer qualify: >= 3 abstract sentences and at least
            `neighbours` graph neighbours).
        neighbours: negatives per clause and variant (the source's nearest graph neighbours).
        seed: the draw's seed.
        min_words, max_words: length of a usable clause, in words.
    Returns:
        (cases, counts): counts has "sources", "cases", "positives", "negatives" and
        "negatives_left_out" (the neighbour's text holds the clause word for word).
    """
    from graft.survey.latex import plain_text
    from graft.survey.prose import as_clause, paper_name  # the writer's rendering of a clause
    from graft.survey.writer import title_name

    rng = random.Random(seed)
    table = index.papers
    titles, abstracts = table["title"].to_list(), table["abstract"].to_list()
    authors = table["authors"].to_list() if "authors" in table.columns else [None] * index.n
    order = list(range(index.n))
    rng.shuffle(order)
    cases: list[SupportCase] = []
    left_out = sources = 0
    texts: dict[int, str] = {}

    def text_of(node: int) -> str:
        if node not in texts:
            items = index.paper_facets(index.paper_ids[node])
            texts[node] = normalize_text(" ".join([titles[node] or "", abstracts[node] or ""]
                                                  + [t for f in FACETS for t in items.get(f, [])]))
        return texts[node]

    def name_of(node: int):
        name = paper_name(titles[node] or "", list(authors[node] or []), abstracts[node] or "")
        return name

    for node in order:
        if sources >= papers:
            break
        sentences = [s for s in split_sentences(abstracts[node] or "") if min_words <= len(s.split()) <= max_words]
        near = _nearest(index, node, neighbours)
        if len(split_sentences(abstracts[node] or "")) < 3 or len(near) < neighbours or not sentences:
            continue
        pid = index.paper_ids[node]
        items = index.paper_facets(pid)
        usable_items = [(f, t) for f in FACETS for t in items.get(f, []) if min_words <= len(t.split()) <= max_words]
        if usable_items and rng.random() < 0.5:
            facet, sentence = usable_items[rng.randrange(len(usable_items))]
            origin = "item"
        else:
            sentence = sentences[rng.randrange(len(sentences))]
            facet, origin = _facet_of(sentence, items), "abstract"
        part = "dev" if sources % 2 == 0 else "test"
        sources += 1
        frag = fragment(sentence)
        for paired in [node, *near]:
            # no short name: the writer names the paper by its title (in italics)
            shown = name_of(paired) or title_name(titles[paired] or "")
            variants = {"verbatim": sentence, "rendered": as_clause(sentence, shown, facet), "fragment": frag}
            for variant, clause in variants.items():
                if not clause:
                    continue
                label = paired == node
                if not label and normalize_text(clause) in text_of(paired):
                    left_out += 1
                    continue
                cases.append(SupportCase(
                    case_id=f"{pid}|{index.paper_ids[paired]}|{variant}", clause=clause,
                    paper_id=index.paper_ids[paired], source_id=pid, label=label, origin=origin, facet=facet,
                    variant=variant, part=part, name=plain_text(shown.text)))
    counts = {"sources": sources, "cases": len(cases), "positives": sum(c.label for c in cases),
              "negatives": sum(not c.label for c in cases), "negatives_left_out": left_out}
    return cases, counts


def precision_recall(labels: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """Precision, recall, F1 and counts of a binary prediction."""
    labels, predicted = np.asarray(labels, bool), np.asarray(predicted, bool)
    tp = int((labels & predicted).sum())
    fp = int((~labels & predicted).sum())
    fn = int((labels & ~predicted).sum())
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0, "tp": tp, "fp": fp, "fn": fn,
            "n": int(labels.size)}
