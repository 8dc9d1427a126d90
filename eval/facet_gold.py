"""ACLSum's gold facets: summaries and highlighted sentences, and the scores of extracted items against them.

ACLSum (Takeshita et al., 2024) annotates 250 ACL papers with a one-sentence summary per aspect
(challenge, approach, outcome) and, per aspect, the sentences of the abstract, introduction and
conclusion that the summary was written from (the highlights). GRAFT's Problem / Method / Result
facets map onto challenge / approach / outcome; Contribution has no gold.

Extracted items are citation-free, lead-in-free prefixes or spans of the paper's own sentences, while
ACLSum's sentences are tokenised ("work , we ."): `align` maps an item to the gold sentence that holds
most of its words, so sentence-level precision and recall count sentences, not strings.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eval.textmetrics import rouge_l, rouge_n
from graft.errors import GraftError
from graft.text import tokens

#: GRAFT facet -> ACLSum aspect.
GOLD_ASPECT = {"problem": "challenge", "method": "approach", "result": "outcome"}
SPLITS = ("train", "val", "test")
SECTIONS = ("abstract", "introduction", "conclusion")
#: An item is the gold sentence that holds at least this share of its words (multiset containment).
MIN_CONTAINMENT = 0.7


@dataclass
class GoldPaper:
    """One ACLSum paper: its sentences per section and, per aspect, the summary and highlighted sentences."""

    paper_id: str
    title: str
    sentences: dict[str, list[str]]  # section -> tokenised sentences
    summary: dict[str, str]  # aspect -> gold summary
    highlights: dict[str, set[tuple[str, int]]]  # aspect -> {(section, sentence index)}


def aclsum_dir() -> Path:
    """The `aclsum` package's dataset folder (train/val/test jsonl)."""
    spec = importlib.util.find_spec("aclsum")
    if spec is None or not spec.submodule_search_locations:
        raise GraftError("ACLSum's gold needs the `aclsum` package: pip install aclsum")
    return Path(next(iter(spec.submodule_search_locations))) / "dataset"


def load_gold_papers(split: str) -> list[GoldPaper]:
    """The papers of one ACLSum split (train, val or test), in file order."""
    if split not in SPLITS:
        raise GraftError(f"ACLSum split '{split}' is unknown; allowed: {', '.join(SPLITS)}")
    out = []
    with (aclsum_dir() / f"{split}.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            r = json.loads(line)
            highlights = {
                aspect: {(sec, i) for sec in SECTIONS for i, flag in enumerate(r["highlights"][aspect][sec]) if flag}
                for aspect in GOLD_ASPECT.values()
            }
            out.append(GoldPaper(r["id"], r["title"], {s: r["sentences"][s] for s in SECTIONS},
                                 r["summary"], highlights))
    return out


def align(item: str, paper: GoldPaper, sections: tuple[str, ...] = SECTIONS) -> tuple[str, int] | None:
    """The gold sentence (section, index) that holds most of `item`'s words, or None when no sentence
    holds `MIN_CONTAINMENT` of them or the item is the paper's title (an extractor's last resort, not
    a sentence it chose). Ties go to the shorter sentence (the tighter fit), then to the earlier one."""
    if tokens(item) == tokens(paper.title):
        return None
    want = Counter(tokens(item))
    n = sum(want.values())
    if not n:
        return None
    best: tuple[float, float, str, int] | None = None
    for sec in sections:
        for i, sent in enumerate(paper.sentences[sec]):
            have = Counter(tokens(sent))
            overlap = sum((want & have).values())
            contain = overlap / n
            if contain < MIN_CONTAINMENT:
                continue
            key = (contain, overlap / max(sum(have.values()), 1))
            if best is None or key > best[:2]:
                best = (*key, sec, i)
    return None if best is None else (best[2], best[3])


@dataclass
class FacetCounts:
    """Micro-averaged sentence counts and per-paper ROUGE sums of one system and facet."""

    chosen: int = 0  # items (aligned or not)
    gold: int = 0  # highlighted sentences in scope
    hit: int = 0  # distinct chosen sentences that are highlighted
    rouge1: float = 0.0
    rouge2: float = 0.0
    rougel: float = 0.0
    papers: int = 0

    def add(self, items: list[str], paper: GoldPaper, aspect: str, sections: tuple[str, ...]) -> None:
        """Count one paper's items of the facet against the aspect's gold, within `sections`."""
        gold = {h for h in paper.highlights[aspect] if h[0] in sections}
        aligned = {a for a in (align(it, paper, sections) for it in items) if a is not None}
        self.chosen += len(items)
        self.gold += len(gold)
        self.hit += len(aligned & gold)
        joined = " ".join(items)
        self.rouge1 += rouge_n(joined, paper.summary[aspect], 1)
        self.rouge2 += rouge_n(joined, paper.summary[aspect], 2)
        self.rougel += rouge_l(joined, paper.summary[aspect])
        self.papers += 1

    def metrics(self) -> dict[str, float]:
        """precision, recall, F1 (micro over sentences) and mean ROUGE-1/2/L F1 (over papers)."""
        p = self.hit / self.chosen if self.chosen else 0.0
        r = self.hit / self.gold if self.gold else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        n = max(self.papers, 1)
        return {"precision": p, "recall": r, "f1": f, "rouge1": self.rouge1 / n, "rouge2": self.rouge2 / n,
                "rougeL": self.rougel / n, "items_per_paper": self.chosen / n}


def shared_sentence_rate(items_per_paper: list[dict[str, list[str]]], papers: list[GoldPaper]) -> float:
    """Share of papers in which one sentence (aligned gold sentence, else the item's text) is an item of
    two or more facets (all facets the dicts hold, Contribution included)."""
    shared = 0
    for items, paper in zip(items_per_paper, papers):
        owner: dict[object, str] = {}
        clash = False
        for facet, values in items.items():
            for it in values:
                key = align(it, paper) or " ".join(tokens(it))
                if owner.setdefault(key, facet) != facet:
                    clash = True
        shared += clash
    return shared / max(len(papers), 1)


#: The extractor's candidate section -> ACLSum's section name.
GOLD_SECTION = {"abstract": "abstract", "intro": "introduction", "conclusion": "conclusion"}


def candidate_labels(texts: list[str], sources: list[str], paper: GoldPaper) -> np.ndarray:
    """(n, 3) 0/1 labels of an extractor's candidate sentences: is the candidate a gold highlight of
    challenge / approach / outcome? A candidate is aligned within its own section."""
    out = np.zeros((len(texts), len(GOLD_ASPECT)))
    for i, (text, src) in enumerate(zip(texts, sources)):
        hit = align(text, paper, (GOLD_SECTION[src],))
        if hit is None:
            continue
        for j, aspect in enumerate(GOLD_ASPECT.values()):
            out[i, j] = hit in paper.highlights[aspect]
    return out
