"""The heuristic facet extractor on real ACLSum papers and on hand-written abstracts."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pytest

from eval.textmetrics import joined_rouge_l
from experiments.facet_extraction import GOLD_ASPECT, load_gold
from graft.encoder import Encoder
from graft.extract import (
    HeuristicConfig,
    HeuristicFacetExtractor,
    clean_sentence,
    strip_citations,
)
from graft.facets import FACETS
from graft.text import normalize_text, split_sentences
from graphbuild.corpus import load_aclsum

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("aclsum", reason="ACLSum papers come from the `aclsum` package")

N_PAPERS = 20


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    return Encoder()


@pytest.fixture(scope="session")
def gold() -> dict[str, dict[str, str]]:
    # The test split: the extractor's weights were tuned on train only.
    return load_gold("test")


@pytest.fixture(scope="session")
def papers(gold: dict[str, dict[str, str]]) -> pl.DataFrame:
    corpus = load_aclsum().papers
    return corpus.filter(pl.col("paper_id").is_in(list(gold))).sort("paper_id").head(N_PAPERS)


@pytest.fixture(scope="session")
def extracted(encoder: Encoder, papers: pl.DataFrame) -> list[dict[str, list[str]]]:
    return HeuristicFacetExtractor(encoder).extract(papers)


def _frame(rows: list[dict[str, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"paper_id": pl.Utf8, "title": pl.Utf8, "abstract": pl.Utf8})


def test_every_facet_has_items(extracted: list[dict[str, list[str]]], papers: pl.DataFrame) -> None:
    cfg = HeuristicConfig()
    assert len(extracted) == papers.height == N_PAPERS
    assert papers["full_text"].null_count() == 0  # the full-text path is exercised
    for items in extracted:
        assert list(items) == list(FACETS)
        for facet in FACETS:
            assert 1 <= len(items[facet]) <= cfg.max_items
            assert len(set(items[facet])) == len(items[facet])
            for item in items[facet]:
                assert item.strip() and len(item.split()) <= cfg.max_item_words


def test_items_come_from_the_paper(extracted: list[dict[str, list[str]]], papers: pl.DataFrame) -> None:
    for row, items in zip(papers.iter_rows(named=True), extracted):
        source = normalize_text(strip_citations(" ".join([row["title"], row["abstract"], row["full_text"]])))
        for facet in FACETS:
            for item in items[facet]:
                assert normalize_text(item) in source, (row["paper_id"], facet, item)


def test_deterministic(encoder: Encoder, papers: pl.DataFrame, extracted: list[dict[str, list[str]]]) -> None:
    seen: list[int] = []
    again = HeuristicFacetExtractor(encoder, HeuristicConfig(chunk_papers=7)).extract(
        papers, progress=seen.append
    )
    assert again == extracted  # chunking changes nothing either
    assert seen == [7, 7, 6]


def test_embedding_full_text_too(encoder: Encoder, papers: pl.DataFrame) -> None:
    extractor = HeuristicFacetExtractor(encoder, HeuristicConfig(embed_full_text=True))
    out = extractor.extract(papers.head(2))
    assert all(items[f] for items in out for f in FACETS)
    assert extractor.stats()["sentences"] > 20  # introduction and conclusion sentences were read


def test_cue_phrases_pick_the_facet(encoder: Encoder) -> None:
    abstracts = [
        "However, existing parsers suffer from a lack of annotated data for low-resource languages. "
        "We propose a cross-lingual transfer method based on multilingual embeddings. "
        "Experiments show that our approach outperforms strong baselines by 4.2% F1. "
        "We release our code and a new treebank to the community.",
        "Summarization models remain difficult to evaluate because reference summaries are scarce. "
        "In this paper, we present a framework that scores summaries by question answering. "
        "Results show that the metric correlates better with human judgments than ROUGE. "
        "To our knowledge, this is the first reference-free metric for dialogue summaries.",
    ]
    expected = [
        {"problem": "existing parsers", "method": "cross-lingual transfer", "result": "outperforms",
         "contribution": "release our code"},
        {"problem": "difficult to evaluate", "method": "We present a framework", "result": "correlates",
         "contribution": "first reference-free"},
    ]
    rows = [{"paper_id": str(i), "title": f"Paper {i}", "abstract": a} for i, a in enumerate(abstracts)]
    out = HeuristicFacetExtractor(encoder).extract(_frame(rows))  # no full_text column at all
    for items, want in zip(out, expected):
        for facet, phrase in want.items():
            assert phrase.lower() in items[facet][0].lower(), (facet, items)


def test_title_only_papers_get_every_facet(encoder: Encoder) -> None:
    rows = [
        {"paper_id": "a", "title": "Neural Parsing of Tweets", "abstract": None},
        {"paper_id": "b", "title": "Graph Kernels Revisited", "abstract": "Too short."},
        {"paper_id": "c", "title": None, "abstract": ""},
    ]
    extractor = HeuristicFacetExtractor(encoder)
    out = extractor.extract(_frame(rows))
    assert out[0] == dict.fromkeys(FACETS, ["Neural Parsing of Tweets"])
    assert out[1] == dict.fromkeys(FACETS, ["Graph Kernels Revisited"])
    assert all(items == ["(untitled)"] for items in out[2].values())
    assert extractor.stats()["title_only_papers"] == 3
    assert extractor.stats()["fallback_items"] == 12


def test_beats_lead_baseline_on_gold(
    extracted: list[dict[str, list[str]]], papers: pl.DataFrame, gold: dict[str, dict[str, str]]
) -> None:
    ids = papers["paper_id"].to_list()
    leads = [split_sentences(a)[0] for a in papers["abstract"]]
    ours = {f: np.mean([joined_rouge_l(it[f], gold[i][a]) for it, i in zip(extracted, ids)])
            for f, a in GOLD_ASPECT.items()}
    lead = {f: np.mean([joined_rouge_l([s], gold[i][a]) for s, i in zip(leads, ids)])
            for f, a in GOLD_ASPECT.items()}
    # Measured on these 20 papers: method 0.31 vs 0.11, result 0.30 vs 0.08; problem is a tie
    # (0.22 vs 0.21: the first abstract sentence usually states the problem), so it is not asserted.
    assert ours["method"] > lead["method"] + 0.1
    assert ours["result"] > lead["result"] + 0.1


def test_clean_sentence() -> None:
    assert clean_sentence("In this paper, we parse tweets (Smith et al., 2019; Lee, 2020) well [3, 4].") == (
        "We parse tweets well."
    )
    assert clean_sentence("However, parsers fail [12].") == "Parsers fail."
    long = "We " + " ".join(f"w{i}" for i in range(30)) + ", and " + " ".join(f"v{i}" for i in range(30))
    cut = clean_sentence(long, max_words=40)
    assert cut == "We " + " ".join(f"w{i}" for i in range(30))  # cut at the clause boundary
    assert len(clean_sentence("a " * 100, max_words=40).split()) == 40


def test_config_rejects_unknown_keys() -> None:
    assert HeuristicConfig.from_dict({"max_items": 2}).max_items == 2
    with pytest.raises(ValueError, match="unknown key"):
        HeuristicConfig.from_dict({"max_itemz": 2})
    with pytest.raises(ValueError, match="max_items"):
        HeuristicConfig(max_items=0)


def test_split_sentences_keeps_abbreviations_and_decimals_inside_sentences() -> None:
    """A full stop after an abbreviation, also inside brackets or quotes ("(e.g. BERT"), does not end
    a sentence; one before a capital or a digit otherwise does."""
    text = ("We use models (e.g. BERT and GPT) as in prior work [cf. Smith et al. 2020]. "
            "The \"i.e. X\" case holds, see Fig. 3 and Eq. 2. Accuracy rises by 2.5 points. 4 tasks remain.")
    assert split_sentences(text) == [
        "We use models (e.g. BERT and GPT) as in prior work [cf. Smith et al. 2020].",
        "The \"i.e. X\" case holds, see Fig. 3 and Eq. 2.",
        "Accuracy rises by 2.5 points.",
        "4 tasks remain.",
    ]


def test_facet_spans_cut_a_sentence_where_a_second_facet_starts() -> None:
    """"We propose X, which outperforms Y" is a method span and a result span; a means ("by
    introducing") starts a span; a part too short to be an item stays with the one before; a
    sentence without such a break is one span."""
    from graft.extract import facet_spans

    assert facet_spans("We propose a hierarchical meta-learning algorithm, which outperforms the state of the art "
                       "on four benchmarks.") == ["We propose a hierarchical meta-learning algorithm",
                                                  "which outperforms the state of the art on four benchmarks."]
    assert facet_spans("We address the few-shot problem by introducing a metric space that adapts to each task.") \
        == ["We address the few-shot problem", "by introducing a metric space that adapts to each task."]
    assert facet_spans("We propose a new method, achieving gains.") == ["We propose a new method achieving gains."]
    assert facet_spans("We study the problem of learning with few examples.") == \
        ["We study the problem of learning with few examples."]
