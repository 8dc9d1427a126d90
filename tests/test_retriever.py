"""The generative retriever end to end: a tiny model trained in the test on a cs768 slice, queried
through the library and `graft query` (graph-RRF attribution, drops, --json and TREC output)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import cs768_path
from test_build import write_slice
from typer.testing import CliRunner

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, encoder):
    """A 60-paper cs768 slice with a tiny DocID model trained for a few steps."""
    from graphbuild.build import BuildConfig, build_index
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    tmp = tmp_path_factory.mktemp("retriever")
    out = tmp / "index"
    # without text coupling: most papers of a 60-paper slice are link-less, and their text
    # neighbours would fill the rows the graph-walk and channel tests walk
    # items with their title at w = 0.7 and facet similarity from the embeddings alone, the graph these
    # tests' decoded DocIDs were checked on
    build_index(write_slice(cs768_path(), 60, tmp), out,
                BuildConfig(text_coupling=0, item_context="title", title_weight=0.7, lexical_weight=0.0),
                encoder=encoder)
    train_index(out, TrainConfig(max_steps=20, lr=2e-3, save_every_steps=0, logging_steps=5), base_model="tiny")
    return out


@pytest.fixture(scope="module")
def retriever(trained):
    from graft.index import Index

    return Index.open(trained).generative()


def _query_paper(retriever) -> str:
    degree = sum(np.asarray((g > 0).sum(axis=1)).ravel() for g in retriever.index.graphs.values())
    return retriever.index.paper_ids[int(np.argmax(degree))]


def _linked_query_paper(retriever, fusion: str) -> str:
    """The paper of most graph edges among those whose first results under `fusion` (the channel's
    first 3, without the channel) have citation links to some other paper: on a 60-paper slice most
    papers are link-less, so which papers come first decides whether the channel has anything to add."""
    from graft.fusion import CITATION_FIRST

    idx = retriever.index
    degree = sum(np.asarray((g > 0).sum(axis=1)).ravel() for g in idx.graphs.values())
    links = idx.citation_links
    for node in np.argsort(-degree, kind="stable")[:20]:
        pid = idx.paper_ids[int(node)]
        hits = retriever.query_paper(pid, k=idx.n, beams=4, fusion=fusion, citation_weight=0).hits
        first = [idx.row(h.paper_id) for h in hits[:CITATION_FIRST]]
        if first and set(links[first].indices.tolist()) - {int(node)}:
            return pid
    raise AssertionError("none of the 20 papers of most graph edges has first results with citation links")


def test_in_corpus_query_returns_supported_corpus_papers(retriever) -> None:
    pid = _query_paper(retriever)
    result = retriever.query_paper(pid, k=10, beams=4, citation_weight=0)
    corpus = set(retriever.index.paper_ids)
    q = retriever.index.row(pid)
    assert result.retriever == "graft" and result.fusion == "graph-rrf"
    assert result.hits, result.info
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    for h in result.hits:
        assert h.paper_id in corpus and h.paper_id != pid
        assert h.facets and all(v > 0 for v in h.facets.values())  # at least one supporting facet
        for f, term in h.facets.items():
            w = retriever.walk[f][q, retriever.index.row(h.paper_id)]
            assert w > 0 and h.evidence[f].weight == pytest.approx(w, abs=1e-6)
            assert term == pytest.approx(w / (60 + h.evidence[f].rank), rel=1e-5)
        assert sum(h.facets.values()) == pytest.approx(h.score)
    assert result.info["dropped"] == len(result.info["dropped_ids"])
    assert not set(result.info["dropped_ids"]) & {h.paper_id for h in result.hits}
    assert h.facet_label()  # 'method 0.71 · problem 0.42'

    plain = retriever.query_paper(pid, k=10, beams=4, fusion="rrf", citation_weight=0)
    assert plain.fusion == "rrf" and "dropped" not in plain.info and plain.hits
    assert all(h.paper_id in corpus and h.paper_id != pid for h in plain.hits)
    # plain RRF keeps decoded papers without an edge to the query: their facets say so, not "0.00"
    for h in plain.hits:
        label = h.facet_label()
        assert "0.00" not in label
        no_edge = [f for f, e in h.evidence.items() if e.weight == 0.0]
        if len(no_edge) == len(h.facets):  # no facet stands out: all named, without an edge
            assert all(f"{f} (no edge)" in label for f in no_edge)
        else:  # the facets with an edge stand out; the others are counted, not named
            assert not any(f in label for f in no_edge) and set(h.stands_out()).isdisjoint(no_edge)
            assert (f"(+{len(h.facets) - len(h.stands_out())} facet" in label) == (len(h.stands_out()) < len(h.facets))
    assert any(e.weight == 0.0 for h in plain.hits for e in h.evidence.values())


@pytest.mark.parametrize("fusion", ["graph-rrf", "rrf"])
def test_citation_channel_adds_the_papers_cited_with_the_first_results(retriever, fusion) -> None:
    """The channel's run: papers linked to the first 3 results of the facet fusion, ranked by the
    share of them they are linked to; weighted W (graph-RRF: support W x share); facet terms unchanged."""
    from graft.fusion import CITATION_FIRST

    pid = _linked_query_paper(retriever, fusion)
    idx, n = retriever.index, retriever.index.n
    q, links, w = idx.row(pid), idx.citation_links, 3.0
    base = retriever.query_paper(pid, k=n, beams=4, fusion=fusion, citation_weight=0)
    first = [h.paper_id for h in base.hits[:CITATION_FIRST]]
    with_channel = retriever.query_paper(pid, k=n, beams=4, fusion=fusion, citation_weight=w)
    assert with_channel.info["citation_weight"] == w
    linked = {}
    for c in range(n):
        shared = [p for p in first if links[c, idx.row(p)] > 0]
        if shared and c != q:
            linked[idx.paper_ids[c]] = shared
    assert linked, "the slice's first results have no citation links"
    got = {h.paper_id: h for h in with_channel.hits}
    assert set(linked) <= set(got) and pid not in got
    base_terms = {h.paper_id: h.facets for h in base.hits}
    for h in with_channel.hits:
        if h.paper_id in linked:
            share = len(linked[h.paper_id]) / len(first)
            assert h.citation is not None and h.citation.papers == linked[h.paper_id]
            assert h.citation.share == pytest.approx(share, abs=1e-6) and h.citation.first == len(first)
            weight = w * share if fusion == "graph-rrf" else w
            assert h.citation.term == pytest.approx(weight / (60 + h.citation.rank), rel=1e-6)
            assert "cited with" in h.facet_label()
        else:
            assert h.citation is None
        assert h.facets == pytest.approx(base_terms.get(h.paper_id, {}))  # facet credits as without the channel
        assert h.score == pytest.approx(sum(h.facets.values()) + (h.citation.term if h.citation else 0.0))
    ranks = sorted((h.citation.rank, -h.citation.share) for h in with_channel.hits if h.citation)
    assert [r for r, _ in ranks] == list(range(1, len(ranks) + 1))
    assert [s for _, s in ranks] == sorted(s for _, s in ranks)  # share descending along the run


def test_attribution_follows_a_hand_made_graph(retriever) -> None:
    """Same decoded candidates, a hand-made support graph: only its edges may attribute facets."""
    import scipy.sparse as sp

    pid = _query_paper(retriever)
    q = retriever.index.row(pid)
    n = retriever.index.n
    plain = retriever.query_paper(pid, k=n, beams=4, fusion="rrf", citation_weight=0)  # every decoded candidate
    candidates = [h.paper_id for h in plain.hits]
    assert len(candidates) >= 3
    # method edges from the query to two candidates (weights 0.9, 0.3); a result edge to the second
    a, b = retriever.index.row(candidates[0]), retriever.index.row(candidates[1])
    hand = {f: sp.csr_matrix((n, n), dtype=np.float32) for f in ("problem", "method", "result", "contribution")}
    hand["method"] = sp.csr_matrix(([0.9, 0.3], ([q, q], [a, b])), shape=(n, n), dtype=np.float32)
    hand["result"] = sp.csr_matrix(([0.5], ([b], [q])), shape=(n, n), dtype=np.float32)  # an in-edge
    retriever.__dict__["walk"] = {f: g.maximum(g.T).tocsr() for f, g in hand.items()}
    try:
        result = retriever.query_paper(pid, k=n, beams=4, citation_weight=0)
    finally:
        del retriever.__dict__["walk"]
    by = {h.paper_id: h for h in result.hits}
    supported = {candidates[0]: {"method": 0.9}, candidates[1]: {"method": 0.3, "result": 0.5}}
    for c, facets in supported.items():
        decoded_in = {f for f, ev in plain.hits[candidates.index(c)].evidence.items()}
        want = {f: w for f, w in facets.items() if f in decoded_in}  # an edge counts where c was decoded
        if not want:
            assert c not in by
            continue
        assert set(by[c].facets) == set(want)
        for f, w in want.items():
            assert by[c].evidence[f].weight == pytest.approx(w)
            assert by[c].facets[f] == pytest.approx(w / (60 + by[c].evidence[f].rank), rel=1e-5)
    assert set(by) <= set(supported)
    assert result.info["dropped"] == len(set(candidates) - set(by)) > 0
    assert set(result.info["dropped_ids"]) == set(candidates) - set(by)


def test_out_of_corpus_support_is_mutual_corroboration(retriever) -> None:
    pid = _query_paper(retriever)
    facets = retriever.index.paper_facets(pid)
    result = retriever.query_items(facets, k=10, beams=4, query_id="new", citation_weight=0)
    assert result.query_id == "new"
    for h in result.hits:
        assert h.paper_id in retriever.index.row_of and h.facets
        for f in h.facets:  # the weight is the strongest edge to another candidate of the list
            assert h.evidence[f].weight > 0


def test_cli_query_graft_json_and_trec(trained, tmp_path) -> None:
    from cli.app import app
    from graft.index import Index

    idx = Index.open(trained)
    ids = idx.paper_ids[:3]
    runner = CliRunner()
    res = runner.invoke(app, ["query", str(trained), "--paper", ids[0], "--beams", "3", "--k", "5", "--json",
                              "--retriever", "graft"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert payload["retriever"] == "graft" and payload["fusion"] == "graph-rrf" and "tiny" in payload["model"]
    hits = payload["hits"]
    assert isinstance(hits, list) and all((h["facets"] or h["citation"]) and h["paper_id"] in idx.row_of
                                          for h in hits)
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--paper", ids[0], "--beams", "3", "--k", "5", "--json",
                              "--citation-weight", "0"])
    assert res.exit_code == 0, res.output
    assert all(h["facets"] and h["citation"] is None for h in json.loads(res.output)["hits"])
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--paper", ids[0], "--citation-weight", "-1"])
    assert res.exit_code == 2 and "citation-weight" in res.output
    # a text with the papers it cites: those are never among the results (graft as the teacher)
    row = idx.papers.row(0, named=True)
    text = f"{row['title']}. {row['abstract']}"
    plain = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--beams", "3", "--k", "8", "--json"])
    assert plain.exit_code == 0, plain.output
    cited = [h["paper_id"] for h in json.loads(plain.stdout)["hits"]][:2]
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--references", ",".join(cited), "--beams", "3",
                              "--k", "8", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["hits"] and not set(cited) & {h["paper_id"] for h in json.loads(res.stdout)["hits"]}

    qfile = tmp_path / "queries.txt"
    qfile.write_text("\n".join([ids[0], json.dumps({"id": ids[1]}), ids[2]]) + "\n")
    run = tmp_path / "run.txt"
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--queries", str(qfile), "--beams", "3", "--k", "5",
                              "--trec-out", str(run)])
    assert res.exit_code == 0, res.output
    lines = [line.split() for line in run.read_text().splitlines()]
    assert lines and all(len(x) == 6 and x[1] == "Q0" and x[5] == "graft" for x in lines)
    for qid in {x[0] for x in lines}:
        ranks = [int(x[3]) for x in lines if x[0] == qid]
        scores = [float(x[4]) for x in lines if x[0] == qid]
        assert ranks == list(range(1, len(ranks) + 1)) and scores == sorted(scores, reverse=True)
    assert {x[0] for x in lines} <= set(ids)

    # papers outside the corpus in the batch: facets taken apart together, each answered as alone
    records = [{"id": f"new-{i}", "title": idx.papers["title"][i], "abstract": idx.papers["abstract"][i]}
               for i in (3, 4)]
    qfile.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--queries", str(qfile), "--beams", "3", "--k", "5",
                              "--trec-out", str(run)])
    assert res.exit_code == 0, res.output
    lines = [line.split() for line in run.read_text().splitlines()]
    for rec in records:
        one = tmp_path / f"{rec['id']}.json"
        one.write_text(json.dumps(rec))
        alone = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--record", str(one), "--beams", "3", "--k", "5",
                                    "--json"])
        assert alone.exit_code == 0, alone.output
        want = [h["paper_id"] for h in json.loads(alone.stdout)["hits"]]
        assert want and [x[2] for x in lines if x[0] == rec["id"]] == want
    # --json of a batch: each paper outside the corpus carries its facets as read from its text
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--queries", str(qfile), "--beams", "3", "--k", "5", "--json"])
    assert res.exit_code == 0, res.output
    from graft.facets import FACETS

    for entry in json.loads(res.stdout):
        read = entry["info"]["query_facets"]
        assert list(read) == list(FACETS) and all(read[f] for f in FACETS)

    res = runner.invoke(app, ["query", str(trained), "--paper", ids[0], "--retriever", "teacher", "--k", "3"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["query", str(trained), "--paper", ids[0], "--retriever", "teacher",
                              "--fusion", "graph-rrf"])
    assert res.exit_code == 2 and "rrf" in res.output
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--paper", ids[0], "--fusion", "bogus"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--paper", ids[0], "--fusion", "graph-walk", "--beams", "3",
                              "--json"])
    assert res.exit_code == 0, res.output
    want = Index.open(trained).query(paper=ids[0], retriever="graft", fusion="graph-walk", beams=3)
    assert [h["paper_id"] for h in json.loads(res.stdout)["hits"]] == [h.paper_id for h in want.hits]


def test_latency_benchmark_smoke(trained, tmp_path) -> None:
    from experiments.query_latency import main

    assert main(["--index", str(trained), "--model", "tiny", "--random", "--queries", "2", "--beams", "2",
                 "--results", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "query_latency.json").read_text())
    assert res["queries"] == 2 and res["graft"]["p50_s"] > 0 and res["speedup_p50"] > 0


def test_end_to_end_on_aclsum(tmp_path, encoder) -> None:
    """ACLSum (full-text S2ORC papers) -> graph -> tiny DocID model -> facet-attributed retrieval."""
    from graft.index import Index
    from graphbuild.build import BuildConfig, build_index
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    out = tmp_path / "acl"
    build_index(None, out, BuildConfig(limit=30), encoder=encoder)
    train_index(out, TrainConfig(max_steps=10, lr=2e-3, save_every_steps=0, logging_steps=5), base_model="tiny")
    idx = Index.open(out)
    retriever = idx.generative()
    returned = 0
    for pid in idx.paper_ids[:3]:
        result = retriever.query_paper(pid, k=10, beams=3)
        returned += len(result.hits)
        for h in result.hits:
            assert h.paper_id in idx.row_of and h.paper_id != pid
            assert any(v > 0 for v in h.facets.values()) or h.citation is not None
    assert returned > 0


def test_index_query_is_the_one_entry_point(trained) -> None:
    from graft.errors import GraftError
    from graft.index import Index

    idx = Index.open(trained)
    gen = idx.generative()
    assert idx.generative() is gen  # loaded once
    pid = _query_paper(gen)
    from graft.query import ModelState

    # the default: the trained model only once it passed its prompt check, else the teacher
    expected = "graft" if ModelState.of(idx).passed else "teacher"
    assert idx.query(paper=pid, k=5, beams=4).retriever == expected
    default = idx.query(paper=pid, k=5, beams=4, retriever="graft")
    assert default.retriever == "graft" and default.fusion == "graph-rrf" and "tiny" in default.info["model"]
    assert [h.paper_id for h in default.hits] == [h.paper_id for h in gen.query_paper(pid, k=5, beams=4,
                                                                                    citation_keep=3).hits]
    teacher = idx.query(paper=pid, retriever="teacher", k=5)
    assert teacher.retriever == "teacher" and teacher.hits
    outside = idx.query(facets=idx.paper_facets(pid), k=5, beams=4, query_id="new", retriever="graft")
    assert outside.query_id == "new"
    for bad in ({"paper": pid, "retriever": "bm25"}, {"paper": pid, "fusion": "max"},
                {"paper": pid, "retriever": "teacher", "fusion": "graph-rrf"},
                {"facets": {"method": ["x"]}, "retriever": "teacher"}, {"paper": pid, "neighbours": {pid: 0.5}}, {},
                {"paper": pid, "beams": 0}, {"facets": {"Method": ["x"]}}, {"paper": pid, "device": "gpu0"}):
        with pytest.raises(GraftError):
            idx.query(**bad)
    # wrong types are named, never read the wrong way (a string as a list of characters) or left
    # to fail inside with a TypeError
    items = idx.paper_facets(pid)["method"]
    for bad, message in (({"facets": {"method": items[0]}}, r"facets\['method'\] must be a list of item strings.*write \["),
                         ({"facets": {"method": [1, 2]}}, "must be a list of item strings"),
                         ({"facets": {"method": None}}, "must be a list of item strings"),
                         ({"facets": ["method"]}, "facets must map facet names"),
                         ({"paper": pid, "k": 2.5}, "k must be a whole number >= 1, got 2.5"),
                         ({"paper": pid, "k": "5"}, "k must be a whole number >= 1, got '5'"),
                         ({"paper": pid, "beams": 2.5}, "beams must be a whole number >= 1, got 2.5"),
                         ({"paper": pid, "citation_weight": "3"}, "citation_weight must be a finite number >= 0, got '3'"),
                         ({"paper": pid, "citation_weight": float("inf")}, "citation_weight must be a finite number >= 0, got inf"),
                         ({"paper": b"x"}, "a paper id is a string, got bytes"),
                         ({"paper": 123}, "paper '123' is not in index"),
                         ({"facets": {"method": items}, "exclude": pid}, "exclude= takes a set of paper ids"),
                         ({"paper": pid, "retriever": "teacher", "device": "gpu0"}, "device 'gpu0' is unknown")):
        with pytest.raises(GraftError, match=message):
            idx.query(**bad)
    with pytest.raises(GraftError, match="paper 'nope' is not in index"):
        idx.paper_facets("nope")
    with pytest.raises(GraftError, match="a paper id is a string, got int"):
        idx.row(123)
    import torch

    if not torch.cuda.is_available():  # named by GRAFT with the fix, not by torch mid-load
        with pytest.raises(GraftError, match="sees no CUDA GPU.*--device cpu"):
            idx.query(paper=pid, device="cuda")
    assert idx.generative(device="auto") is gen or torch.cuda.is_available()  # "auto" is the CPU here
    # one beam is greedy search, scored as beam search scores the same DocIDs
    greedy = idx.query(paper=pid, k=5, beams=1, retriever="graft")
    assert greedy.hits and len({h.paper_id for h in greedy.hits}) == len(greedy.hits)


def test_a_damaged_trained_model_is_named_with_the_fix(trained, tmp_path) -> None:
    import shutil

    from graft.errors import IndexFormatError
    from graft.index import Index

    copy = tmp_path / "index"
    shutil.copytree(trained, copy)
    weights = copy / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    idx = Index.open(copy)
    with pytest.raises(IndexFormatError, match="cannot be loaded .*train it again with `graft train"):
        idx.query(paper=idx.paper_ids[0], retriever="graft")


def test_graph_walk_walks_the_graph_rrf_candidates(retriever) -> None:
    """graph-walk: graph-RRF's kept candidates, weighted by their support, walked two hops by the
    teacher; one-hop hits are those candidates, two-hop hits come through one of them."""
    from graft.fusion import support_rows

    pid = _query_paper(retriever)
    idx, n = retriever.index, retriever.index.n
    q = idx.row(pid)
    kept = retriever.query_paper(pid, k=n, beams=4, citation_weight=0)  # graph-RRF: every supported candidate
    walked = retriever.query_paper(pid, k=n, beams=4, fusion="graph-walk", citation_weight=0)
    assert walked.retriever == "graft" and walked.fusion == "graph-walk" and walked.hits
    seeds = {f: {idx.row(h.paper_id): h.evidence[f].weight for h in kept.hits if f in h.facets}
             for f in ("problem", "method", "result", "contribution")}
    assert walked.info["seeds"] == {f: len(s) for f, s in seeds.items()}
    want = idx.query_rows(support_rows(seeds, n), k=n, exclude={q})
    assert [h.paper_id for h in walked.hits] == [h.paper_id for h in want.hits]
    got = {h.paper_id: h for h in walked.hits}
    assert {h.paper_id for h in kept.hits} <= set(got) and pid not in got
    two_hop = 0
    for h in walked.hits:
        for f, ev in h.evidence.items():
            if ev.hops == 1:  # a decoded, supported candidate of that facet, with its edge weight
                assert ev.weight == pytest.approx(seeds[f][idx.row(h.paper_id)], abs=1e-5)
            else:
                two_hop += 1
                assert idx.row(ev.via) in seeds[f]
    assert two_hop > 0  # the walk reaches beyond the decoded candidates
    outside = retriever.query_items(idx.paper_facets(pid), k=20, beams=4, query_id="new", fusion="graph-walk",
                                    citation_weight=0)
    assert outside.fusion == "graph-walk" and outside.query_id == "new" and all(h.facets for h in outside.hits)
    linked = _linked_query_paper(retriever, "graph-walk")
    cited = retriever.query_paper(linked, k=n, beams=4, fusion="graph-walk")  # the channel in the teacher's walk
    assert any(h.citation is not None for h in cited.hits) and linked not in {h.paper_id for h in cited.hits}


@pytest.mark.parametrize("fusion", ["graph-rrf", "rrf", "graph-walk"])
def test_text_channel_fuses_the_query_s_nearest_papers_by_title_and_abstract(retriever, fusion) -> None:
    """A query outside the corpus given with its text: its nearest papers by title + abstract join
    graph-RRF / RRF as a run of weight W_t (graph-RRF support W_t x cosine), ranked by cosine, with
    text evidence and no facet credit; graph-walk adds them to every facet row at beta x cosine."""
    from graft.external import text_coupling_row
    from graft.fusion import TEXT_WEIGHT

    pid = _query_paper(retriever)
    idx, n = retriever.index, retriever.index.n
    q = idx.row(pid)
    papers = np.asarray(idx.paper_embeddings, dtype=np.float32)
    row = text_coupling_row(papers, papers[q], 5, exclude=q)
    near = {idx.paper_ids[c]: float(v) for c, v in zip(row.indices, row.data)}
    assert len(near) == 5 and pid not in near
    facets = idx.paper_facets(pid)
    base = retriever.query_items(facets, k=n, beams=4, fusion=fusion, citation_weight=0)
    got = retriever.query_items(facets, k=n, beams=4, fusion=fusion, citation_weight=0, neighbours=near)
    hits = {h.paper_id: h for h in got.hits}
    assert set(near) <= set(hits)
    if fusion == "graph-walk":  # text coupling in the walked rows: one-hop evidence in every facet
        assert got.info["seeds"] != base.info["seeds"] and all(h.text is None for h in got.hits)
        assert all(set(hits[p].facets) == {"problem", "method", "result", "contribution"} for p in near)
        return
    assert got.info["text_neighbours"] == 5 and got.info["text_weight"] == TEXT_WEIGHT
    base_terms = {h.paper_id: h.facets for h in base.hits}
    for h in got.hits:
        if h.paper_id in near:
            assert h.text is not None and h.text.cosine == pytest.approx(near[h.paper_id], abs=1e-6)
            weight = TEXT_WEIGHT * near[h.paper_id] if fusion == "graph-rrf" else TEXT_WEIGHT
            assert h.text.term == pytest.approx(weight / (60 + h.text.rank), rel=1e-6)
            assert "reads like it" in h.facet_label()
        else:
            assert h.text is None
        assert h.facets == pytest.approx(base_terms.get(h.paper_id, {}))  # facet credits as without the channel
        assert h.score == pytest.approx(sum(h.facets.values()) + (h.text.term if h.text else 0.0))
    order = sorted(near, key=lambda p: (-near[p], idx.row(p)))
    assert [hits[p].text.rank for p in order] == list(range(1, 6))
    off = retriever.query_items(facets, k=n, beams=4, fusion=fusion, citation_weight=0, neighbours=near,
                                text_weight=0)
    assert [h.paper_id for h in off.hits] == [h.paper_id for h in base.hits]
    lists = retriever.facet_lists([(facets, set())], 4)[0]  # an excluded paper is never returned
    skip = order[0]
    fused = retriever.fuse_items("new", lists, k=n, fusion=fusion, citation_weight=0, neighbours=near, exclude={skip})
    assert skip not in {h.paper_id for h in fused.hits} and len([h for h in fused.hits if h.text]) == 4


def test_cli_query_text_with_graft_has_the_text_channel(trained, tmp_path) -> None:
    import shutil

    from cli.app import app
    from graft.index import Index

    idx = Index.open(trained)
    pid = _query_paper(Index.open(trained).generative())
    row = idx.papers.row(idx.row(pid), named=True)
    text = f"{row['title']}. {row['abstract']}"
    runner = CliRunner()
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--beams", "3", "--k", "30", "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    reads = [h for h in hits if h["text"] is not None]
    assert reads and all(0 < h["text"]["cosine"] <= 1 for h in reads)
    assert any(h["paper_id"] == pid for h in reads)  # a record without an id: its own text reads like it
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--beams", "3", "--k", "30", "--json",
                              "--explain"])  # the decoded papers' facet credits in words
    assert res.exit_code == 0, res.output
    matched = [(h["paper_id"], f, e["match"]) for h in json.loads(res.stdout)["hits"] for f, e in h["evidence"].items()]
    assert matched and all(m is not None for _, _, m in matched)
    for hit_id, facet, m in matched:
        assert m["hit"] in idx.paper_facets(hit_id)[facet] and -1 <= m["cosine"] <= 1
    flat = " ".join(text.split())
    assert all(" ".join(m["query"].split())[:40] in flat for _, _, m in matched)  # items read from the text
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--beams", "3", "--k", "30", "--json",
                              "--text-neighbours", "0"])
    assert res.exit_code == 0, res.output
    assert all(h["text"] is None for h in json.loads(res.stdout)["hits"])
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--beams", "3", "--k", "10"])
    assert res.exit_code == 0 and "reads like it" in res.output, res.output
    res = runner.invoke(app, ["query", str(trained), "--retriever", "graft", "--text", text, "--text-neighbours", "-1"])
    assert res.exit_code == 2 and "text-neighbours" in res.output
    older = tmp_path / "older"  # an index built before embeddings/papers.npy: no channel, and it says so
    shutil.copytree(trained, older)
    (older / "embeddings" / "papers.npy").unlink()
    res = runner.invoke(app, ["query", str(older), "--retriever", "graft", "--text", text, "--beams", "3", "--k", "10"])
    assert res.exit_code == 0 and "no text channel" in res.output and "reads like it" not in res.output


def test_a_new_paper_s_references_are_left_out_of_graft_s_results(trained, encoder) -> None:
    """graft query --record with references: the papers it already cites are not returned (as the
    teacher leaves them out; they leave the decoded lists, so the others move up)."""
    from graft.index import Index

    idx = Index.open(trained)
    related = idx.searcher(retriever="graft", k=12, beams=3, citation_weight=0, text_neighbours=0,
                           encoder=encoder)  # the session's encoder
    row = idx.papers.row(0, named=True)
    record = {"id": "draft", "title": row["title"], "abstract": row["abstract"]}
    before = [h.paper_id for h in related.record(record).hits]
    cited = before[:2]
    after = [h.paper_id for h in related.record({**record, "references": [*cited, "not-in-the-index"]}).hits]
    assert len(before) >= 4 and after and not set(cited) & set(after)
    assert set(after) & (set(before) - set(cited))
