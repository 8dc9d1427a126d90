"""ROUGE-L and ROUGE-N against hand-computed values."""

from __future__ import annotations

import pytest

from eval.textmetrics import best_item_rouge_l, joined_rouge_l, lcs_length, rouge_l, rouge_n


def test_lcs_length_hand_computed() -> None:
    assert lcs_length(list("abcd"), list("ace")) == 2  # a, c
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4  # the CLRS example: "bcba"
    assert lcs_length([], list("abc")) == 0
    assert lcs_length(list("abc"), list("abc")) == 3


def test_rouge_l_hand_computed() -> None:
    # LCS "the cat on the mat" = 5 of 6 tokens on both sides: P = R = F = 5/6.
    assert rouge_l("the cat sat on the mat", "the cat lay on the mat") == pytest.approx(5 / 6)
    # LCS "a c" = 2: P = 2/4, R = 2/3, F = 2PR/(P+R) = 4/7.
    assert rouge_l("a b c d", "a c e") == pytest.approx(4 / 7)
    # Case and punctuation are folded by graft.text.tokens; the order of words matters.
    assert rouge_l("The Cat, sat.", "the cat sat") == pytest.approx(1.0)
    assert rouge_l("sat cat the", "the cat sat") == pytest.approx(1 / 3)


def test_rouge_l_empty_and_disjoint() -> None:
    assert rouge_l("", "the cat") == 0.0
    assert rouge_l("the cat", "") == 0.0
    assert rouge_l("dog", "the cat") == 0.0


def test_item_level_scores() -> None:
    items = ["a dog barked", "the cat sat"]
    assert best_item_rouge_l(items, "the cat sat") == pytest.approx(1.0)
    assert best_item_rouge_l([], "the cat sat") == 0.0
    # Joined: 6 candidate tokens, LCS 3 of 3 reference tokens: P = 1/2, R = 1, F = 2/3.
    assert joined_rouge_l(items, "the cat sat") == pytest.approx(2 / 3)


def test_rouge_n_hand_computed() -> None:
    # Unigrams: "the" twice in both, cat/mat/on shared: 5 of 6 on both sides.
    assert rouge_n("the cat sat on the mat", "the cat lay on the mat", 1) == pytest.approx(5 / 6)
    # Bigrams: the-cat, on-the, the-mat shared of 5 each: F = 3/5.
    assert rouge_n("the cat sat on the mat", "the cat lay on the mat", 2) == pytest.approx(3 / 5)
    # Clipped counts: "the the the" has one "the" in the reference: P = 1/3, R = 1/2, F = 2/5.
    assert rouge_n("the the the", "the cat", 1) == pytest.approx(2 / 5)
    assert rouge_n("cat", "the cat", 2) == 0.0  # no bigram in the candidate
    assert rouge_n("", "the cat", 1) == 0.0
