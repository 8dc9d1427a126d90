"""A library on a built index: matched (`graft import --index`), queried as a seed set (`graft query
--seeds`, `Searcher.seeds`) and exported as a bibliography (`graft export --format bibtex|ris|csljson`)."""

from __future__ import annotations

import json
import re
import shutil

import bibtexparser
import numpy as np
import polars as pl
import pytest
import rispy
import scipy.sparse as sp
from conftest import REPO
from typer.testing import CliRunner

from cli.app import app
from graft.errors import QueryError
from graft.fusion import RRF_K
from graft.index import Index
from graft.library import match_library, read_library
from graft.query import SEED_DEPTH, QueryConfig, Searcher
from graphbuild.build import papers_table
from graphbuild.corpus import load_corpus

DATA = REPO / "tests" / "data"
runner = CliRunner()


def test_papers_table_keeps_identifiers_only_where_the_corpus_has_them(tmp_path) -> None:
    rows = [{"id": "a", "title": "T a", "abstract": "A a", "doi": "10.1234/a"}, {"id": "b", "title": "T b",
                                                                                  "abstract": "A b"}]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    table = papers_table(load_corpus(path), sp.csr_matrix((2, 2)))
    assert table.columns == ["paper_id", "title", "abstract", "year", "venue", "authors", "doi", "n_citations"]
    assert table["doi"].to_list() == ["10.1234/a", None]
    path.write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "doi"}) for r in rows) + "\n")
    assert "doi" not in papers_table(load_corpus(path), sp.csr_matrix((2, 2))).columns  # as before


@pytest.fixture(scope="module")
def seeded(web_index):
    """The web index, the ids zotero.bib's entries match in it, and a teacher searcher."""
    idx = Index.open(web_index)
    ids = match_library(read_library(DATA / "zotero.bib"), idx.papers).paper_ids
    return idx, ids, Searcher(idx, QueryConfig(retriever="teacher", k=10))


def test_seeds_fuse_each_seeds_results_by_rrf_and_never_return_a_seed(seeded) -> None:
    """Oracle: each seed's first SEED_DEPTH results (the other seeds left out), fused by hand with
    RRF (k = 60), give the multi-seed query's order and scores."""
    idx, ids, searcher = seeded
    # the first paper's title starts with markup in this index; its URL still names it
    assert ids == ["2020.aacl-main.33", "2020.aacl-main.67", "2020.acl-main.75"]
    result = searcher.seeds(ids)
    deep = Searcher(idx, QueryConfig(retriever="teacher", k=SEED_DEPTH))
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for seed in ids:
        for h in deep.record({"id": seed}, exclude=set(ids) - {seed}).hits:
            scores[h.paper_id] = scores.get(h.paper_id, 0.0) + 1.0 / (RRF_K + h.rank)
            ranks.setdefault(h.paper_id, {})[seed] = h.rank
    want = sorted(scores, key=lambda p: (-scores[p], p))[:10]
    assert [h.paper_id for h in result.hits] == want and len(want) == 10
    assert np.allclose([h.score for h in result.hits], [scores[p] for p in want])
    assert not set(ids) & {h.paper_id for h in result.hits}
    assert result.info["surfaced_by"] == {p: ranks[p] for p in want}
    assert any(len(ranks[p]) > 1 for p in want)  # papers near several seeds are what it finds
    assert [h.rank for h in result.hits] == list(range(1, 11)) and result.info["seeds"] == ids
    with pytest.raises(QueryError, match="at least one"):
        searcher.seeds([])
    with pytest.raises(QueryError, match="not one string"):
        searcher.seeds("2020.aacl-main.33")
    with pytest.raises(QueryError, match="nope"):
        searcher.seeds(["nope"])


def test_graft_query_seeds_and_graft_import_on_an_index(seeded, web_index) -> None:
    idx, ids, searcher = seeded
    res = runner.invoke(app, ["query", str(web_index), "--seeds", str(DATA / "zotero.bib"), "--retriever",
                              "teacher", "--k", "10", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert [h["paper_id"] for h in got["hits"]] == [h.paper_id for h in searcher.seeds(ids).hits]
    assert "2 of the 5 entries of zotero.bib are not in the index" in res.stderr
    res = runner.invoke(app, ["query", str(web_index), "--seeds", str(DATA / "zotero.bib"), "--paper", ids[0]])
    assert res.exit_code == 2 and "exactly one of" in res.output
    table = runner.invoke(app, ["import", str(DATA / "zotero.bib"), "--index", str(web_index)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "matched 3 of 5 (1 by url · 2 by title)" in table.stdout and "--seeds" in table.stdout


def test_export_bibliographies_of_a_view_seeds_results_and_a_survey(seeded, web_index, tmp_path) -> None:
    idx, ids, searcher = seeded
    copy = tmp_path / "idx"
    shutil.copytree(web_index, copy)
    # a DOI the corpus records travels into every format
    papers = pl.read_parquet(copy / "papers.parquet")
    dois = [f"10.18653/v1/{p}" if p == ids[1] else None for p in papers["paper_id"].to_list()]
    papers.with_columns(pl.Series("doi", dois, dtype=pl.Utf8)).write_parquet(copy / "papers.parquet")

    res = runner.invoke(app, ["export", str(copy), "--format", "bibtex", "--paper", ids[1], "--k", "5"])
    assert res.exit_code == 0, res.output
    lib = bibtexparser.parse_file(str(copy / "papers.bib"))
    assert lib.failed_blocks == [] and len(lib.entries) == 6
    first = {k: f.value for k, f in lib.entries[0].fields_dict.items()}
    assert first["doi"] == f"10.18653/v1/{ids[1]}" and first["note"] == f"corpus id {ids[1]}"
    view = [ids[1], *(h.paper_id for h in Searcher(idx, QueryConfig(k=5)).paper(ids[1]).hits)]
    assert [e.fields_dict["note"].value.removeprefix("corpus id ") for e in lib.entries] == view

    out = tmp_path / "seeds.ris"
    res = runner.invoke(app, ["export", str(copy), "--format", "ris", "--seeds", str(DATA / "zotero.bib"), "--k", "4",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    records = rispy.loads(out.read_text())
    fused = [h.paper_id for h in Searcher(idx, QueryConfig(k=4)).seeds(ids).hits]
    assert [r["id"] for r in records] == [*ids, *fused]
    assert records[1]["doi"] == f"10.18653/v1/{ids[1]}"

    query = runner.invoke(app, ["query", str(copy), "--paper", ids[2], "--k", "3", "--json"])
    (tmp_path / "q.json").write_text(query.stdout)
    out = tmp_path / "q.csl.json"
    res = runner.invoke(app, ["export", str(copy), "--format", "csljson", "--results", str(tmp_path / "q.json"),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert [i["id"] for i in json.loads(out.read_text())] == [h["paper_id"] for h in json.loads(query.stdout)["hits"]]

    survey = tmp_path / "survey"
    survey.mkdir()
    (survey / "survey.json").write_text(json.dumps({"references": [{"number": 2, "paper_id": ids[0]},
                                                                   {"number": 1, "paper_id": ids[2]}]}))
    res = runner.invoke(app, ["export", str(copy), "--format", "bibtex", "--survey", str(survey), "--out",
                              str(tmp_path / "s.bib")])
    assert res.exit_code == 0, res.output
    assert [e.fields_dict["note"].value for e in bibtexparser.parse_file(str(tmp_path / "s.bib")).entries] == [
        f"corpus id {ids[2]}", f"corpus id {ids[0]}"]

    # every paper by default; refusals name the way out
    res = runner.invoke(app, ["export", str(copy), "--format", "csljson"])
    assert res.exit_code == 0 and len(json.loads((copy / "papers.csl.json").read_text())) == idx.n
    for args, message in ((["--format", "graphml", "--paper", ids[0]], "select the papers of a bibliography"),
                          (["--format", "bibtex", "--paper", ids[0], "--survey", str(survey)], "give one of"),
                          (["--format", "bibtex", "--results", str(survey / "survey.json")],
                           "not a `graft query --json` output"),
                          (["--format", "endnote"], "allowed: graphml, gexf, json, bibtex, ris, csljson")):
        res = runner.invoke(app, ["export", str(copy), *args], env={"COLUMNS": "300"})
        assert res.exit_code == 2 and message in res.output, (args, res.output)


def test_year_and_venue_filters_leave_papers_out_before_fusion(seeded, web_index) -> None:
    """`since`, `until`, `venues` (QueryConfig; graft query --since/--until/--venue): every result is
    inside the filter, k results still come back where the corpus has them, and the unfiltered query
    did return papers the filter leaves out."""
    idx, ids, _ = seeded
    papers = idx.papers
    year = dict(zip(papers["paper_id"].to_list(), papers["year"].to_list()))
    venue = dict(zip(papers["paper_id"].to_list(), papers["venue"].to_list()))
    plain = Searcher(idx, QueryConfig(retriever="teacher", k=10)).paper(ids[0]).hits
    assert any(year[h.paper_id] < 2021 for h in plain)
    since = Searcher(idx, QueryConfig(retriever="teacher", k=10, since=2021))
    hits = since.paper(ids[0]).hits
    assert len(hits) == 10 and all(year[h.paper_id] >= 2021 for h in hits)
    assert [h.rank for h in hits] == list(range(1, 11))
    assert all(year[h.paper_id] >= 2021 for h in since.seeds(ids).hits)
    only = Searcher(idx, QueryConfig(retriever="teacher", k=5, until=2020, venues=(" emnlp ",))).paper(ids[0])
    assert only.hits and all(venue[h.paper_id] == "EMNLP" and year[h.paper_id] <= 2020 for h in only.hits)
    assert only.info["filters"]["venues"] == [" emnlp "]
    res = runner.invoke(app, ["query", str(web_index), "--paper", ids[0], "--retriever", "teacher", "--since", "2021",
                              "--until", "2021", "--venue", "ACL", "--venue", "NAACL", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["hits"]
    assert got and all(year[h["paper_id"]] == 2021 and venue[h["paper_id"]] in ("ACL", "NAACL") for h in got)
    for bad, message in (({"since": 2022, "until": 2020}, "since (2022) is after until (2020)"),
                         ({"venues": "ACL"}, "not one string"), ({"since": 0}, "since must be a year")):
        with pytest.raises(QueryError, match=re.escape(message)):
            QueryConfig(**bad)
