from __future__ import annotations

import pytest

from graft.fusion import rrf


def test_rrf_hand_computed() -> None:
    runs = {"a": ["x", "y", "z"], "b": ["y", "w"]}
    fused = rrf(runs, k=60)
    scores = {f.doc: f.score for f in fused}
    assert scores["y"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["x"] == pytest.approx(1 / 61)
    assert scores["w"] == pytest.approx(1 / 62)
    assert scores["z"] == pytest.approx(1 / 63)
    assert [f.doc for f in fused] == ["y", "x", "w", "z"]
    assert fused[0].terms == pytest.approx({"a": 1 / 62, "b": 1 / 61})
    assert set(fused[1].terms) == {"a"}


def test_rrf_k_is_not_a_cutoff_and_ties_are_deterministic() -> None:
    fused = rrf({"a": ["q", "p"], "b": ["p", "q"]}, k=0)
    assert len(fused) == 2
    assert [f.doc for f in fused] == ["p", "q"]  # equal scores: broken by doc id
    with pytest.raises(ValueError):
        rrf({"a": ["x"]}, k=-1)
