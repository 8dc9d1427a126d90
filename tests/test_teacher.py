from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graft.teacher import GraphTeacher, TeacherConfig


def graph(n: int, edges: dict[tuple[int, int], float]) -> sp.csr_matrix:
    rows, cols = zip(*edges) if edges else ((), ())
    return sp.csr_matrix((list(edges.values()), (rows, cols)), shape=(n, n), dtype=np.float32)


def test_two_hop_walk_scores_and_provenance() -> None:
    # method: 0 -> 1 (0.8), 0 -> 2 (0.4), 1 -> 3 (0.5), 2 -> 3 (0.5), 2 -> 4 (1.0)
    method = graph(5, {(0, 1): 0.8, (0, 2): 0.4, (1, 3): 0.5, (2, 3): 0.5, (2, 4): 1.0})
    empty = graph(5, {})
    t = GraphTeacher({"method": method, "problem": empty}, TeacherConfig(two_hop_weight=0.5, symmetric=False))
    lst = t.facet_list("method", method[0], exclude={0})
    by = {c.node: c for c in lst}
    total = 0.8 + 0.4
    assert by[1].score == pytest.approx(0.8) and by[1].hops == 1 and by[1].weight == pytest.approx(0.8)
    assert by[2].score == pytest.approx(0.4)
    assert by[3].score == pytest.approx(0.5 * (0.8 * 0.5 + 0.4 * 0.5) / total)
    assert by[3].hops == 2 and by[3].via == 1  # 0.8*0.5 beats 0.4*0.5
    assert by[4].via == 2 and by[4].weight == pytest.approx(0.4)
    assert [c.node for c in lst] == [1, 2, 3, 4]  # 3: 0.25, 4: 0.5 * 0.4 / 1.2
    assert t.facet_list("problem", empty[0], exclude={0}) == []


def test_symmetric_walk_reaches_citing_side_and_rrf_attributes_facets() -> None:
    method = graph(4, {(1, 0): 0.9})  # only an in-edge to 0
    problem = graph(4, {(0, 2): 0.7, (0, 1): 0.3})
    t = GraphTeacher({"method": method, "problem": problem}, TeacherConfig())
    fused, per_facet = t.retrieve(t.node_rows(0), exclude={0}, k=10)
    nodes = [n for n, _, _ in fused]
    assert 0 not in nodes
    terms = {n: f for n, _, f in fused}
    assert set(terms[1]) == {"method", "problem"}  # surfaced by both facets
    assert terms[1]["method"] == pytest.approx(1 / 61) and terms[1]["problem"] == pytest.approx(1 / 62)
    assert set(terms[2]) == {"problem"}
    assert nodes[0] == 1
    asym = GraphTeacher({"method": method, "problem": problem}, TeacherConfig(symmetric=False))
    fused2, _ = asym.retrieve(asym.node_rows(0), exclude={0})
    assert {n: set(f) for n, _, f in fused2}[1] == {"problem"}


def test_citation_channel_joins_the_fusion_with_its_own_evidence() -> None:
    """W > 0: papers linked to the first R results of the facet fusion form a fifth run of weight W;
    they credit no facet for it, and the facet terms stay as they were."""
    method = graph(6, {(0, 1): 0.9, (0, 2): 0.5})
    problem = graph(6, {(0, 1): 0.4})
    links = graph(6, {(1, 4): 1.0, (4, 1): 1.0, (2, 4): 1.0, (4, 2): 1.0, (1, 0): 1.0, (0, 1): 1.0})
    graphs = {"method": method, "problem": problem}
    plain = GraphTeacher(graphs, TeacherConfig())
    channel = GraphTeacher(graphs, TeacherConfig(citation_weight=2.0, citation_first=2), links)
    before, _ = plain.retrieve(plain.node_rows(0), exclude={0}, k=10)
    fused, per_facet = channel.retrieve(channel.node_rows(0), exclude={0}, k=10)
    assert [n for n, _, _ in before][:2] == [1, 2]
    terms = {n: t for n, _, t in fused}
    # 4 is linked to both first results (share 1, the channel's rank 1); 1's link to 0 is the query's own
    assert terms[4] == {"citation": pytest.approx(2.0 / 61)}
    assert per_facet["citation"][4].linked == (1, 2) and per_facet["citation"][4].weight == pytest.approx(1.0)
    assert 0 not in terms  # the query paper is never returned, by the channel either
    for node, _, t in before:
        assert {f: v for f, v in terms[node].items() if f != "citation"} == pytest.approx(t)
    assert set(per_facet["citation"]) == {4}
    with pytest.raises(ValueError):
        GraphTeacher(graphs, TeacherConfig(citation_weight=1.0))  # no links



def test_equal_scores_fall_by_paper_id_as_in_the_trec_run_and_the_cut_keeps_the_first() -> None:
    """Candidates with equal scores are ordered by paper id when the teacher knows the ids (as
    `Index.teacher` builds it), in a facet's list and in the fusion, so the ranking, its top-k cut
    and its TREC lines agree; by `str(row)`, row 10 would come before row 2."""
    from graft.results import trec_lines

    ids = [f"p{i:02d}" for i in range(12)]
    ids[2], ids[10] = "a-first", "z-last"
    one_each = {"method": graph(12, {(0, 2): 0.5}), "problem": graph(12, {(0, 10): 0.5})}
    t = GraphTeacher(one_each, TeacherConfig(), ids=ids)
    fused, _ = t.retrieve(t.node_rows(0), exclude={0}, k=2)
    assert fused[0][1] == fused[1][1]  # each first in its facet's list
    assert [n for n, _, _ in fused] == [2, 10]
    assert [n for n, _, _ in t.retrieve(t.node_rows(0), exclude={0}, k=1)[0]] == [2]
    lines = trec_lines("p00", [(ids[n], s) for n, s, _ in fused], "teacher")
    assert [line.split()[2] for line in lines] == ["a-first", "z-last"]
    by_row = GraphTeacher(one_each, TeacherConfig())
    assert [n for n, _, _ in by_row.retrieve(by_row.node_rows(0), exclude={0}, k=2)[0]] == [10, 2]

    both = graph(12, {(0, 2): 0.5, (0, 10): 0.5})
    ids[2], ids[10] = "z-last", "a-first"
    assert [c.node for c in GraphTeacher({"method": both}, ids=ids).facet_list("method", both[0], {0})] == [10, 2]
    assert [c.node for c in GraphTeacher({"method": both}).facet_list("method", both[0], {0})] == [2, 10]
    with pytest.raises(ValueError, match="11 paper ids for 12 rows"):
        GraphTeacher({"method": both}, ids=ids[:11])
