"""The OpenAlex works reader: a snapshot fixture in the documented Work shape, read as a stream and sliced."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from graft.errors import InputValidationError
from graphbuild import openalex
from graphbuild.corpus import load_corpus
from graphbuild.openalex import (
    WorksFilter,
    abstract_text,
    is_openalex,
    iter_openalex,
    parse_openalex_spec,
    work_files,
    write_slice,
)

FIXTURE = Path(__file__).parent / "data" / "openalex"


@pytest.fixture
def snapshot(tmp_path) -> Path:
    """The fixture as a snapshot's `data/` folder: every `.jsonl` gzipped to `.gz`, the merged ids to `.csv.gz`."""
    root = tmp_path / "data"
    for src in FIXTURE.rglob("*"):
        if src.is_file() and src.suffix in (".jsonl", ".csv"):
            dest = root / src.relative_to(FIXTURE)
            dest = dest.with_suffix(".gz" if src.suffix == ".jsonl" else ".csv.gz")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(dest, "wb") as fh:
                fh.write(src.read_bytes())
    return root


def refs(corpus) -> dict[str, list[str]]:
    return dict(zip(corpus.papers["paper_id"].to_list(), corpus.papers["references"].to_list()))


def test_abstract_is_rebuilt_from_positions_with_repeated_words() -> None:
    index = {"graph": [3, 11], "We": [0], "a": [2, 10], "propose": [1], "model.": [4], "The": [5], "model": [6],
             "ranks": [7], "papers": [8], "over": [9], "citations.": [12]}
    assert abstract_text(index) == "We propose a graph model. The model ranks papers over a graph citations."
    # a gap in the positions closes up; a position shared by two words keeps both in the index's order
    assert abstract_text({"b": [5], "a": [0], "c": [5]}) == "a b c"
    for bad in (None, {}, {"a": "0"}, {"a": [-1]}, {"a": [True]}, [["a", 0]]):
        assert abstract_text(bad) is None


def test_whole_snapshot_reads_newest_copies_follows_merges_and_keeps_in_corpus_references(snapshot) -> None:
    corpus = load_corpus(snapshot / "works")
    papers = corpus.papers
    # W3 has no abstract; W7's record is merged into W2; the older W2 copy loses to the newer one
    assert papers["paper_id"].to_list() == ["W1", "W2", "W4", "W9", "W5", "W6"]
    row = dict(zip(papers["paper_id"], papers.iter_rows(named=True)))
    assert row["W2"]["title"] == "Message passing on scholarly graphs"
    assert row["W2"]["abstract"] == "Messages pass along edges of the citation graph."
    assert row["W1"]["abstract"] == "We propose a graph model. The model ranks papers over a graph citations."
    assert row["W1"]["authors"] == ["Ada Lovelace", "Alan Turing"] and row["W1"]["year"] == 2019
    assert row["W1"]["venue"] == "Journal of Graph Learning"
    assert row["W5"]["title"] == "Scaling graph retrieval to millions of papers"  # title null: display_name
    assert row["W5"]["authors"] == ["Edsger W. Dijkstra", "Grace Hopper"]  # raw_author_name stands in
    assert row["W6"]["venue"] == "Graph Surveys"  # the old host_venue
    # W1 cites W2, W3 (no abstract), W9, W404 (in no file), W7 (merged into W2) and W2 again
    assert refs(corpus) == {"W1": ["W2", "W9"], "W2": [], "W4": [], "W9": ["W1"], "W5": ["W1", "W2"],
                            "W6": ["W5", "W2", "W4"]}
    report = corpus.report
    assert report.dropped_references == 2 + 1 + 1  # W1: W3, W404; W2: W3; W5: W3
    assert report.duplicate_references == 2 and report.self_references == 1
    counts = report.details["openalex"]
    assert counts["files"] == 3 and counts["works"] == 9
    assert (counts["no_abstract"], counts["merged_records"], counts["duplicates"]) == (1, 1, 1)
    assert counts["merged_references"] == 2  # W1 and W6 cite W7


def test_slice_by_field_and_years_drops_references_leaving_it(snapshot) -> None:
    path, works_filter = parse_openalex_spec(f"openalex:{snapshot / 'works'}?field=17&year=2015-")
    assert works_filter == WorksFilter(fields=frozenset({"17"}), year_from=2015)
    assert path == snapshot / "works"
    corpus = load_corpus(f"openalex:{snapshot / 'works'}?field=17&year=2015-")
    assert refs(corpus) == {"W1": ["W2"], "W2": [], "W5": ["W1", "W2"], "W6": ["W5", "W2"]}
    counts = corpus.report.details["openalex"]
    assert counts["outside_filter"] == 2  # W4 (2012) and W9 (Medicine)
    assert counts["filter"] == {"fields": ["17"], "years": [2015, None]}


@pytest.mark.parametrize(("query", "ids"), [
    ("concept=C71924100", ["W9"]),
    ("concept=https://openalex.org/C80444323|C71924100", ["W1", "W9"]),
    ("topic=T10181", ["W1", "W2", "W5", "W6"]),  # any of a work's topics: W6's second one
    ("subfield=1710", ["W4", "W6"]),
    ("domain=https://openalex.org/domains/4", ["W9"]),
    ("year=2020", ["W2", "W9"]),
    ("year=-2019&field=17", ["W1", "W4"]),
])
def test_slices_by_concept_topic_subfield_domain_and_year(snapshot, query, ids) -> None:
    corpus = load_corpus(f"openalex:{snapshot / 'works'}?{query}")
    assert sorted(corpus.papers["paper_id"].to_list()) == ids


def test_limit_keeps_the_first_works_and_only_their_references(snapshot) -> None:
    corpus = load_corpus(snapshot / "works", limit=2)
    assert refs(corpus) == {"W1": ["W2"], "W2": []}


def test_the_slice_is_written_as_records_with_references_inside_it(snapshot, tmp_path) -> None:
    counts = write_slice(snapshot / "works", tmp_path / "slice.jsonl", WorksFilter(fields=frozenset({"17"})))
    lines = [json.loads(line) for line in (tmp_path / "slice.jsonl").read_text().splitlines()]
    assert [r["id"] for r in lines] == ["W1", "W2", "W4", "W5", "W6"]
    assert lines[0]["references"] == ["W2", "W2", "W2"]  # W2, W7 -> W2, W2: the loader removes repeats
    assert counts.dropped_references == 5  # W1: W3, W9, W404; W2: W3; W5: W3
    assert counts.duplicates == 1 and counts.outside_filter == 1


def test_one_pass_stream_yields_records_with_doi_url_and_ids(snapshot) -> None:
    recs = {r["id"]: r for _, r in iter_openalex(snapshot / "works")}
    assert recs["W1"]["doi"] == "10.1000/graph.1" and recs["W1"]["url"] == "https://doi.org/10.1000/graph.1"
    assert recs["W1"]["ids"] == {"openalex": "W1", "doi": "10.1000/graph.1"}
    assert recs["W5"]["ids"] == {"openalex": "W5", "arxiv": "2101.00005"}
    assert recs["W5"]["references"] == ["W1", "W2", "W3", "W5"]  # unfiltered: the stream holds no id set
    assert recs["W6"]["doi"] == "10.1000/graph.6"
    assert "W7" not in recs and "W3" not in recs


def test_layouts_are_recognised_and_single_part_files_read(snapshot, tmp_path) -> None:
    works = snapshot / "works"
    assert is_openalex(works) and is_openalex(f"openalex:{works}")
    part = works / "updated_date=2024-03-01" / "part_001.gz"
    assert is_openalex(part)
    plain = tmp_path / "corpus.jsonl.gz"
    shutil.copy(part, plain)
    assert not is_openalex(plain)  # a records file stays with the JSONL reader
    assert [p.parent.name for p in work_files(works)] == ["updated_date=2024-03-01"] * 2 + ["updated_date=2024-01-15"]
    corpus = load_corpus(part)  # one part file: no merged ids beside it, W1 is not in it
    assert corpus.papers["paper_id"].to_list() == ["W4", "W9", "W5"]
    assert refs(corpus)["W5"] == []


@pytest.mark.parametrize(("spec", "message"), [
    ("openalex:works?colour=red", "unknown OpenAlex filter 'colour'"),
    ("openalex:works?year=2020-2010", "is empty"),
    ("openalex:works?year=twenty", "is not YEAR"),
    ("openalex:works?field=", "empty value"),
    ("openalex:?field=17", "no path"),
])
def test_bad_filters_are_named(spec, message) -> None:
    with pytest.raises(InputValidationError, match=message):
        parse_openalex_spec(spec)


def test_bad_lines_stop_the_read_unless_skipped(snapshot) -> None:
    part = snapshot / "works" / "updated_date=2024-03-01" / "part_001.gz"
    lines = gzip.decompress(part.read_bytes()).decode().splitlines()
    part.write_bytes(gzip.compress(("\n".join([lines[0], "{not json", json.dumps([1]), *lines[1:]]) + "\n").encode()))
    with pytest.raises(InputValidationError, match=r"updated_date=2024-03-01/part_001.gz line 2: invalid JSON"):
        load_corpus(snapshot / "works")
    corpus = load_corpus(snapshot / "works", skip_bad=True)
    assert [b.where for b in corpus.report.skipped] == ["updated_date=2024-03-01/part_001.gz line 2",
                                                        "updated_date=2024-03-01/part_001.gz line 3"]
    assert corpus.papers.height == 6 and corpus.report.n_read == 6 + 2
    assert corpus.report.skipped[1].reason == "expected a JSON object, got list"


def test_nothing_in_the_slice_is_an_error(snapshot) -> None:
    with pytest.raises(InputValidationError, match="no works with a title and an abstract in the slice"):
        load_corpus(f"openalex:{snapshot / 'works'}?year=2030")
    with pytest.raises(InputValidationError, match="OpenAlex works not found"):
        openalex.work_files(snapshot / "nowhere")


def test_build_from_an_openalex_slice(snapshot, tmp_path, encoder) -> None:
    from graft.index import Index
    from graphbuild.build import BuildConfig, build_index

    spec = f"openalex:{snapshot / 'works'}?field=17&year=2015-"
    summary = build_index(spec, tmp_path / "index", BuildConfig(), encoder=encoder)
    idx = Index.open(tmp_path / "index")
    assert idx.paper_ids == ["W1", "W2", "W5", "W6"]
    assert sorted(idx.citations.iter_rows()) == [("W1", "W2"), ("W5", "W1"), ("W5", "W2"), ("W6", "W2"),
                                                 ("W6", "W5")]
    assert summary.report["details"]["openalex"]["outside_filter"] == 2
    assert idx.manifest["corpus"]["source"] == spec


def test_build_with_faiss_candidates_writes_their_index_and_queries_search_it(snapshot, tmp_path, encoder) -> None:
    """All six works, built with exact and then (the same folder: facets and vectors reused) with FAISS
    candidates searching every list, then with HNSW: the same graphs, and the approximate builds' IVF
    index files for queries."""
    from graft.ann import IVFCandidates
    from graft.external import CorpusScorer
    from graft.facets import FACETS
    from graft.index import Index
    from graphbuild.build import BuildConfig, build_index

    out = tmp_path / "index"
    build_index(snapshot / "works", out, BuildConfig(), encoder=encoder)
    exact = Index.open(out)
    assert exact.manifest["stages"]["build"]["counts"]["candidates"] == "exact"
    assert not list((out / "graph").glob("ann_*.faiss"))
    graphs = {f: exact.graphs[f].copy() for f in FACETS}
    build_index(snapshot / "works", out, BuildConfig(candidates="faiss", faiss_nprobe=1000), encoder=encoder)
    approx = Index.open(out)
    assert approx.manifest["stages"]["build"]["counts"]["candidates"] == "faiss"
    assert sorted(p.name for p in (out / "graph").glob("ann_*.faiss")) == sorted(f"ann_{f}.faiss" for f in FACETS)
    for f in FACETS:
        assert ((graphs[f] > 0) != (approx.graphs[f] > 0)).nnz == 0
        assert abs(graphs[f] - approx.graphs[f]).max() < 1e-6
    searchers = CorpusScorer(approx).searchers
    assert all(s is not None and s.index.ntotal == 6 for s in searchers.values())
    node = approx.row("W1")
    rows = CorpusScorer(approx).paper_rows(node, approx.citation_score[node])
    assert rows["method"].nnz > 0
    # an HNSW graph for the build's search (six vectors: it finds them all), an IVF index for queries
    build_index(snapshot / "works", out, BuildConfig(candidates="hnsw"), encoder=encoder)
    walked = Index.open(out)
    assert walked.manifest["stages"]["build"]["counts"]["candidates"] == "hnsw"
    for f in FACETS:
        assert ((graphs[f] > 0) != (walked.graphs[f] > 0)).nnz == 0
    assert all(isinstance(s, IVFCandidates) for s in CorpusScorer(walked).searchers.values())
    build_index(snapshot / "works", out, BuildConfig(candidates="exact"), encoder=encoder)
    assert not list((out / "graph").glob("ann_*.faiss"))  # a later exact build removes them
