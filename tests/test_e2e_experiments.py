"""The end-to-end training experiment's pieces: the sub-corpus rule (k-core of the citation graph)
and the read-only index view the memorisation curve decodes from."""

from __future__ import annotations

import json

import pytest
from conftest import cs768_path

from experiments.subcorpus import citation_graph, densest_core, main, read_records, sub_corpus


def _ring_with_clique() -> list[dict]:
    """A 5-clique (core number 4) hanging off a 6-ring (core number 2) plus one isolated paper; one
    reference points outside the corpus."""
    clique = [f"c{i}" for i in range(5)]
    ring = [f"r{i}" for i in range(6)]
    records = [{"id": p, "title": p, "abstract": p, "references": [q for q in clique if q > p]} for p in clique]
    records += [{"id": p, "title": p, "abstract": p, "references": [ring[(i + 1) % 6]]} for i, p in enumerate(ring)]
    records[0]["references"].append("r0")  # the clique touches the ring
    records[5]["references"].append("elsewhere")
    return records + [{"id": "lone", "title": "lone", "abstract": "lone", "references": []}]


def test_the_densest_core_with_enough_papers_is_kept_and_references_stay_inside() -> None:
    records = _ring_with_clique()
    graph = citation_graph(records)
    assert graph.number_of_nodes() == 12 and not graph.has_node("elsewhere")
    assert densest_core(graph, 5) == (4, {f"c{i}" for i in range(5)})
    k, kept = densest_core(graph, 6)  # the clique alone is too small: the 2-core (clique + ring)
    assert k == 2 and kept == {f"c{i}" for i in range(5)} | {f"r{i}" for i in range(6)}
    out = sub_corpus(records, kept)
    assert [r["id"] for r in out] == [r["id"] for r in records if r["id"] in kept]  # source order
    assert all(ref in kept for r in out for ref in r["references"])
    assert "r0" in out[0]["references"] and "elsewhere" not in out[5]["references"]
    with pytest.raises(SystemExit, match="only 12 papers"):
        densest_core(graph, 13)


def test_the_cs768_sub_corpus_is_its_10_core(tmp_path, capsys) -> None:
    """The rule on the real corpus: the largest k whose core holds >= 500 papers (documented in
    docs/training.md: the 10-core, 586 papers)."""
    out = tmp_path / "corpus.jsonl"
    assert main([str(cs768_path()), "--min-papers", "500", "--out", str(out)]) == 0
    assert "10-core" in capsys.readouterr().out
    papers = [json.loads(x) for x in out.read_text().splitlines()]
    ids = {p["id"] for p in papers}
    assert len(papers) == 586
    degree = {p: 0 for p in ids}
    for p in papers:
        for ref in p["references"]:
            assert ref in ids
            degree[p["id"]] += 1
            degree[ref] += 1
    assert min(degree.values()) >= 10  # every paper keeps >= 10 links inside (duplicates aside)
    assert len(read_records(out)) == 586


def test_curve_points_fall_every_so_many_epochs_and_at_the_end() -> None:
    from experiments.graft_e2e import curve_points, whole

    assert curve_points(4, 1) == [1, 2, 3, 4] and all(isinstance(p, int) for p in curve_points(4, 1))
    assert curve_points(0.5, 0.25) == [0.25, 0.5]
    assert curve_points(2.5, 1) == [1, 2, 2.5]
    assert curve_points(0.3, 1) == [0.3]
    assert whole(4.0) == 4 and isinstance(whole(4.0), int) and whole(0.5) == 0.5
    with pytest.raises(SystemExit, match="measure-every"):
        curve_points(1, 0)
