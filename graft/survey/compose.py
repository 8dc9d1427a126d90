"""Text helpers of the offline (extractive) writer: facet items as survey sentences, claim types,
key-phrase headings, and spherical k-means for outlines. No LLM is involved."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from graft.text import tokens

STOPWORDS = frozenset("""
a an the and or but if then than of in on at to for from by with without within into onto over under
about as is are was were be been being this that these those it its their our we us you they them he
she his her which who whom whose what when where why how all any both each few more most other some
such no nor not only own same so too very can will just should now also may might must shall would
could do does did done has have had having here there via using use used based new novel paper propose
proposed proposes present presents show shows shown study studies approach approaches method methods
work works result results problem problems task tasks model models data one two three first second
large small well better best however while thus hence therefore e g i et al can't cannot often
address addresses across between among several many much given existing recent recently different
significant significantly state art achieve achieves achieved improve improves improved performance
hand way ways kind number set sets
""".split())

#: Cue words of each claim type, for the facet-aware checker (a claim is compared with the items of
#: the facet it asserts).
CLAIM_CUES: dict[str, tuple[str, ...]] = {
    "result": ("outperform", "achiev", "improv", "accuracy", "state-of-the-art", "state of the art",
               "experiment", "results", "shows that", "show that", "demonstrat", "gain", "reduc",
               "bleu", "f1", "speedup", "faster", "error", "%", "empirical", "evaluat", "benchmark"),
    "method": ("propos", "introduc", "present", "based on", "we use", "uses", "framework", "algorithm",
               "architecture", "approach", "model", "method", "technique", "learn", "train", "network"),
    "problem": ("challenge", "problem", "difficult", "remain", "lack", "limited", "limitation", "however",
                "open question", "bottleneck", "suffer", "costly", "expensive", "hard to"),
    "contribution": ("release", "dataset", "corpus", "resource", "we make", "publicly available", "first",
                     "contribution", "open-source", "toolkit", "annotat"),
}

_LEADS = (
    (re.compile(r"^(in|throughout) (this|the present|our) (paper|work|study|article|note)\s*,?\s*", re.I), ""),
    (re.compile(r"^(this|the present|our) (paper|work|study|article)\s+", re.I), "One study "),
    (re.compile(r"^here\s*,?\s*", re.I), ""),
)
_PRONOUNS = (
    (re.compile(r"^I\b(?=\s+[a-z])"), "The author"),
    (re.compile(r"(?<=[a-z,;] )I\b(?=\s+[a-z])"), "the author"),
    (re.compile(r"\bwe\b"), "the authors"),
    (re.compile(r"\bWe\b"), "The authors"),
    (re.compile(r"\bour\b"), "their"),
    (re.compile(r"\bOur\b"), "Their"),
    (re.compile(r"\bus\b"), "them"),
    (re.compile(r"\bourselves\b"), "themselves"),
)


def third_person(item: str) -> str:
    """A facet item (usually a sentence of the paper's abstract) rephrased in the third person, so it
    reads as a statement about the cited work: 'In this paper, we propose X.' -> 'The authors propose X.'"""
    text = " ".join(item.split()).strip()
    for pattern, repl in _LEADS:
        text = pattern.sub(repl, text, count=1)
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    text = text.strip(" ;,")
    if not text:
        return text
    text = text[0].upper() + text[1:]
    if text[-1] not in ".!?":
        text += "."
    return text


def claim_facet(text: str, default: str = "method") -> str:
    """The claim type a sentence asserts (result, method, problem or contribution), by cue words;
    `default` when no cue occurs."""
    low = text.lower()
    counts = {f: sum(low.count(c) for c in cues) for f, cues in CLAIM_CUES.items()}
    best = max(counts.values())
    if best == 0:
        return default
    if counts.get(default, 0) == best:
        return default
    return max(counts, key=lambda f: (counts[f], f == "result", f == "problem"))


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?%?")


def numbers(text: str) -> set[str]:
    """Numeric tokens of a claim (years and citation markers excluded)."""
    text = re.sub(r"\[\s*[\w.:/-]+(?:\s*,\s*[\w.:/-]+)*\s*\]", " ", text)
    return {n for n in _NUMBER.findall(text) if not re.fullmatch(r"(19|20)\d\d", n)}


def _ngrams(words: list[str], n_max: int = 3) -> set[str]:
    out = set()
    for n in range(1, n_max + 1):
        for i in range(len(words) - n + 1):
            gram = words[i : i + n]
            if gram[0] in STOPWORDS or gram[-1] in STOPWORDS or any(len(w) < 3 or w.isdigit() for w in gram):
                continue
            out.add(" ".join(gram))
    return out


def document_frequencies(texts: Sequence[str]) -> tuple[Counter, int]:
    """Phrase (1-3 words) document frequencies over `texts`, and the number of texts."""
    return Counter(g for text in texts for g in _ngrams(tokens(text))), len(texts)


def key_phrases(cluster: Sequence[str], background: tuple[Counter, int], n: int = 2,
                avoid: set[str] = frozenset()) -> list[str]:
    """The `n` phrases (1-3 words) most typical of `cluster` against the `background` document
    frequencies (tf x idf over items, longer phrases preferred), none contained in another or in
    `avoid`."""
    bg, total = background
    total = max(total, 1)
    cl = Counter(g for text in cluster for g in _ngrams(tokens(text)))
    scored = []
    for gram, tf in cl.items():
        if tf < 2 and len(cluster) > 2:
            continue
        idf = math.log((1 + total) / (1 + bg.get(gram, 0))) + 1.0
        scored.append((tf * idf * (1 + gram.count(" ")), gram))
    scored.sort(key=lambda x: (-x[0], x[1]))
    picked: list[str] = []
    for _, gram in scored:
        if gram in avoid or any(gram in p or p in gram for p in picked):
            continue
        picked.append(gram)
        if len(picked) == n:
            break
    return picked


def heading(phrases: Sequence[str]) -> str:
    """'graph neural networks', 'message passing' -> 'Graph neural networks and message passing'."""
    if not phrases:
        return "Related work"
    text = " and ".join(phrases)
    return text[0].upper() + text[1:]


def spherical_kmeans(x: np.ndarray, k: int, *, seed: int = 0, iters: int = 30) -> np.ndarray:
    """Cluster unit rows by cosine (k-means++ seeding, Lloyd iterations). Returns a label per row."""
    n = x.shape[0]
    k = max(1, min(k, n))
    rng = np.random.default_rng(seed)
    centers = [int(rng.integers(n))]
    for _ in range(1, k):
        d = 1.0 - (x @ x[centers].T).max(axis=1)
        d = np.clip(d, 0, None)
        p = d / d.sum() if d.sum() > 0 else np.full(n, 1.0 / n)
        centers.append(int(rng.choice(n, p=p)))
    c = x[centers].copy()
    labels = np.zeros(n, dtype=np.int64)
    for it in range(iters):
        new = (x @ c.T).argmax(axis=1)
        if it and np.array_equal(new, labels):
            break
        labels = new
        for j in range(k):
            members = x[labels == j]
            if len(members):
                v = members.sum(axis=0)
                c[j] = v / max(np.linalg.norm(v), 1e-12)
    return labels
