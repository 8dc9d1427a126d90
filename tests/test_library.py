"""A researcher's library (Zotero / Mendeley exports under tests/data) read, matched to corpus papers
and written as corpus records; no index needed (`test_library_index.py` queries and exports)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import REPO, cs768_path
from typer.testing import CliRunner

from cli.app import app
from graft.errors import InputValidationError
from graft.identifiers import arxiv_id, doi, links, unversioned
from graft.library import match_library, read_library, records, title_key
from graphbuild.corpus import load_aclsum, load_corpus

DATA = REPO / "tests" / "data"
runner = CliRunner()


@pytest.fixture(scope="module")
def aclsum():
    return load_aclsum().papers


def test_identifiers_are_read_from_the_forms_exports_write() -> None:
    assert doi("https://doi.org/10.18653/V1/P17-1001") == "10.18653/v1/p17-1001"
    assert doi("doi:10.1109/CVPR.2016.90.") == "10.1109/cvpr.2016.90" and doi("no doi here") is None
    assert doi("(see doi:10.1016/S0140-6736(97)11096-0)") == "10.1016/s0140-6736(97)11096-0"
    assert doi("10.1234/ABC(1)") == "10.1234/abc(1)"
    assert arxiv_id("arXiv:2106.04689v2") == "2106.04689v2"
    assert arxiv_id("arXiv: 1705.06730") == "1705.06730"  # Zotero's note field
    assert arxiv_id("https://arxiv.org/pdf/1710.11253v1.pdf") == "1710.11253v1"
    assert arxiv_id("10.48550/arXiv.1706.03762") == "1706.03762"
    assert arxiv_id("arXiv preprint arXiv:hep-th/9901001v2") == "hep-th/9901001v2"
    assert arxiv_id("2106.04689") == "2106.04689" and arxiv_id("2106.04689", bare=False) is None
    assert arxiv_id("P06-1112") is None and unversioned("2106.04689v12") == "2106.04689"
    # a corpus paper's identifiers: its fields, else what its id is (cs768: arXiv ids; ACLSum: ACL ids)
    assert links("1705.06730v1").as_dict() == {"arxiv": "1705.06730v1", "url": "https://arxiv.org/abs/1705.06730v1"}
    assert links("P06-1112").as_dict() == {"url": "https://aclanthology.org/P06-1112"}
    assert links("x1", doi_text="10.1234/ABC").as_dict() == {"doi": "10.1234/abc", "url": "https://doi.org/10.1234/abc"}
    assert links("x1", url="file:///home/me/paper.pdf").url is None  # only web links


def test_zotero_bibtex_is_read_with_tex_braces_and_accents_resolved() -> None:
    lib = read_library(DATA / "zotero.bib")
    assert lib.format == "bibtex" and lib.unreadable == []
    by_key = {e.key: e for e in lib.entries}
    assert list(by_key) == ["ahmad_unsupervised_2020", "guz_neural_2020", "zhou_boating_2020",
                            "chierichetti_algorithms_2017", "manning_introduction_2008"]
    assert by_key["guz_neural_2020"].title == "Neural RST-based Evaluation of Discourse Coherence"  # braces gone
    assert by_key["manning_introduction_2008"].authors[-1] == "Hinrich Schütze"  # {\"u}
    ell = by_key["chierichetti_algorithms_2017"]
    assert ell.title == r"Algorithms for $\ell_p$ Low Rank Approximation"  # math kept for matching and records
    assert (ell.arxiv, ell.year, ell.venue) == ("1705.06730", 2017, None)  # "arXiv:1705.06730 [cs]" is no venue
    assert by_key["ahmad_unsupervised_2020"].url == "https://aclanthology.org/2020.aacl-main.33"
    assert by_key["zhou_boating_2020"].title.startswith("“The Boating Store")


def test_mendeley_ris_and_zotero_csl_json_are_read() -> None:
    ris = read_library(DATA / "mendeley.ris").entries
    assert [e.title for e in ris][:2] == ["Determinantal Beam Search", "Revisiting Unsupervised Relation Extraction"]
    assert ris[0].authors == ["Clara Meister", "Martina Forster", "Ryan Cotterell"]
    assert (ris[0].doi, ris[0].year) == ("10.18653/v1/2021.acl-long.512", 2021)
    assert ris[2].arxiv == "1710.11253v1" and ris[3].doi == "10.1109/cvpr.2016.90" and ris[3].abstract is None
    csl = read_library(DATA / "zotero-csl.json").entries
    assert csl[0].doi == "10.18653/v1/2020.acl-main.443" and csl[0].year == 2020
    assert csl[1].authors[0] == "Ruotian Ma" and csl[1].url is None
    assert [e.arxiv for e in csl] == [None, None, "1705.06730", "1706.03762"]


def test_library_matches_demo_papers_by_url_and_title_and_reports_the_rest(aclsum) -> None:
    """Against ACLSum (ids are ACL Anthology ids, no DOIs): a URL to the paper's Anthology page
    matches; an entry with a DOI the corpus does not hold falls back to its title; quotes, braces and
    case do not stop a title match; papers outside the corpus stay unmatched."""
    got = {}
    for name in ("zotero.bib", "mendeley.ris", "zotero-csl.json"):
        m = match_library(read_library(DATA / name), aclsum)
        got[name] = [(x.paper_id, x.how) for x in m.matches]
    assert got["zotero.bib"] == [("2020.aacl-main.33", "url"), ("2020.aacl-main.67", "title"),
                                 ("2020.acl-main.75", "title"), (None, None), (None, None)]
    assert got["mendeley.ris"] == [("2021.acl-long.512", "url"), ("2020.acl-main.669", "title"), (None, None),
                                   (None, None)]
    assert got["zotero-csl.json"] == [("2020.acl-main.443", "url"), ("2020.acl-main.528", "title"), (None, None),
                                      (None, None)]
    m = match_library(read_library(DATA / "zotero.bib"), aclsum)
    assert m.counts() == {"entries": 5, "doi": 0, "arxiv": 0, "url": 1, "title": 2, "unmatched": 2, "unreadable": 0}
    assert m.paper_ids == ["2020.aacl-main.33", "2020.aacl-main.67", "2020.acl-main.75"]


def test_library_matches_by_doi_where_the_corpus_records_them(aclsum) -> None:
    """A corpus giving its papers' DOIs (ACL Anthology's own, 10.18653/v1/ID): the RIS entries match
    by DOI first, whatever their case."""
    ids = ["2021.acl-long.512", "2020.acl-main.669", "2020.acl-main.443"]
    papers = aclsum.filter(pl.col("paper_id").is_in(ids)).with_columns(
        ("10.18653/V1/" + pl.col("paper_id")).alias("doi"))
    m = match_library(read_library(DATA / "mendeley.ris"), papers)
    assert [(x.paper_id, x.how) for x in m.matches] == [("2021.acl-long.512", "doi"), ("2020.acl-main.669", "doi"),
                                                          (None, None), (None, None)]


def test_library_matches_arxiv_ids_with_or_without_versions_on_cs768() -> None:
    """cs768's ids are versioned arXiv ids: Zotero's "arXiv: ID" note, a versioned abs URL of another
    version and arXiv's DOI 10.48550/arXiv.ID all find the paper."""
    papers = load_corpus(cs768_path()).papers
    found = {}
    for name in ("zotero.bib", "mendeley.ris", "zotero-csl.json"):
        found.update({x.entry.where: (x.paper_id, x.how) for x in match_library(read_library(DATA / name), papers).matches
                      if x.paper_id})
    assert found == {"zotero.bib entry 4 (line 29)": ("1705.06730v1", "arxiv"),
                     "mendeley.ris record 3": ("1710.11253v2", "arxiv"),
                     "zotero-csl.json item 3": ("1705.06730v1", "arxiv")}


def test_a_title_two_corpus_papers_share_matches_neither_and_says_so(aclsum, tmp_path) -> None:
    twin = aclsum.head(3).with_columns(pl.Series("title", ["Neural RST-based Evaluation of Discourse Coherence"] * 2
                                                 + [aclsum["title"][2]]))
    m = match_library(read_library(DATA / "zotero.bib"), twin)
    guz = next(x for x in m.matches if x.entry.key == "guz_neural_2020")
    assert guz.paper_id is None and "shared by 2 corpus papers" in guz.note
    assert title_key("Caf{\\'e} au Lait: {BERT}") == title_key("Café au lait — BERT") == "cafeaulaitbert"


def test_records_of_unmatched_entries_with_abstracts_get_one_word_ids(aclsum) -> None:
    m = match_library(read_library(DATA / "zotero-csl.json"), aclsum)
    added, left = records(m, set(aclsum["paper_id"].to_list()) | {"1706.03762"})
    assert [r["id"] for _, r in added] == ["1705.06730", "1706.03762_2"]  # a taken id gets a suffix
    rec = added[0][1]
    assert rec["arxiv"] == "1705.06730" and rec["doi"] == "10.48550/arxiv.1705.06730" and rec["year"] == 2017
    assert rec["authors"][0] == "Flavio Chierichetti" and "$\\ell_p$" in rec["title"]
    assert left == []


def test_unreadable_libraries_are_refused_with_the_reason(tmp_path) -> None:
    bad = tmp_path / "broken.bib"
    bad.write_text("@article{ok, title = {Fine}, year = 2020}\n@misc{bad, title = {unclosed\n")
    lib = read_library(bad)
    assert [e.key for e in lib.entries] == ["ok"] and lib.unreadable and "line 2" in lib.unreadable[0]
    (tmp_path / "empty.ris").write_text("\n")
    with pytest.raises(InputValidationError, match="no ris entries"):
        read_library(tmp_path / "empty.ris")
    (tmp_path / "lib.csv").write_text("x")
    with pytest.raises(InputValidationError, match=r"unknown library format '.csv'.*--format"):
        read_library(tmp_path / "lib.csv")
    (tmp_path / "obj.json").write_text('{"title": "x"}')
    with pytest.raises(InputValidationError, match="CSL-JSON is an array of items"):
        read_library(tmp_path / "obj.json")
    with pytest.raises(InputValidationError, match="library not found"):
        read_library(tmp_path / "absent.bib")
    ids = tmp_path / "ids.txt"
    ids.write_text("# my reading list\n10.18653/v1/2021.acl-long.512\narXiv:1706.03762v7\nnot an id\n")
    lib = read_library(ids)
    assert [(e.doi, e.arxiv) for e in lib.entries] == [("10.18653/v1/2021.acl-long.512", None), (None, "1706.03762v7")]
    assert lib.unreadable == ["ids.txt line 4: 'not an id' is neither a DOI nor an arXiv id"]


def test_graft_import_reports_matches_and_writes_a_corpus_graft_build_reads(tmp_path) -> None:
    """`graft import LIB --corpus aclsum --out F.jsonl`: the table says how each entry matched; F holds
    ACLSum's 250 papers then the library's papers outside it with an abstract (the book without one is
    left out), and loads as a corpus with their identifiers."""
    out = tmp_path / "papers.jsonl"
    res = runner.invoke(app, ["import", str(DATA / "zotero.bib"), "--corpus", "aclsum", "--out", str(out)],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "matched 3 of 5 (1 by url · 2 by title) · 2 not in the corpus" in res.stdout
    assert "added as 1705.06730" in res.stdout and "no abstract, so not a corpus paper" in res.stdout
    corpus = load_corpus(out)
    assert corpus.papers.height == 251 and corpus.papers["paper_id"][-1] == "1705.06730"
    last = corpus.papers.row(-1, named=True)
    assert last["arxiv"] == "1705.06730" and last["url"] == "http://arxiv.org/abs/1705.06730"
    assert corpus.papers.filter(pl.col("paper_id") == "P06-1112")["full_text"][0]  # ACLSum's records kept whole
    # --json: every entry with its match
    res = runner.invoke(app, ["import", str(DATA / "mendeley.ris"), "--corpus", "aclsum", "--json"])
    report = json.loads(res.stdout)
    assert report["counts"]["url"] == 1 and [e["matched_by"] for e in report["entries"]] == ["url", "title", None, None]
    # refused: both an index and a corpus; --out not JSONL
    res = runner.invoke(app, ["import", str(DATA / "zotero.bib"), "--corpus", "aclsum", "--index", str(tmp_path)])
    assert res.exit_code == 2 and "not both" in res.output
    res = runner.invoke(app, ["import", str(DATA / "zotero.bib"), "--out", str(tmp_path / "x.csv")])
    assert res.exit_code == 2 and "*.jsonl" in res.output


def test_fixtures_hold_demo_papers_by_their_real_titles(aclsum) -> None:
    """The fixtures' ACLSum papers are named as the corpus names them (a check on the fixtures)."""
    titles = dict(zip(aclsum["paper_id"].to_list(), aclsum["title"].to_list()))
    assert titles["2021.acl-long.512"] == "Determinantal Beam Search"
    assert Path(DATA / "zotero.bib").read_text().count("@") == 5
