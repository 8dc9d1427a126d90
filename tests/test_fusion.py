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


def test_graph_rrf_hand_computed_with_attribution_and_drops() -> None:
    from graft.fusion import graph_rrf

    runs = {"method": ["a", "b", "c"], "problem": ["b", "d", "a"]}
    support = {"method": {"a": 0.5, "c": 0.9}, "problem": {"b": 0.8, "a": 0.2}}
    out = graph_rrf(runs, support, k=60)
    scores = {f.doc: f.score for f in out.fused}
    assert scores == pytest.approx({"a": 0.5 / 61 + 0.2 / 63, "b": 0.8 / 61, "c": 0.9 / 63})
    assert [f.doc for f in out.fused] == ["c", "b", "a"]  # 0.9/63 > 0.8/61 > 0.5/61 + 0.2/63
    assert out.dropped == ["d"]  # in a list, but no supporting edge in any facet
    a = next(f for f in out.fused if f.doc == "a")
    assert a.terms == pytest.approx({"method": 0.5 / 61, "problem": 0.2 / 63})
    b = next(f for f in out.fused if f.doc == "b")
    assert set(b.terms) == {"problem"}  # b's method term has w = 0: not credited


def test_graph_rrf_k_is_not_a_cutoff_and_validates() -> None:
    from graft.fusion import graph_rrf

    out = graph_rrf({"f": ["x", "y"]}, {"f": {"x": 1.0, "y": 1.0}}, k=0)
    assert [f.doc for f in out.fused] == ["x", "y"] and out.fused[1].score == pytest.approx(0.5)
    with pytest.raises(ValueError):
        graph_rrf({"f": ["x"]}, {"f": {"x": 1.0}}, k=-1)
    with pytest.raises(ValueError):
        graph_rrf({"f": ["x"]}, {"f": {"x": -0.1}})
    # with all weights 1, graph-RRF is plain RRF
    runs = {"a": ["x", "y", "z"], "b": ["y", "w"]}
    ones = {r: dict.fromkeys(d, 1.0) for r, d in runs.items()}
    assert [(f.doc, round(f.score, 12)) for f in graph_rrf(runs, ones).fused] == \
        [(f.doc, round(f.score, 12)) for f in rrf(runs)]


def test_weighted_rrf_hand_computed() -> None:
    out = rrf({"a": ["x", "y"], "citation": ["y", "z"]}, k=60, weights={"citation": 3.0})
    score = {f.doc: f.score for f in out}
    assert score["x"] == pytest.approx(1 / 61)
    assert score["y"] == pytest.approx(1 / 62 + 3 / 61)
    assert score["z"] == pytest.approx(3 / 62)
    assert [f.doc for f in out] == ["y", "z", "x"]
    assert [f.doc for f in rrf({"a": ["x"], "b": ["y"]}, weights={"b": 0.0})] == ["x"]  # weight 0: the run is off
    with pytest.raises(ValueError):
        rrf({"a": ["x"]}, weights={"a": -1.0})


def test_cited_with_ranks_by_share_then_fusion_order() -> None:
    import numpy as np
    import scipy.sparse as sp

    from graft.fusion import CITATION, add_citation_run, cited_with

    # links (symmetric): 0-3, 0-4, 1-4, 2-5, 1-6, 2-6, 0-7 ; first results 0, 1, 2 ; query 9
    pairs = [(0, 3), (0, 4), (1, 4), (2, 5), (1, 6), (2, 6), (0, 7), (9, 4)]
    rows = [a for a, b in pairs] + [b for a, b in pairs]
    cols = [b for a, b in pairs] + [a for a, b in pairs]
    links = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(10, 10))
    order = [0, 1, 2, 7, 5]
    run = cited_with(links, [0, 1, 2], order, exclude={9})
    # 4 and 6 are linked to 2 of the 3 (neither in the order: by row); 7, 5 and 3 to 1 (by order, 3 absent from it)
    assert run == [(4, pytest.approx(2 / 3)), (6, pytest.approx(2 / 3)), (7, pytest.approx(1 / 3)),
                   (5, pytest.approx(1 / 3)), (3, pytest.approx(1 / 3))]
    assert cited_with(links, [0, 1, 2], order, exclude={4}, depth=2) == [(6, pytest.approx(2 / 3)),
                                                                         (7, pytest.approx(1 / 3))]
    assert cited_with(links, [], order) == [] and cited_with(links, [8], order) == []

    runs = {"method": [0, 1, 2, 7, 5]}
    support = {"method": {0: 0.5, 1: 0.4, 2: 0.3, 7: 0.2, 5: 0.1}}
    fused = rrf(runs)
    before = (repr(runs), repr(support), repr(fused))
    new_runs, new_support, first = add_citation_run(runs, fused, links, 3.0, support=support, exclude={9})
    assert before == (repr(runs), repr(support), repr(fused))  # its inputs are left as they were
    assert first == [0, 1, 2] and new_runs[CITATION] == [4, 6, 7, 5, 3] and new_runs["method"] == runs["method"]
    assert new_support[CITATION][4] == pytest.approx(2.0) and new_support[CITATION][3] == pytest.approx(1.0)
    assert add_citation_run(runs, fused, links, 3.0, exclude={9}, depth=2)[0][CITATION] == [4, 6]
    assert add_citation_run(runs, fused, links, 3.0)[1] is None


def test_keep_first_keeps_the_facet_fusion_s_first_results_first() -> None:
    """The citation channel may reorder the rest, never push the facet fusion's first `keep` down:
    they come back first, in their order, with scores raised just above the next result's."""
    from graft.fusion import Fused, keep_first

    facet = [Fused("a", 0.05, {"method": 0.05}), Fused("b", 0.04, {"method": 0.04}), Fused("c", 0.03, {"method": 0.03})]
    cited = [Fused("x", 0.09, {"citation": 0.09}), Fused("b", 0.07, {"method": 0.04, "citation": 0.03}),
             Fused("a", 0.05, {"method": 0.05}), Fused("y", 0.045, {"citation": 0.045}),
             Fused("c", 0.03, {"method": 0.03})]
    kept = keep_first(facet, cited, 2)
    assert [x.doc for x in kept] == ["a", "b", "x", "y", "c"]
    assert [x.score for x in kept] == sorted((x.score for x in kept), reverse=True)  # ranks and scores agree
    assert kept[1].score == pytest.approx(0.09 + 1e-6) and kept[0].score == pytest.approx(0.09 + 2e-6)
    assert kept[1].terms == {"method": 0.04, "citation": 0.03} and cited[1].score == 0.07  # copies
    assert [x.doc for x in keep_first(facet, cited, 0)] == [x.doc for x in cited]
    assert [x.doc for x in keep_first(facet, cited, 5)] == ["a", "b", "c", "x", "y"]


def test_a_hit_s_label_names_the_facets_that_stand_out_and_json_shows_the_same_number() -> None:
    """Facets within STANDOUT_MARGIN of the hit's strongest edge weight are named (direct edges
    before two-hop paths), the others counted; the table's number and --json's `facets` are both the edge weight, the RRF terms are
    `contributions`."""
    from graft.results import STANDOUT_MARGIN, Evidence, Hit

    weights = {"problem": 0.47, "method": 0.70, "result": 0.68, "contribution": 0.52}
    terms = {f: w / (60 + 1) for f, w in weights.items()}
    hit = Hit("p1", "A paper", 1, sum(terms.values()), terms,
              {f: Evidence(weight=w, hops=1, rank=1) for f, w in weights.items()})
    assert STANDOUT_MARGIN == 0.05 and hit.stands_out() == ["method", "result"]
    assert hit.facet_label() == "method 0.70 · result 0.68 (+2 facets)"
    js = hit.to_json()
    assert js["facets"] == weights and js["stands_out"] == ["method", "result"] and js["contributions"] == terms
    even = Hit("p2", "B", 2, 0.1, {"method": 0.01, "problem": 0.01},
               {"method": Evidence(0.5, 1), "problem": Evidence(0.5, 1)})
    assert even.facet_label() == "method 0.50 · problem 0.50"  # equally strong: both named
    # a direct edge outranks a two-hop path, even a heavier one: the path relates a neighbour
    mixed = Hit("p4", "D", 4, 0.1, {"method": 0.01, "problem": 0.01, "result": 0.01},
                {"method": Evidence(0.40, 1), "problem": Evidence(0.55, 2, via="p9"),
                 "result": Evidence(0.38, 1)})
    assert mixed.stands_out() == ["method", "result"] and mixed.facet_label() == "method 0.40 · result 0.38 (+1 facet)"
    # reached only through neighbours: the strongest path is named, marked as such
    walked = Hit("p5", "E", 5, 0.1, {"method": 0.01, "problem": 0.01},
                 {"method": Evidence(0.30, 2, via="p8"), "problem": Evidence(0.33, 2, via="p9")})
    assert walked.facet_label() == "problem 0.33 (2-hop) (+1 facet)"  # one path explains it
    none = Hit("p3", "C", 3, 0.1, {"method": 0.01}, {"method": Evidence(0.0, 1)})
    assert none.facet_label() == "method (no edge)"
