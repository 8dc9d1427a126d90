"""The offline facet extractor: sentence classification with cue phrases, position and prototypes.

Each candidate sentence (of the abstract and, when the corpus has full text, of the first paragraphs,
i.e. the introduction, and of the conclusion) gets a score for every facet,

    score_f(s) = w_cue · cue_f(s) + w_position · position_f(s) + w_embedding · prototype_f(s)

where cue_f counts facet cue phrases ("we propose", "outperform", ...), position_f is the rate at
which ACLSum annotators highlighted a sentence at that place of that section for the facet (train
split; hand-set for Contribution, which ACLSum does not annotate) and prototype_f is the largest
cosine between the sentence and a few hand-written prototype sentences of the facet (abstract
sentences only, unless `HeuristicConfig.embed_full_text`: see there). A sentence goes
to its best-scoring facet; each facet keeps its top items. A facet left empty falls back to its
best-scoring sentence (one no other facet uses if there is one), and a paper without usable sentences
to its title. All sentences of a chunk of papers go through the encoder in one batched call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np
import polars as pl

from graft.config import type_problems
from graft.encoder import DEFAULT_MODEL, Encoder
from graft.errors import ConfigError
from graft.facet_classifier import FacetClassifier, features, packaged
from graft.facets import FACETS, FacetItems, check_facet_items
from graft.text import split_sentences

#: Extractors selectable with `graft build --extractor`.
EXTRACTORS = ("heuristic", "llm")
#: How the offline extractor scores sentences (`HeuristicConfig.scorer`): "learned", the facet
#: classifier trained on ACLSum (`graft.facet_classifier`), or "rules", the hand-set weighted sum.
SCORERS = ("learned", "rules")


class FacetExtractor(Protocol):
    """Turns corpus rows into facet items, one `FacetItems` per row, every facet non-empty."""

    name: str

    def extract(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> list[FacetItems]:
        """Args:
            papers: corpus table (columns paper_id, title, abstract, full_text, ...).
            progress: called with the number of papers finished since the last call.
        Returns:
            one dict per row, in row order, with at least one item for each of `FACETS`.
        """
        ...

    def extract_counted(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> tuple[list[FacetItems], list[dict[str, int]]]:
        """`extract`, and each row's share of the per-paper counters of `stats()` (one dict per
        row), so that the counters of papers extracted in different runs add up."""
        ...

    def stats(self) -> dict[str, int]:
        """Counters for the manifest and the summary table (e.g. discarded LLM responses)."""
        ...


_NUM_FACETS = len(FACETS)
#: Prototype signal of sentences that are not embedded (`embed_full_text=False`): the mean max-cosine
#: of ACLSum introduction/conclusion sentences to the facet prototypes.
_UNEMBEDDED_PROTOTYPE = 0.3


@dataclass
class HeuristicConfig:
    """Settings of `HeuristicFacetExtractor`. Weights were tuned on ACLSum's train split only."""

    # "learned" (default): Problem / Method / Result by the facet classifier, one facet per sentence;
    # "rules": the weighted sum below (indexes built before the classifier; `BuildConfig.facet_scorer`)
    scorer: str = "learned"
    # learned: a sentence is a facet's item when that facet is its most probable one and the probability
    # reaches this. ACLSum val, abstracts (docs/results/facet_quality_aclsum.md): sentence F1 0.698 at
    # 0.3 (1.60 items per facet), 0.689 at 0.4 (1.51), 0.676 at 0.5 (1.41); 0.3 and 0.4 are within
    # 0.01 on 50 papers, and 0.4 keeps fewer items at a higher precision (the labels a user reads)
    min_probability: float = 0.4
    # learned: introduction/conclusion sentences' probabilities are lowered by this (abstract first)
    body_penalty: float = 0.0
    max_items: int = 3  # items kept per facet at most
    max_item_words: int = 40  # longer sentences are cut at a clause boundary (gold summaries: ~30 words)
    min_sentence_words: int = 5  # shorter candidates are headings, captions or PDF debris
    # candidates are the facet-bearing spans of a sentence (`facet_spans`: "We propose X, which
    # outperforms Y" -> "We propose X" and "which outperforms Y") instead of whole sentences
    spans: bool = False
    max_sentence_words: int = 80  # longer candidates are usually mis-split PDF text
    # Weights: the best mean ROUGE-L F1 (Problem/Method/Result items joined vs gold) of a grid search
    # on ACLSum's train split only (w_cue 0..2, w_position 0..6, w_embedding 0..4, item_margin 0..0.4,
    # full_text_penalty 0..5); val/test figures are in docs/results/facet_extraction.md. The surface
    # is flat: +-0.005 around the optimum, and dropping the prototypes costs only ~0.001.
    w_cue: float = 1.0  # weight of the cue-phrase signal (0..1 per facet, -1 for boilerplate)
    w_position: float = 1.5  # weight of the position prior (0..0.61, ACLSum train highlight rates)
    w_embedding: float = 0.25  # weight of the max cosine to the facet's prototype sentences (~0.2..0.8)
    item_margin: float = 0.3  # a 2nd/3rd item must score within this of the facet's best item
    # Introduction/conclusion sentences lose this much: the abstract states each facet more densely,
    # so full text mostly fills facets that no abstract sentence was assigned to (train: +0.018).
    full_text_penalty: float = 1.0
    # Embedding introduction/conclusion sentences (~5x as many as the abstract's) changed train and
    # test ROUGE-L by < 0.001, so by default they get the mean prototype cosine of such sentences
    # (0.3 on ACLSum) instead, and extraction with full text runs ~5x faster.
    embed_full_text: bool = False
    intro_paragraphs: int = 6  # full text: leading paragraphs read as the introduction (ACL median: 6)
    conclusion_paragraphs: int = 3  # full text: paragraphs read from the detected conclusion on
    chunk_papers: int = 1024  # papers embedded per encoder call (~6k abstract sentences), one progress step

    def __post_init__(self) -> None:
        problems = type_problems(self)
        if problems:
            raise ConfigError("HeuristicConfig: " + "; ".join(problems))
        if self.scorer not in SCORERS:
            raise ConfigError(f"HeuristicConfig: scorer '{self.scorer}' is unknown; allowed: {', '.join(SCORERS)}")
        if not 0.0 <= self.min_probability <= 1.0:
            raise ConfigError(f"HeuristicConfig: min_probability={self.min_probability} (a probability in [0, 1])")
        if self.max_items < 1 or self.max_item_words < 5 or self.min_sentence_words < 1:
            raise ConfigError(
                f"HeuristicConfig: max_items={self.max_items} (>= 1), max_item_words="
                f"{self.max_item_words} (>= 5), min_sentence_words={self.min_sentence_words} (>= 1)"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> HeuristicConfig:
        """Build from a dict (e.g. a manifest); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"HeuristicConfig: unknown key(s) {unknown}; allowed: {sorted(known)}")
        return cls(**values)


def _rx(*patterns: str) -> list[re.Pattern[str]]:
    return [re.compile(p, re.IGNORECASE) for p in patterns]


# Cue phrases per facet, in FACETS order. Each distinct match adds to the facet's cue signal.
CUES: dict[str, list[re.Pattern[str]]] = {
    "problem": _rx(
        r"\bchalleng", r"\bproblem", r"\bhowever\b", r"\bremains?\b", r"\black of\b", r"\bdifficult",
        r"\bsuffers?\b", r"\blimit(?:ed|ation)", r"\bfails? to\b", r"\bbottleneck", r"\bexpensive\b",
        r"\bscarce|\bscarcity", r"\b(?:is|are|remains) (?:still )?(?:unclear|hard|open)\b", r"\bissues?\b",
        r"\b(?:existing|previous|prior|current) (?:work|approach|method|system|model)s?\b",
        r"\brequires?\b", r"\bnot (?:well|been|able)\b", r"\bignor(?:e|es|ed|ing)\b",
    ),
    "method": _rx(
        r"\bwe (?:propose|present|introduce|develop|describe|design|use|employ|adopt|apply|explore)",
        r"\bour (?:model|method|approach|system|framework|algorithm|technique)", r"\bbased on\b",
        r"\bframework\b", r"\barchitecture\b", r"\b(?:model|algorithm|method) (?:that|which)\b",
        r"\bby (?:using|leveraging|combining|learning|training|incorporating|exploiting)\b",
        r"\bjointly\b", r"\bconsists? of\b", r"\bwe (?:first|then)\b", r"\bwe (?:train|model|formulate|cast)\b",
    ),
    "result": _rx(
        r"\bresults? (?:show|indicate|demonstrate|suggest)", r"\boutperform", r"\bachiev", r"\bimprov",
        r"\bstate[- ]of[- ]?the[- ]art\b", r"\bexperiment", r"\d+(?:\.\d+)?\s?%", r"\b\d+\.\d+\b",
        r"\bsignificant(?:ly)?\b", r"\b(?:accuracy|f1|f-score|bleu|rouge|precision|recall|mrr)\b",
        r"\b(?:show|shows|showed|demonstrate[sd]?|find|found) that\b", r"\bgains?\b",
        r"\bbaselines?\b", r"\beffective(?:ness)?\b", r"\bperform(?:s|ance)?\b", r"\bpoints?\b",
    ),
    "contribution": _rx(
        r"\bcontribution", r"\bwe (?:release|make|publicly)", r"\bto (?:the best of )?our knowledge\b",
        r"\b(?:the )?first (?:to|time|work|attempt|study)\b", r"\bnovel\b", r"\b(?:new|large)[- ]scale\b",
        r"\b(?:data ?set|corpus|benchmark|resource|toolkit|annotations?)\b",
        r"\b(?:code|data|models?) (?:is|are|will be) (?:publicly )?(?:available|released)",
        r"\bpublicly available\b", r"\bopen[- ]source", r"\bgithub\b", r"\bnew\b",
    ),
}
# Boilerplate that belongs to no facet (outline, future work, thanks): cue signal -1 for every facet.
NEGATIVE = _rx(
    r"\b(?:this|the) paper is (?:organi[sz]ed|structured)\b", r"\bsection \d", r"\bin future work\b",
    r"\bfuture (?:work|research|directions)\b", r"\bwe (?:plan|intend|hope) to\b", r"\backnowledg",
    r"\bthank", r"\bfunded by\b", r"\bgrant\b", r"\btable \d|\bfigure \d|\bfig\. ?\d", r"§",
    r"\bequal(?:ly)? contribut", r"\bcorresponding author\b", r"\bwork (?:was )?done (?:while|during)\b",
)

#: Hand-written prototype sentences per facet, embedded once per extractor.
PROTOTYPES: dict[str, tuple[str, ...]] = {
    "problem": (
        "Existing methods fail to handle this problem and remain limited.",
        "A key challenge is the lack of annotated training data.",
        "However, current approaches suffer from poor performance on rare cases.",
        "This task is difficult because the input is noisy and ambiguous.",
        "Previous work has largely ignored this issue, which remains an open problem.",
        "It is unclear how to model long-range dependencies efficiently.",
    ),
    "method": (
        "We propose a novel neural model that combines an encoder with an attention mechanism.",
        "Our approach learns representations by training on unlabeled data.",
        "We introduce a framework that jointly models the two tasks.",
        "The method uses a graph to capture relations between words.",
        "We present an algorithm based on dynamic programming.",
        "Our model is trained with a multi-task objective.",
    ),
    "result": (
        "Experimental results show that our method outperforms strong baselines.",
        "Our model achieves state-of-the-art performance on three benchmark datasets.",
        "The proposed approach improves accuracy by 5 points over the previous best system.",
        "Experiments demonstrate significant gains in F1 score.",
        "Evaluation shows that the system yields better translation quality.",
        "Our analysis reveals that the model generalizes well to unseen domains.",
    ),
    "contribution": (
        "Our main contributions are as follows.",
        "To the best of our knowledge, this is the first work to address this task.",
        "We release a new dataset and the code to the research community.",
        "We construct a large annotated corpus for this task.",
        "The code and data are publicly available.",
        "We provide a new benchmark and an extensive analysis.",
    ),
}

# Position prior: knots at relative positions 0.1, 0.3, 0.5, 0.7, 0.9 of the section. Problem /
# Method / Result rows are the rates at which ACLSum's annotators highlighted sentences there for
# challenge / approach / outcome (train split, rounded); Contribution rows are hand-set.
_KNOTS = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
_POSITION = {
    "abstract": ((.48, .29, .09, 0, 0), (.26, .61, .59, .43, .17), (.01, .02, .14, .38, .56),
                 (.10, .10, .20, .30, .30)),
    "intro": ((.25, .21, .15, .03, .01), (.03, .07, .17, .22, .13), (0, .01, .02, .07, .21),
              (0, .05, .10, .30, .40)),
    "conclusion": ((.10, .03, .02, .01, 0), (.60, .34, .19, .07, .01), (.13, .28, .25, .27, .12),
                   (.30, .20, .10, .10, .10)),
}

_CITATION = re.compile(
    r"\s*(?:\([^()]*\b(?:19|20)\d{2}[a-z]?\b[^()]*\)|\[\s*\d+(?:\s*[,;–-]\s*\d+)*\s*\])"
)
_SPACE_PUNCT = re.compile(r"\s+([.,;:!?])")
_LEAD = re.compile(
    r"^(?:[•·*\-–]\s*|\(?(?:\d{1,2}|[ivx]{1,4}|[a-h])\)\s*|"
    r"(?:in|within) this (?:paper|work|article|study|note|thesis|section)\s*,?\s*|"
    r"(?:here|however|moreover|furthermore|in addition|additionally|finally|specifically|"
    r"to this end|in particular|thus|therefore|first|second|third|then|also)\s*,\s*)+",
    re.IGNORECASE,
)
# Opening words of a conclusion paragraph, used to find the conclusion in plain full text.
_CONCLUSION_OPENER = re.compile(
    r"^(?:in this (?:paper|work|article|study)|we (?:have )?(?:presented|proposed|introduced|described|"
    r"shown|showed|explored|investigated|studied|developed)|this (?:paper|work) (?:has )?"
    r"(?:presents?|presented|proposes?|proposed|introduced|described)|to conclude|in conclusion|"
    r"in summary|we conclude|to summari[sz]e)",
    re.IGNORECASE,
)


def strip_citations(text: str) -> str:
    """Drop parenthetical author-year citations "(Smith et al., 2019)" and numeric ones "[12]"."""
    return _SPACE_PUNCT.sub(r"\1", " ".join(_CITATION.sub("", text).split()))


def clean_sentence(text: str, max_words: int | None = None) -> str:
    """A sentence as a facet item: no citations, no lead-in ("In this paper, "), at most `max_words`.

    A sentence over `max_words` words is cut at its last comma/semicolon in the second half of the
    allowance, else after `max_words` words, so an item is always a prefix of the cleaned sentence.
    """
    text = _LEAD.sub("", strip_citations(text)).strip()
    words = text.split()
    if max_words is not None and len(words) > max_words:
        head = " ".join(words[:max_words])
        cut = max(head.rfind(", "), head.rfind("; "))
        text = head[:cut] if cut >= len(" ".join(words[: max_words // 2])) else head
        text = text.rstrip(",;:-– ")
    return text[:1].upper() + text[1:] if text else text


def _alpha_ratio(words: list[str]) -> float:
    return sum(w.strip(".,;:()'\"").isalpha() for w in words) / max(len(words), 1)


@dataclass
class PaperCandidates:
    """A paper's candidate sentences with their per-facet signals (rows in candidate order)."""

    title: str  # the last-resort item
    texts: list[str]  # citation-free sentences, as scored and embedded
    sources: list[str]  # abstract / intro / conclusion
    cue: np.ndarray  # (n, 4)
    position: np.ndarray  # (n, 4)
    prototype: np.ndarray | None = None  # (n, 4), filled by the encoder pass (rules)
    probability: np.ndarray | None = None  # (n, 3) Problem / Method / Result, filled by the encoder pass (learned)


def _full_text_parts(full_text: str, cfg: HeuristicConfig) -> tuple[list[str], list[str]]:
    """Introduction and conclusion paragraphs of plain full text (paragraphs split by blank lines)."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", full_text) if p.strip()]
    intro = paras[: cfg.intro_paragraphs]
    rest = paras[cfg.intro_paragraphs :]
    if not rest or cfg.conclusion_paragraphs <= 0:
        return intro, []
    # The conclusion starts at the last opener-led paragraph of the second half and runs until the
    # first short paragraph: S2ORC puts footnotes (median 13 words; conclusion paragraphs: 75) and
    # appendices after it, so "the last paragraphs" alone would mostly read those.
    hits = [i for i in range(len(rest) // 2, len(rest)) if _CONCLUSION_OPENER.match(rest[i])]
    first = hits[-1] if hits else max(len(rest) - cfg.conclusion_paragraphs, 0)
    conclusion = []
    for para in rest[first : first + cfg.conclusion_paragraphs]:
        if len(para.split()) < 30:
            break
        conclusion.append(para)
    return intro, conclusion


#: Where a sentence's second facet starts: a clause stating an outcome ("which outperforms",
#: ", achieving", "and show that"), a means ("by introducing"), or a semicolon.
_SPAN_BREAK = re.compile(
    r",?\s+(?=(?:which|that)\s+(?:achieves?|outperforms?|improves?|yields?|leads?|results?|reduces?|enables?|"
    r"allows?|significantly|consistently|substantially)\b)"
    r"|;\s+"
    r"|,\s+(?=(?:achieving|outperforming|improving|yielding|leading to|resulting in|reducing|obtaining|reaching|"
    r"surpassing)\b)"
    r"|,?\s+and\s+(?=(?:we\s+)?(?:also\s+)?(?:show|demonstrate|find|achieve|obtain|observe|report|prove|confirm)s?\b)"
    r"|,?\s+(?=(?:by|through|via)\s+[a-z]+ing\b)")


def facet_spans(sentence: str, min_words: int = 5) -> list[str]:
    """A sentence cut where a second facet starts (`_SPAN_BREAK`); a part of fewer than `min_words`
    words stays with the part before it."""
    parts: list[str] = []
    last = 0
    for m in _SPAN_BREAK.finditer(sentence):
        parts.append(sentence[last : m.start()])
        last = m.end()
    parts.append(sentence[last:])
    out: list[str] = []
    for part in (p.strip(" ,;") for p in parts):
        if out and len(part.split()) < min_words:
            out[-1] = f"{out[-1]} {part}"
        elif part:
            out.append(part)
    if len(out) > 1 and len(out[0].split()) < min_words:
        out[:2] = [f"{out[0]} {out[1]}"]
    return out or [sentence]


def _sentences(paragraphs: list[str], source: str, cfg: HeuristicConfig) -> list[str]:
    out = []
    for sent in (s for p in paragraphs for s in split_sentences(p)):
        sent = strip_citations(sent)
        words = sent.split()
        if not cfg.min_sentence_words <= len(words) <= cfg.max_sentence_words:
            continue
        if _alpha_ratio(words) < 0.6 or "http" in sent or "www." in sent:
            continue
        if source != "abstract" and not sent[0].isupper():  # fragments, footnotes, equations
            continue
        if cfg.spans:
            out.extend(facet_spans(sent, cfg.min_sentence_words))
        else:
            out.append(sent)
    return out


def _position(source: str, n: int) -> np.ndarray:
    rel = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(n)
    return np.stack([np.interp(rel, _KNOTS, np.asarray(k)) for k in _POSITION[source]], axis=1)


def cue_scores(texts: list[str]) -> np.ndarray:
    """(n, 4) cue signal: 1 - 0.5^hits per facet (distinct cue patterns matched), -1 on boilerplate."""
    out = np.zeros((len(texts), _NUM_FACETS))
    for i, text in enumerate(texts):
        if any(p.search(text) for p in NEGATIVE):
            out[i] = -1.0
            continue
        for j, facet in enumerate(FACETS):
            hits = sum(1 for p in CUES[facet] if p.search(text))
            out[i, j] = 1.0 - 0.5**hits
    return out


def _prepare(row: dict[str, Any], cfg: HeuristicConfig) -> PaperCandidates:
    parts = [("abstract", _sentences([str(row.get("abstract") or "")], "abstract", cfg))]
    if row.get("full_text"):
        intro, conclusion = _full_text_parts(str(row["full_text"]), cfg)
        parts += [("intro", _sentences(intro, "intro", cfg)),
                  ("conclusion", _sentences(conclusion, "conclusion", cfg))]
    texts = [t for _, sents in parts for t in sents]
    sources = [src for src, sents in parts for _ in sents]
    position = np.concatenate([_position(src, len(s)) for src, s in parts])
    title = " ".join(str(row.get("title") or "").split()) or "(untitled)"
    return PaperCandidates(title, texts, sources, cue_scores(texts), position)


def candidate_sentences(row: dict[str, Any], config: HeuristicConfig | None = None) -> list[str]:
    """The sentences a corpus row offers as facet items (abstract, then introduction, conclusion)."""
    return _prepare(row, config or HeuristicConfig()).texts


def select_items(paper: PaperCandidates, cfg: HeuristicConfig, counts: dict[str, int] | None = None) -> FacetItems:
    """Assign each candidate to its best facet and keep each facet's top items (with fallbacks).

    Args:
        paper: candidates with their signals (`HeuristicFacetExtractor.prepare`).
        cfg: weights and limits.
        counts: if given, its "fallback_items" is increased by the facets that needed a fallback.
    """
    chosen: dict[str, list[int]] = {f: [] for f in FACETS}
    n_fallback = n_shared = 0
    if paper.texts:
        proto = paper.prototype if paper.prototype is not None else np.zeros_like(paper.cue)
        score = cfg.w_cue * paper.cue + cfg.w_position * paper.position + cfg.w_embedding * proto
        in_body = np.array([s != "abstract" for s in paper.sources], dtype=np.float64)
        score -= cfg.full_text_penalty * in_body[:, None]
        best_facet = np.argmax(score, axis=1)
        # Ties are broken by candidate order, so the output is deterministic.
        order = {f: sorted(range(len(paper.texts)), key=lambda i, j=j: (-score[i, j], i))
                 for j, f in enumerate(FACETS)}
        for j, f in enumerate(FACETS):
            mine = [i for i in order[f] if best_facet[i] == j]
            if mine:
                top = score[mine[0], j]
                chosen[f] = [i for i in mine if score[i, j] >= top - cfg.item_margin][: cfg.max_items]
        # A facet no sentence prefers takes its best-scoring sentence, one no other facet uses if any.
        used = {i for ids in chosen.values() for i in ids}
        for f in FACETS:
            if not chosen[f]:
                free = next((i for i in order[f] if i not in used), None)
                n_shared += free is None
                chosen[f] = [order[f][0] if free is None else free]
                used.add(chosen[f][0])
                n_fallback += 1
    items: FacetItems = {}
    for f in FACETS:
        texts: list[str] = []
        for i in chosen[f]:
            item = clean_sentence(paper.texts[i], cfg.max_item_words)
            if item and item not in texts:
                texts.append(item)
        if not texts:  # last resort: the title
            texts, n_fallback = [paper.title], n_fallback + 1
        items[f] = texts
    if counts is not None:
        counts["fallback_items"] = counts.get("fallback_items", 0) + n_fallback
        counts["shared_items"] = counts.get("shared_items", 0) + n_shared
    return check_facet_items(items)


def select_items_learned(paper: PaperCandidates, cfg: HeuristicConfig,
                         counts: dict[str, int] | None = None) -> FacetItems:
    """The learned scorer's items: every sentence is the item of one facet at most.

    A sentence goes to its most probable of Problem / Method / Result when that probability reaches
    `cfg.min_probability`; each facet keeps its `max_items` most probable sentences. A facet left empty
    takes its most probable sentence no facet uses. Contribution (no gold to learn from) takes the
    unused sentences with a contribution cue ("to our knowledge, the first", "we release", "dataset"),
    else the title. A facet still empty takes a facet's spare item (one of several, not its best)
    that fits it best, else the title if no facet has it, and only then a sentence of another facet
    (counted as `shared_items`).
    """
    n_fallback = n_shared = 0
    chosen: dict[str, list[int]] = {f: [] for f in FACETS}  # candidate indices; -1 = the title
    n = len(paper.texts)
    prob = paper.probability if paper.probability is not None else np.zeros((n, len(FACETS) - 1))
    if n:
        in_body = np.array([s != "abstract" for s in paper.sources], dtype=np.float64)
        score = prob - cfg.body_penalty * in_body[:, None]
        # boilerplate, and repeats of an earlier candidate (introductions often restate the abstract)
        seen: set[str] = set()
        boiler = paper.cue[:, 0] < 0
        for i, text in enumerate(paper.texts):
            key = " ".join(clean_sentence(text, cfg.max_item_words).lower().split())
            boiler[i] |= key in seen
            seen.add(key)
        best = np.argmax(score, axis=1)
        order = [sorted(range(n), key=lambda i, j=j: (-score[i, j], i)) for j in range(score.shape[1])]
        for j, f in enumerate(FACETS[:3]):
            chosen[f] = [i for i in order[j] if best[i] == j and score[i, j] >= cfg.min_probability
                         and not boiler[i]][: cfg.max_items]
        used = {i for ids in chosen.values() for i in ids}
        for j, f in enumerate(FACETS[:3]):
            if not chosen[f]:
                free = [i for i in order[j] if i not in used and not boiler[i]]
                if free:
                    chosen[f], n_fallback = [free[0]], n_fallback + 1
                    used.add(free[0])
        contrib = paper.cue[:, 3]
        chosen["contribution"] = sorted((i for i in range(n) if i not in used and contrib[i] > 0 and not boiler[i]),
                                        key=lambda i: (-contrib[i], i))[: cfg.max_items]
    for j, f in enumerate(FACETS):
        if chosen[f]:
            continue
        n_fallback += 1
        if not n:  # a paper without sentences has only its title for every facet
            chosen[f] = [-1]
            continue
        used = {i for ids in chosen.values() for i in ids}
        # a facet holding several items can give away one that is not its best
        spares = [(g, i) for g in FACETS if len(chosen[g]) > 1 for i in chosen[g][1:]]
        col = prob[:, j] if j < 3 else paper.cue[:, 3]
        title_first = f == "contribution"  # a title names what a paper contributes, seldom its problem
        if title_first and -1 not in used:
            chosen[f] = [-1]
        elif spares:
            g, i = max(spares, key=lambda gi, col=col: (col[gi[1]], -gi[1]))
            chosen[g].remove(i)
            chosen[f] = [i]
        elif -1 not in used:
            chosen[f] = [-1]
        else:  # nothing left: share the facet's best sentence
            chosen[f] = [order[j][0] if j < 3 else max(range(n), key=lambda i: (paper.cue[i, 3], -i))]
            n_shared += 1
    items: FacetItems = {}
    for f in FACETS:
        texts = []
        for i in chosen[f]:
            item = paper.title if i < 0 else clean_sentence(paper.texts[i], cfg.max_item_words)
            if item and item not in texts:
                texts.append(item)
        items[f] = texts or [paper.title]
    if counts is not None:
        counts["fallback_items"] = counts.get("fallback_items", 0) + n_fallback
        counts["shared_items"] = counts.get("shared_items", 0) + n_shared
    return check_facet_items(items)


class HeuristicFacetExtractor:
    """Offline facet extractor (`graft build --extractor heuristic`); see the module docstring."""

    name = "heuristic"

    def __init__(self, encoder: Encoder | None = None, config: HeuristicConfig | None = None) -> None:
        self._encoder = encoder
        self.config = config or HeuristicConfig()
        self._prototypes: np.ndarray | None = None  # (4, k, dim)
        self._classifier: FacetClassifier | None = None
        self._scorer_encoder: Encoder | None = None  # the learned scorer's, where the items' encoder differs
        self._counts = {"papers": 0, "sentences": 0, "fallback_items": 0, "shared_items": 0,
                        "title_only_papers": 0}

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = Encoder()
        return self._encoder

    def prepare(self, papers: pl.DataFrame) -> list[PaperCandidates]:
        """Candidate sentences and all three signals for every row (one batched encoder pass)."""
        cfg = self.config
        prepared = [_prepare(row, cfg) for row in papers.iter_rows(named=True)]
        if cfg.scorer == "learned":
            return self._classify(prepared)
        if self._prototypes is None:
            flat = [s for f in FACETS for s in PROTOTYPES[f]]
            vecs = self.encoder.encode(flat)
            self._prototypes = vecs.reshape(_NUM_FACETS, len(flat) // _NUM_FACETS, -1)
        embed = [[cfg.embed_full_text or s == "abstract" for s in p.sources] for p in prepared]
        texts = [t for p, keep in zip(prepared, embed) for t, k in zip(p.texts, keep) if k]
        emb = self.encoder.encode(texts) if texts else np.zeros((0, self.encoder.dim), np.float32)
        sims = np.einsum("nd,fkd->nfk", emb, self._prototypes).max(axis=2).astype(np.float64)
        start = 0
        for p, keep in zip(prepared, embed):
            p.prototype = np.full((len(p.texts), _NUM_FACETS), _UNEMBEDDED_PROTOTYPE)
            n = sum(keep)
            p.prototype[np.asarray(keep, dtype=bool)] = sims[start : start + n]
            start += n
        return prepared

    @property
    def classifier(self) -> FacetClassifier:
        """The packaged facet classifier, checked against its scoring encoder once."""
        if self._classifier is None:
            clf = packaged()
            encoder = self.scoring_encoder(clf)
            clf.check_encoder(getattr(encoder, "name", None), int(encoder.dim))
            self._classifier = clf
        return self._classifier

    def scoring_encoder(self, clf: FacetClassifier) -> Encoder:
        """The encoder whose sentence vectors the learned scorer reads: this extractor's own when it
        is the model the classifier was trained on (or an unnamed test encoder), else that model (the
        packaged MiniLM) on the same device, loaded once. So a build may embed its items and papers
        with another model (a corpus-adapted one) while its facets stay those of the packaged scorer."""
        name = getattr(self.encoder, "name", None)
        if name is None or name == clf.encoder or clf.encoder != DEFAULT_MODEL:
            return self.encoder
        if self._scorer_encoder is None:
            self._scorer_encoder = Encoder(device=getattr(self.encoder, "device", "cpu"),
                                           batch_size=getattr(self.encoder, "batch_size", None))
        return self._scorer_encoder

    def _classify(self, prepared: list[PaperCandidates]) -> list[PaperCandidates]:
        """Fill each paper's Problem / Method / Result probabilities (all its candidates embedded at once)."""
        clf = self.classifier
        encoder = self.scoring_encoder(clf)
        texts = [t for p in prepared for t in p.texts]
        emb = encoder.encode(texts) if texts else np.zeros((0, clf.dim), np.float32)
        start = 0
        for p in prepared:
            k = len(p.texts)
            p.probability = clf.probabilities(features(emb[start : start + k], p.sources, p.cue)) if k else None
            start += k
        return prepared

    def extract(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> list[FacetItems]:
        """Facet items for every row of `papers` (columns title, abstract, optional full_text).

        Args:
            papers: corpus table; `full_text` may be absent or null (abstract-only corpora).
            progress: called with the number of papers finished after each chunk of papers.
        Returns:
            one `FacetItems` per row, in row order, every facet with 1..max_items items.
        """
        return self.extract_counted(papers, progress=progress)[0]

    def extract_counted(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> tuple[list[FacetItems], list[dict[str, int]]]:
        """`extract`, and each paper's share of `stats()` (papers, sentences, fallback_items,
        title_only_papers), so the counters of papers taken apart in other runs add up."""
        out: list[FacetItems] = []
        counts: list[dict[str, int]] = []
        step = max(self.config.chunk_papers, 1)
        for start in range(0, papers.height, step):
            chunk = self.prepare(papers.slice(start, step))
            for p in chunk:
                mine = {"papers": 1, "sentences": len(p.texts), "fallback_items": 0, "shared_items": 0,
                        "title_only_papers": int(not p.texts)}
                select = select_items_learned if self.config.scorer == "learned" else select_items
                out.append(select(p, self.config, mine))
                counts.append(mine)
                for k, v in mine.items():
                    self._counts[k] += v
            if progress is not None:
                progress(len(chunk))
        return out, counts

    def stats(self) -> dict[str, int]:
        """Papers seen, candidate sentences scored, facets filled by a fallback, facets whose item is
        another facet's sentence (learned scorer), title-only papers."""
        return dict(self._counts)
