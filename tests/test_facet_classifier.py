"""The learned facet scorer: the packaged classifier on real ACLSum sentences, one facet per sentence,
and the setting that keeps the hand-set rules for indexes built before it."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from eval.facet_gold import GOLD_ASPECT, align, candidate_labels, load_gold_papers
from graft.build_config import BuildConfig
from graft.encoder import Encoder
from graft.errors import ConfigError, GraftError
from graft.extract import (
    HeuristicConfig,
    HeuristicFacetExtractor,
    PaperCandidates,
    _prepare,
    candidate_sentences,
    cue_scores,
    select_items_learned,
)
from graft.facet_classifier import EXTRA_FEATURES, FacetClassifier, features, packaged
from graft.facets import FACETS
from graft.text import split_sentences
from graphbuild.corpus import load_aclsum

pytest.importorskip("aclsum", reason="ACLSum papers come from the `aclsum` package")


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder()


@pytest.fixture(scope="module")
def test_papers() -> tuple[list, pl.DataFrame]:
    """The first 20 papers of ACLSum's test split (never used to train or tune the classifier)."""
    gold = load_gold_papers("test")[:20]
    corpus = load_aclsum().papers
    rows = corpus.filter(pl.col("paper_id").is_in([g.paper_id for g in gold]))
    order = {pid: k for k, pid in enumerate(rows["paper_id"])}
    return gold, rows[[order[g.paper_id] for g in gold]]


def _shared(items: dict[str, list[str]]) -> set[str]:
    """Item texts (and sentences of which an item is a prefix) that two facets hold."""
    seen: dict[str, str] = {}
    clash = set()
    for facet, values in items.items():
        for item in values:
            key = " ".join(item.lower().split())
            for other, owner in seen.items():
                if owner != facet and (key.startswith(other) or other.startswith(key)):
                    clash.add(item)
            seen.setdefault(key, facet)
    return clash


def test_no_sentence_is_an_item_of_two_facets(encoder: Encoder, test_papers) -> None:
    """Real ACLSum abstracts, whole and cut to their first three sentences (short abstracts are common
    on arXiv): no paper with 3 or more candidate sentences has one sentence as its item in two facets
    (the rules gave a facet's sentence to every facet left empty)."""
    _, rows = test_papers
    cut = rows.with_columns(
        pl.col("abstract").map_elements(lambda a: " ".join(split_sentences(a)[:3]), return_dtype=pl.Utf8),
        pl.lit(None, dtype=pl.Utf8).alias("full_text"))
    extractor = HeuristicFacetExtractor(encoder)
    short = checked = 0
    for frame in (rows.with_columns(pl.lit(None, dtype=pl.Utf8).alias("full_text")), cut, rows):
        for row, items in zip(frame.iter_rows(named=True), extractor.extract(frame)):
            if len(candidate_sentences(row)) < 3:  # 2 sentences and the title cannot fill 4 facets apart
                short += 1
                continue
            assert not _shared(items), (row["paper_id"], items)
            checked += 1
    assert checked >= 50 and extractor.stats()["shared_items"] <= short


def test_classifier_ranks_gold_highlights_on_the_test_split(encoder: Encoder, test_papers) -> None:
    """Probabilities of the packaged classifier against ACLSum test highlights of the abstracts: the
    gold sentences of each aspect get a far higher mean probability than the other sentences, and the
    most probable aspect of a highlighted sentence is its own aspect well above chance (1/3)."""
    gold, rows = test_papers
    clf = packaged()
    probs, labels = [], []
    for paper, row in zip(gold, rows.iter_rows(named=True)):
        cand = _prepare({**row, "full_text": None}, HeuristicConfig())
        probs.append(clf.probabilities(features(encoder.encode(cand.texts), cand.sources, cand.cue)))
        labels.append(candidate_labels(cand.texts, cand.sources, paper))
    p, y = np.vstack(probs), np.vstack(labels)
    assert y.sum(axis=0).min() >= 10  # each aspect has gold sentences here
    for j, aspect in enumerate(GOLD_ASPECT.values()):
        pos, neg = p[y[:, j] == 1, j].mean(), p[y[:, j] == 0, j].mean()
        assert pos > neg + 0.25, (aspect, pos, neg)
    single = y.sum(axis=1) == 1
    right = (p[single].argmax(axis=1) == y[single].argmax(axis=1)).mean()
    assert right > 0.6, right


def test_classifier_on_named_sentences(encoder: Encoder) -> None:
    """Sentences of an ACLSum test paper (E09-1056, its abstract) that annotators highlighted for one aspect."""
    gold = next(g for g in load_gold_papers("test") if g.paper_id == "E09-1056")
    row = load_aclsum().papers.filter(pl.col("paper_id") == "E09-1056").row(0, named=True)
    cand = _prepare({**row, "full_text": None}, HeuristicConfig())
    probs = packaged().probabilities(features(encoder.encode(cand.texts), cand.sources, cand.cue))
    for facet, aspect in GOLD_ASPECT.items():
        j = list(GOLD_ASPECT).index(facet)
        top = cand.texts[int(np.argmax(probs[:, j]))]
        assert align(top, gold, ("abstract",)) in gold.highlights[aspect], (facet, top)


def _candidates(probability: list[list[float]], texts: list[str] | None = None) -> PaperCandidates:
    texts = texts or [f"Sentence number {i} says something here." for i in range(len(probability))]
    return PaperCandidates("The Title", texts, ["abstract"] * len(texts), cue_scores(texts),
                           np.zeros((len(texts), 4)), probability=np.asarray(probability, dtype=float))


def test_learned_selection_gives_each_sentence_one_facet() -> None:
    cfg = HeuristicConfig()
    # sentence 0 is most probably Method, but Problem has nothing else: it stays Method only
    counts: dict[str, int] = {}
    items = select_items_learned(_candidates([[0.6, 0.9, 0.1], [0.1, 0.2, 0.8]]), cfg, counts)
    assert items["method"] == ["Sentence number 0 says something here."]
    assert items["result"] == ["Sentence number 1 says something here."]
    assert items["problem"] == ["The Title"]  # the title, not another facet's sentence
    # Contribution: no sentence and no title left, so one sentence is shared (counted)
    assert counts == {"fallback_items": 2, "shared_items": 1}
    # a contribution cue in an unused sentence makes it the contribution
    texts = ["Parsing tweets is hard for current parsers.", "We propose a transition parser.",
             "It outperforms baselines.", "We release a new dataset of annotated tweets."]
    items = select_items_learned(_candidates([[.9, .1, .1], [.1, .9, .1], [.1, .1, .9], [.1, .3, .2]], texts), cfg)
    assert items == {"problem": [texts[0]], "method": [texts[1]], "result": [texts[2]], "contribution": [texts[3]]}
    # below min_probability a sentence is only a fallback: each facet's best unused sentence
    low, counts = dataclasses.replace(cfg, min_probability=0.95), {}
    again = select_items_learned(_candidates([[.9, .1, .1], [.1, .9, .1], [.1, .1, .9], [.1, .3, .2]], texts),
                                 low, counts)
    assert again == items and counts == {"fallback_items": 3, "shared_items": 0}


def test_weights_file_and_settings(tmp_path) -> None:
    clf = packaged()
    assert clf.coef.shape == (3, clf.dim + len(EXTRA_FEATURES)) and np.isfinite(clf.coef).all()
    assert clf.meta["trained_on"].startswith("ACLSum train")
    path = tmp_path / "w.json"
    clf.save(path)
    again = FacetClassifier.load(path)
    assert np.allclose(again.coef, clf.coef, atol=1e-6) and again.encoder == clf.encoder
    with pytest.raises(ConfigError, match="facet_scorer='rules'"):
        clf.check_encoder("some/other-model", clf.dim)
    with pytest.raises(GraftError, match="features"):
        clf.probabilities(np.zeros((1, 5)))
    path.write_text("{}")
    with pytest.raises(GraftError, match="graft-facet-classifier/1"):
        FacetClassifier.load(path)
    with pytest.raises(ConfigError, match="scorer 'nope'"):
        HeuristicConfig(scorer="nope")
    with pytest.raises(ConfigError, match="facet_scorer 'nope'"):
        BuildConfig(facet_scorer="nope")
    # new builds score with the classifier; an index built before it keeps the rules
    assert BuildConfig().heuristic_config().scorer == "learned"
    assert BuildConfig.from_dict({}).heuristic_config().scorer == "rules"
    assert set(FACETS[:3]) == set(GOLD_ASPECT)


def test_facet_quality_scores_an_llm_extractor_and_falls_back_where_its_answer_is_discarded(encoder, tmp_path) -> None:
    """experiments/facet_quality.py with an LLM system: `graft build`'s LLM extractor reads each
    answer strictly; a paper whose answer is not the four-facet JSON takes the learned heuristic's
    items, and the report counts both. The stand-in model copies each paper's first sentences."""
    import json

    from experiments import facet_quality
    from graft.text import split_sentences as sentences

    class Scripted:
        def __init__(self) -> None:
            self.asked = 0

        def complete_many(self, requests, progress=None):
            out = []
            for r in requests:
                self.asked += 1
                paper = json.loads(r.messages[-1]["content"].split("<data>")[1].split("</data>")[0])
                first = sentences(paper["abstract"])
                answer = {f: [first[min(k, len(first) - 1)]] for k, f in enumerate(FACETS)}
                out.append("Sure! " + json.dumps(answer) if self.asked == 2 else json.dumps(answer))
            return out

        def stats(self):
            return {"calls": self.asked}

    client = Scripted()
    report = facet_quality.run(["test"], command="test", limit=3, scopes=("abstract",), llm=("llm scripted", client))
    stats = report["llm"]["abstract"]
    assert client.asked == 3 and (stats["papers"], stats["llm_ok"], stats["discarded"], stats["fallback"]) == (3, 2, 1, 1)
    scored = report["splits"]["test"]["scopes"]["abstract"]
    assert set(scored) >= {"lead", "learned", "llm scripted"}
    assert 0.0 <= scored["llm scripted"]["mean"]["f1"] <= 1.0
    md = facet_quality.markdown(report)
    assert "| **llm scripted** | mean |" in md and "2 of 3 answers passed the extractor's check, 1 discarded" in md


class _OtherModel:
    """An encoder of another model (as a corpus-adapted one is): its own name, other vectors."""

    def __init__(self, base: Encoder) -> None:
        self.base, self.name, self.dim = base, "/models/corpus-adapted", base.dim
        self.device, self.batch_size, self.calls = base.device, base.batch_size, 0

    def encode(self, texts: list[str], **kwargs) -> np.ndarray:
        self.calls += 1
        return -self.base.encode(texts, **kwargs)


def test_learned_scorer_reads_its_own_encoder_when_the_items_use_another(encoder: Encoder, test_papers) -> None:
    """A build whose items are embedded by another model keeps the packaged scorer's facets: the
    sentences are scored with the packaged MiniLM the classifier was trained on, never with the
    other model's vectors (which would score them as noise)."""
    _, rows = test_papers
    frame = rows.head(8).with_columns(pl.lit(None, dtype=pl.Utf8).alias("full_text"))
    plain = HeuristicFacetExtractor(encoder).extract(frame)
    other = _OtherModel(encoder)
    extractor = HeuristicFacetExtractor(other)
    assert extractor.extract(frame) == plain
    assert other.calls == 0 and extractor.scoring_encoder(packaged()).name == packaged().encoder
    # with the other model's vectors the same classifier picks other items: the check above can fail
    wrong = HeuristicFacetExtractor(other)
    wrong._scorer_encoder, wrong._classifier = other, packaged()
    assert wrong.extract(frame) != plain


def test_self_training_keeps_only_the_first_fits_confident_labels() -> None:
    """experiments/train_facet_classifier.py --self-train: p >= T is a positive, p <= 1 - T a
    negative, the sentences in between are left out."""
    from experiments.train_facet_classifier import pseudo_labels

    labels, kept = pseudo_labels(np.array([0.95, 0.8, 0.5, 0.2, 0.05]), 0.8)
    assert kept.tolist() == [True, True, False, True, True]
    assert labels[kept].tolist() == [1.0, 1.0, 0.0, 0.0]
