"""The lexical half of facet and text similarity (`graft.lexical`): a corpus's TF-IDF lexicon, its
rows, and how a build and an index keep them."""

from __future__ import annotations

import gzip
import json
import math
import re

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from graft.facets import FACETS
from graft.lexical import Lexicon, blend, facet_rows_of, facet_texts, pair_cosines
from graft.text import paper_text
from tests.conftest import cs768_path


@pytest.fixture(scope="module")
def abstracts() -> list[str]:
    """Title + abstract of the first 300 cs768 papers."""
    texts = []
    with gzip.open(cs768_path(), "rt") as fh:
        for line in fh:
            rec = json.loads(line)
            texts.append(paper_text(rec.get("title"), rec.get("abstract")))
            if len(texts) == 300:
                break
    return texts


def test_a_lexicon_holds_the_corpus_terms_with_their_idf(abstracts) -> None:
    lex = Lexicon.fit(abstracts)
    assert lex.size > 1000 and list(lex.terms) == sorted(set(lex.terms))
    assert "the" not in lex.terms and "we" not in lex.terms  # English stop words
    assert "learning" in lex.terms and "adversarial" in lex.terms
    words = [set(re.findall(r"\b\w\w+\b", t.lower())) for t in abstracts]  # words of two letters or more
    # by hand: ln((1 + N) / (1 + df)) + 1, with df the papers holding the word
    for term in ("learning", "adversarial", "graph"):
        df = sum(term in ws for ws in words)
        assert 2 <= df < 300
        assert lex.idf[lex.terms.index(term)] == pytest.approx(math.log(301 / (1 + df)) + 1, rel=1e-5)
    # a word one paper alone uses is no term (MIN_DF = 2)
    once = Lexicon.fit(["zyxwvut appears once", "appears twice", "appears thrice"])
    assert once.terms == ("appears",)
    # no term at all: an empty lexicon, whose rows are empty
    empty = Lexicon.fit(["the of and", ""])
    assert empty.size == 0 and empty.vectors(["anything"]).shape == (1, 0)


def test_rows_are_unit_tfidf_and_rare_shared_words_count_most(abstracts) -> None:
    lex = Lexicon.fit(abstracts)
    rows = lex.vectors(abstracts[:50] + ["", "qqqq zzzz"])
    norms = np.sqrt(np.asarray(rows.multiply(rows).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms[:50], 1.0, rtol=1e-5)
    assert norms[50] == 0 and norms[51] == 0  # no known term: an empty row
    # sub-linear tf x idf, by hand for one text
    text = "adversarial adversarial examples"
    row = lex.vectors([text]).toarray().ravel()
    a, e = lex.terms.index("adversarial"), lex.terms.index("examples")
    want_a, want_e = (1 + math.log(2)) * lex.idf[a], lex.idf[e]
    assert row[a] / row[e] == pytest.approx(want_a / want_e, rel=1e-5)
    # a shared rare word ("adversarial") weighs more than a shared common one ("learning")
    rare = lex.vectors(["adversarial training", "adversarial networks", "learning training", "learning networks"])
    common = rare[2:]
    assert (rare[0] @ rare[1].T).toarray()[0, 0] > (common[0] @ common[1].T).toarray()[0, 0]
    # rows of the same text are the same, one at a time or many at once
    assert abs(lex.vectors([abstracts[7]]) - rows[7]).max() < 1e-7


def test_pair_cosines_and_blend(abstracts) -> None:
    lex = Lexicon.fit(abstracts)
    left = lex.vectors(abstracts[:40])
    right = lex.vectors(abstracts[40:100])
    rows, cols = np.array([0, 0, 5, 39, 12]), np.array([3, 59, 5, 0, 12])
    dense = (left @ right.T).toarray()
    np.testing.assert_allclose(pair_cosines(left, rows, right, cols, chunk=2), dense[rows, cols], atol=1e-6)
    assert pair_cosines(left, np.zeros(0, np.int64), right, np.zeros(0, np.int64)).shape == (0,)
    np.testing.assert_allclose(blend(np.array([0.5, 1.0]), np.array([0.0, 0.2]), 0.35), [0.325, 0.72], atol=1e-6)
    np.testing.assert_array_equal(blend(np.array([0.5]), np.array([9.0]), 0.0), [0.5])


def test_facet_texts_and_rows_of_new_papers_match(abstracts) -> None:
    lex = Lexicon.fit(abstracts)
    titles = ["Meta learning", "Robust training"]
    owner = np.array([0, 0, 1, 0])
    facet_col = np.array(["problem", "method", "method", "method"])
    texts = ["Fast adaptation to new tasks.", "A gradient step.", "Adversarial training.", "Second order terms."]
    joined = facet_texts(titles, owner, facet_col, texts, 2)
    assert joined["method"] == ["Meta learning. A gradient step. Second order terms.",
                                "Robust training. Adversarial training."]
    assert joined["problem"] == ["Meta learning. Fast adaptation to new tasks.", "Robust training."]
    new = facet_rows_of(lex, titles, [{"problem": [texts[0]], "method": [texts[1], texts[3]]},
                                      {"method": [texts[2]]}])
    for f in FACETS:
        stored = lex.vectors(joined[f])
        for p in (0, 1):
            assert abs(new[p][f] - stored[p]).max() < 1e-7


def test_a_lexicon_is_written_and_read_back(abstracts, tmp_path) -> None:
    lex = Lexicon.fit(abstracts[:80])
    lex.write(tmp_path / "lexicon.parquet")
    back = Lexicon.read(tmp_path / "lexicon.parquet")
    assert back.terms == lex.terms and np.array_equal(back.idf, lex.idf)
    assert abs(back.vectors(abstracts[:5]) - lex.vectors(abstracts[:5])).max() == 0
    pl.DataFrame({"term": ["b", "a"], "idf": [1.0, 1.0]}).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="not sorted"):
        Lexicon.read(tmp_path / "bad.parquet")
    pl.DataFrame({"term": ["a"], "idf": [float("nan")]}).write_parquet(tmp_path / "nan.parquet")
    with pytest.raises(ValueError, match="IDF"):
        Lexicon.read(tmp_path / "nan.parquet")
    assert sp.issparse(lex.vectors(["x"]))


def test_lexicon_scale_benchmark_smoke(tmp_path, capsys) -> None:
    """experiments/lexicon_scale.py on a small index: every step timed, the two ways agree."""
    from experiments.lexicon_scale import main
    from graphbuild.build import BuildConfig, build_index
    from tests.test_build import write_slice

    corpus = write_slice(cs768_path(), 30, tmp_path)
    build_index(corpus, tmp_path / "idx", BuildConfig(item_context="title"))
    assert main([str(tmp_path / "idx")]) == 0
    out = capsys.readouterr().out
    assert "fit the lexicon" in out and "through the postings (median of 5)" in out and "30 papers" in out
