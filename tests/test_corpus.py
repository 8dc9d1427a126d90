"""Corpus loaders: JSONL / JSONL.gz / Parquet validation, S2ORC JSON, ACLSum and the cs768 corpus."""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
from pathlib import Path

import polars as pl
import pytest

from graft.errors import InputValidationError
from graphbuild.corpus import (
    PAPER_COLUMNS,
    BadRecord,
    Corpus,
    acl_id_year_venue,
    load_aclsum,
    load_corpus,
)

CS768 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cs768" / "papers.jsonl.gz"

EXPECTED_SCHEMA = {
    "paper_id": pl.Utf8,
    "title": pl.Utf8,
    "abstract": pl.Utf8,
    "year": pl.Int32,
    "venue": pl.Utf8,
    "authors": pl.List(pl.Utf8),
    "references": pl.List(pl.Utf8),
    "full_text": pl.Utf8,
    "doi": pl.Utf8,
    "url": pl.Utf8,
    "arxiv": pl.Utf8,
}


def paper(pid: str, **fields) -> dict:
    rec = {"id": pid, "title": f"Title of {pid}", "abstract": f"Abstract of {pid}."}
    rec.update(fields)
    return rec


def write_jsonl(path: Path, records: list) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def edges(corpus: Corpus) -> set[tuple[str, str]]:
    return set(corpus.citations().iter_rows())


# --------------------------------------------------------------------------- valid JSONL


def test_valid_jsonl_keeps_file_order_and_drops_unknown_references(tmp_path):
    path = write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            paper("c", year=2020, venue="ACL", authors=["Ann Lee"], references=["a", "zz", "b", "a", "c"]),
            paper("a", references=["b", "missing1", "missing2"], full_text="Body."),
            "",  # a blank line is not a record
            paper("b"),
        ],
    )
    corpus = load_corpus(path)
    papers = corpus.papers
    assert papers.columns == list(PAPER_COLUMNS)
    assert dict(papers.schema) == EXPECTED_SCHEMA
    assert papers["paper_id"].to_list() == ["c", "a", "b"]  # file order = node index
    assert papers["references"].to_list() == [["a", "b"], ["b"], []]
    assert papers["year"].to_list() == [2020, None, None]
    assert papers["venue"].to_list() == ["ACL", None, None]
    assert papers["authors"].to_list() == [["Ann Lee"], [], []]
    assert papers["full_text"].to_list() == [None, "Body.", None]
    report = corpus.report
    assert (report.n_read, report.n_loaded, report.skipped) == (3, 3, [])
    assert report.dropped_references == 3  # zz, missing1, missing2
    assert report.resolved_references == 3
    assert report.self_references == 1
    assert report.duplicate_references == 1
    d = report.as_dict()
    assert d["source"] == str(path) and d["dropped_references"] == 3
    json.dumps(d)  # JSON-ready for the manifest


def test_citations_match_reference_lists(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            paper("a", references=["b", "c"]),
            paper("b", references=["c"]),
            paper("c"),
            paper("d", references=["a"]),
        ],
    )
    corpus = load_corpus(path)
    cites = corpus.citations()
    assert cites.columns == ["citing", "cited"]
    assert dict(cites.schema) == {"citing": pl.Utf8, "cited": pl.Utf8}
    expected = [
        (pid, ref) for pid, refs in corpus.papers.select("paper_id", "references").iter_rows() for ref in refs
    ]
    assert list(cites.iter_rows()) == expected == [("a", "b"), ("a", "c"), ("b", "c"), ("d", "a")]
    assert cites.height == corpus.report.resolved_references


def test_year_and_authors_are_normalised(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            paper(
                "a",
                year="2019",
                authors=[{"first": "Ada", "middle": ["K."], "last": "Lovelace", "suffix": ""}],
            ),
            paper(
                "b", year=2018.0, authors=["  Alan   Turing ", {"first": "", "middle": [], "last": "Hopper"}]
            ),
            paper("c", year=None, authors=None, references=None, venue="", full_text=""),
        ],
    )
    papers = load_corpus(path).papers
    assert papers["year"].to_list() == [2019, 2018, None]
    assert papers["authors"].to_list() == [["Ada K. Lovelace"], ["Alan Turing", "Hopper"], []]
    assert papers["venue"].to_list() == [None, None, None]  # an empty venue is no venue
    assert papers["full_text"].to_list() == [None, None, None]


def test_gzip_and_parquet_load_the_same_corpus(tmp_path):
    records = [paper("a", year=2001, authors=["X"], references=["b", "nope"]), paper("b", year=2002)]
    plain = load_corpus(write_jsonl(tmp_path / "c.jsonl", records))
    gz_path = tmp_path / "c.jsonl.gz"
    with gzip.open(gz_path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    gz = load_corpus(gz_path)
    pq_path = tmp_path / "c.parquet"
    pl.DataFrame(records).write_parquet(pq_path)
    pq = load_corpus(pq_path)
    for other in (gz, pq):
        assert other.papers.equals(plain.papers)
        assert other.content_hash() == plain.content_hash()
        assert other.report.dropped_references == 1


# --------------------------------------------------------------------------- bad records


@pytest.mark.parametrize(
    ("bad", "field_text"),
    [
        ({"title": "T", "abstract": "A"}, "missing 'id'"),
        ({"id": "x", "abstract": "A"}, "missing 'title'"),
        ({"id": "x", "title": "T"}, "missing 'abstract'"),
    ],
)
def test_missing_field_names_file_line_and_field(tmp_path, bad, field_text):
    path = write_jsonl(tmp_path / "corpus.jsonl", [paper("a"), paper("b"), bad])
    with pytest.raises(InputValidationError) as info:
        load_corpus(path)
    msg = str(info.value)
    assert msg.startswith("corpus.jsonl line 3: ")
    assert field_text in msg
    assert "(required: id, title, abstract)" in msg
    assert msg.endswith("pass --skip-bad to skip such records")

    corpus = load_corpus(path, skip_bad=True)
    assert corpus.papers["paper_id"].to_list() == ["a", "b"]
    assert corpus.report.skipped == [BadRecord(where="corpus.jsonl line 3", reason=field_text)]
    assert (corpus.report.n_read, corpus.report.n_loaded) == (3, 2)


def test_invalid_json_line(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [paper("a"), '{"id": "b", "title": ', paper("c"), "[1, 2]"])
    with pytest.raises(InputValidationError, match=r"^corpus\.jsonl line 2: invalid JSON"):
        load_corpus(path)
    corpus = load_corpus(path, skip_bad=True)
    assert corpus.papers["paper_id"].to_list() == ["a", "c"]
    assert [b.where for b in corpus.report.skipped] == ["corpus.jsonl line 2", "corpus.jsonl line 4"]
    assert "expected a JSON object" in corpus.report.skipped[1].reason


def test_duplicate_id_is_an_error_or_the_later_record_is_skipped(tmp_path):
    path = write_jsonl(
        tmp_path / "corpus.jsonl", [paper("a", title="First"), paper("b"), paper("a", title="Second")]
    )
    with pytest.raises(InputValidationError) as info:
        load_corpus(path)
    msg = str(info.value)
    assert msg.startswith("corpus.jsonl line 3: duplicate id 'a' (first at corpus.jsonl line 1)")
    assert "--skip-bad" in msg and "required:" not in msg  # the required fields are there

    corpus = load_corpus(path, skip_bad=True)
    assert corpus.papers["paper_id"].to_list() == ["a", "b"]
    assert corpus.papers["title"].to_list()[0] == "First"
    assert len(corpus.report.skipped) == 1
    assert corpus.report.skipped[0].where == "corpus.jsonl line 3"
    assert "duplicate id 'a'" in corpus.report.skipped[0].reason


@pytest.mark.parametrize("field_name", ["id", "title", "abstract"])
def test_empty_text_is_rejected(tmp_path, field_name):
    path = write_jsonl(tmp_path / "corpus.jsonl", [paper("a"), {**paper("b"), field_name: "   "}])
    with pytest.raises(InputValidationError, match=rf"^corpus\.jsonl line 2: empty '{field_name}'"):
        load_corpus(path)
    assert load_corpus(path, skip_bad=True).papers.height == 1


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"year": "nineteen"}, "year"),
        ({"year": True}, "year"),
        ({"authors": "Ann Lee"}, "authors"),
        ({"authors": [1, 2]}, "authors"),
        ({"references": "a"}, "references"),
        ({"references": [1.5, 2]}, "references"),
        ({"references": [True]}, "references"),
        ({"title": 5}, "title"),
        ({"venue": ["ACL"]}, "venue"),
    ],
)
def test_wrong_types_are_rejected(tmp_path, fields, field_name):
    path = write_jsonl(tmp_path / "corpus.jsonl", [paper("a", **fields)])
    with pytest.raises(InputValidationError) as info:
        load_corpus(path)
    msg = str(info.value)
    assert msg.startswith("corpus.jsonl line 1: ")
    assert f"'{field_name}' must be" in msg
    assert "pass --skip-bad" in msg


def test_parquet_errors_name_the_row(tmp_path):
    path = tmp_path / "corpus.parquet"
    pl.DataFrame({"id": ["a", "b"], "title": ["T", "T2"], "abstract": ["A", None]}).write_parquet(path)
    with pytest.raises(InputValidationError, match=r"^corpus\.parquet row 2: missing 'abstract'"):
        load_corpus(path)
    assert load_corpus(path, skip_bad=True).report.skipped[0].where == "corpus.parquet row 2"


def test_all_records_bad_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", ['{"id": "a"}'])
    with pytest.raises(InputValidationError, match="no papers loaded"):
        load_corpus(path, skip_bad=True)


# --------------------------------------------------------------------------- limit, formats


def test_limit_applies_before_reference_resolution(tmp_path):
    path = write_jsonl(
        tmp_path / "corpus.jsonl",
        ["not json", paper("a", references=["b", "d"]), paper("b", references=["c"]), paper("c"), paper("d")],
    )
    corpus = load_corpus(path, skip_bad=True, limit=2)
    assert corpus.papers["paper_id"].to_list() == ["a", "b"]
    assert corpus.papers["references"].to_list() == [["b"], []]
    assert corpus.report.dropped_references == 2  # d and c lie beyond the limit
    assert corpus.report.resolved_references == 1
    assert (corpus.report.n_read, corpus.report.n_loaded) == (3, 2)  # reading stops at the limit
    with pytest.raises(ValueError, match="limit"):
        load_corpus(path, limit=0)


def test_unknown_extension_and_missing_path(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text("id,title,abstract\n", encoding="utf-8")
    with pytest.raises(InputValidationError) as info:
        load_corpus(path)
    assert "corpus.csv" in str(info.value)
    for fmt in ("*.jsonl", "*.jsonl.gz", "*.parquet", "S2ORC"):
        assert fmt in str(info.value)
    with pytest.raises(InputValidationError, match="not found"):
        load_corpus(tmp_path / "nope.jsonl")


def test_content_hash_ignores_row_order_but_not_content(tmp_path):
    records = [paper("a", references=["b", "c"]), paper("b"), paper("c", authors=["Z"])]
    first = load_corpus(write_jsonl(tmp_path / "one.jsonl", records))
    again = load_corpus(write_jsonl(tmp_path / "two.jsonl", records))
    shuffled = load_corpus(write_jsonl(tmp_path / "three.jsonl", [records[2], records[0], records[1]]))
    edited = load_corpus(write_jsonl(tmp_path / "four.jsonl", [*records[:2], paper("c", authors=["Y"])]))
    h = first.content_hash()
    assert len(h) == 64 and int(h, 16) >= 0
    assert again.content_hash() == h
    assert shuffled.content_hash() == h
    assert edited.content_hash() != h


def test_identifiers_are_optional_and_leave_the_hash_of_a_corpus_without_them_as_it_was(tmp_path):
    """`doi`, `url` and `arxiv` load where a record has them; a corpus without any hashes as it did
    before the fields existed (the value below is the old serialisation's), so its indexes stay up
    to date; giving one changes the hash."""
    records = [{"id": "a", "title": "T a", "abstract": "A a", "references": ["b"]},
               {"id": "b", "title": "T b", "abstract": "A b", "year": 2020, "authors": ["Z Y"]}]
    plain = load_corpus(write_jsonl(tmp_path / "plain.jsonl", records))
    assert plain.content_hash() == "c5e78b15473c1e85dc1ca152b8106bea55de66b79ff71e57b135bdcf91ff2368"
    assert plain.papers["doi"].to_list() == [None, None]
    linked = load_corpus(write_jsonl(tmp_path / "linked.jsonl", [
        {**records[0], "doi": " 10.18653/v1/P17-1001 ", "url": "https://aclanthology.org/P17-1001"},
        {**records[1], "arxiv": "2106.04689v2"}]))
    assert linked.papers["doi"].to_list() == ["10.18653/v1/P17-1001", None]
    assert linked.papers["arxiv"].to_list() == [None, "2106.04689v2"]
    assert linked.content_hash() != plain.content_hash()
    with pytest.raises(InputValidationError, match="'doi' must be a string"):
        load_corpus(write_jsonl(tmp_path / "bad.jsonl", [{**records[1], "doi": 17}]))


# --------------------------------------------------------------------------- S2ORC


def s2orc_doc(
    title: str, *, bib_titles=(), abstract_paras=("An abstract.",), body=("Para one.", "Para two."), **top
):
    doc = {
        "paper_id": "2020",  # ACLSum's files carry junk here; the loader must use the file name
        "title": title,
        "authors": [{"first": "Ann", "middle": ["B."], "last": "Lee", "suffix": ""}],
        "year": "",
        "venue": None,
        "abstract": "Top-level abstract.",
        "pdf_parse": {
            "abstract": [{"text": t} for t in abstract_paras],
            "body_text": [{"text": t, "section": "Introduction"} for t in body],
            "bib_entries": {f"BIBREF{i}": {"ref_id": f"b{i}", "title": t} for i, t in enumerate(bib_titles)},
        },
    }
    doc.update(top)
    return doc


def test_s2orc_directory_resolves_bib_entries_by_normalised_title(tmp_path):
    folder = tmp_path / "s2orc"
    folder.mkdir()
    docs = {
        "P06-1112": s2orc_doc(
            "Parsing with Trees",
            bib_titles=["PARSING: with trees!", "Some unknown paper", "", "Neural  Tagging"],
        ),
        "2020.aacl-main.33": s2orc_doc("Neural Tagging", abstract_paras=(), year=2019, venue="AACL-IJCNLP"),
        "W99-0615": s2orc_doc("Old Workshop Paper", bib_titles=["Neural tagging"], body=()),
    }
    for stem, doc in docs.items():
        (folder / f"{stem}.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "notes.txt").write_text("ignored", encoding="utf-8")

    corpus = load_corpus(folder)
    papers = corpus.papers
    assert dict(papers.schema) == EXPECTED_SCHEMA
    assert papers["paper_id"].to_list() == ["2020.aacl-main.33", "P06-1112", "W99-0615"]  # sorted names
    assert papers["references"].to_list() == [[], ["2020.aacl-main.33"], ["2020.aacl-main.33"]]
    assert papers["year"].to_list() == [2019, 2006, 1999]  # JSON year first, else from the id
    assert papers["venue"].to_list() == ["AACL-IJCNLP", "ACL", "Workshop"]
    assert papers["abstract"].to_list() == ["Top-level abstract.", "An abstract.", "An abstract."]
    assert papers["full_text"].to_list() == ["Para one.\n\nPara two.", "Para one.\n\nPara two.", None]
    assert papers["authors"].to_list()[0] == ["Ann B. Lee"]
    report = corpus.report
    assert report.resolved_references == 2
    assert report.self_references == 1  # P06-1112 cites its own title
    assert report.dropped_references == 2  # the unknown title and the entry without a title
    assert report.source == str(folder)

    single = load_corpus(folder / "P06-1112.json")
    assert single.papers["paper_id"].to_list() == ["P06-1112"]
    assert single.papers["references"].to_list() == [[]]
    assert single.report.dropped_references == 3

    (folder / "doc 0.json").write_text(json.dumps(s2orc_doc("Spaced")), encoding="utf-8")
    with pytest.raises(InputValidationError, match="an S2ORC document's id is its file name: rename the file"):
        load_corpus(folder)


def test_integer_ids_and_references_are_read_as_strings(tmp_path):
    recs = [{**paper(str(i)), "id": i, "references": [j for j in (1, 2, 3) if j != i]} for i in (1, 2, 3)]
    for path in (write_jsonl(tmp_path / "ints.jsonl", recs), tmp_path / "ints.parquet"):
        if path.suffix == ".parquet":
            pl.DataFrame(recs).write_parquet(path)  # id: i64, references: list[i64]
        corpus = load_corpus(path)
        assert corpus.papers["paper_id"].to_list() == ["1", "2", "3"]
        assert edges(corpus) == {(a, b) for a in "123" for b in "123" if a != b}


def test_an_id_with_spaces_is_refused_as_it_could_not_be_written_to_a_run_file(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [paper("a"), paper("paper one"), paper("tab\there")])
    with pytest.raises(InputValidationError, match=r"^corpus\.jsonl line 2: 'id' 'paper one' must be one word"):
        load_corpus(path)
    corpus = load_corpus(path, skip_bad=True)
    assert corpus.papers["paper_id"].to_list() == ["a"]
    assert [b.where for b in corpus.report.skipped] == ["corpus.jsonl line 2", "corpus.jsonl line 3"]


def test_a_damaged_gzip_file_is_named(tmp_path):
    plain = write_jsonl(tmp_path / "c.jsonl", [paper(f"p{i}", abstract=f"Abstract {i} " * 40) for i in range(60)])
    data = bytearray(gzip.compress(plain.read_bytes()))
    for k in range(len(data) // 2, len(data) // 2 + 200):
        data[k] ^= 0x55
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(bytes(data))
    for skip_bad in (False, True):
        with pytest.raises(InputValidationError, match="damaged.jsonl.gz: cannot read the file"):
            load_corpus(damaged, skip_bad=skip_bad)


def test_s2orc_bad_file_names_the_file(tmp_path):
    folder = tmp_path / "s2orc"
    folder.mkdir()
    (folder / "A.json").write_text(json.dumps(s2orc_doc("Fine")), encoding="utf-8")
    (folder / "B.json").write_text(json.dumps(s2orc_doc("", abstract_paras=())), encoding="utf-8")
    (folder / "C.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(InputValidationError, match=r"^B\.json: empty 'title'"):
        load_corpus(folder)
    corpus = load_corpus(folder, skip_bad=True)
    assert corpus.papers["paper_id"].to_list() == ["A"]
    assert [b.where for b in corpus.report.skipped] == ["B.json", "C.json"]
    (folder / "B.json").unlink()
    (folder / "C.json").unlink()
    (folder / "D.json").mkdir()  # a folder named like a document is not one
    assert load_corpus(folder).papers["paper_id"].to_list() == ["A"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputValidationError, match=r"no \*\.json files"):
        load_corpus(empty)


def test_json_files_of_plain_records_keep_their_ids_and_references(tmp_path):
    records = [paper("a", references=["b", "zz"]), paper("b", references=["a"]), paper("c", references=["a", "b"])]
    array = tmp_path / "papers.json"
    array.write_text(json.dumps(records), encoding="utf-8")
    from_array = load_corpus(array)
    from_lines = load_corpus(write_jsonl(tmp_path / "papers.jsonl", records))
    assert from_array.papers.to_dicts() == from_lines.papers.to_dicts()
    assert from_array.report.dropped_references == 1  # "zz" is not in the corpus
    # one record per file, beside an S2ORC document whose bib entry names record "a" by title
    folder = tmp_path / "mixed"
    folder.mkdir()
    for rec in records:
        (folder / f"file-{rec['id']}.json").write_text(json.dumps(rec), encoding="utf-8")
    (folder / "S.json").write_text(json.dumps(s2orc_doc("Doc", bib_titles=["Title of a"])), encoding="utf-8")
    mixed = load_corpus(folder)
    refs = dict(zip(mixed.papers["paper_id"].to_list(), mixed.papers["references"].to_list()))
    assert refs == {"a": ["b"], "b": ["a"], "c": ["a", "b"], "S": ["a"]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([paper("a"), {"id": "b"}, 7]), encoding="utf-8")
    with pytest.raises(InputValidationError, match=r"^bad\.json item 2: missing 'title'"):
        load_corpus(bad)
    assert [b.where for b in load_corpus(bad, skip_bad=True).report.skipped] == ["bad.json item 2", "bad.json item 3"]


@pytest.mark.parametrize(
    ("paper_id", "expected"),
    [
        ("P06-1112", (2006, "ACL")),
        ("W99-0615", (1999, "Workshop")),
        ("D19-1001", (2019, "EMNLP")),
        ("Q13-1001", (2013, "TACL")),
        ("2020.aacl-main.33", (2020, "AACL")),
        ("2021.acl-long.57", (2021, "ACL")),
        ("2021.findings-emnlp.5", (2021, "Findings of EMNLP")),
        ("2106.04689v1", (None, None)),
        ("P06-1112x", (None, None)),
    ],
)
def test_acl_id_year_venue(paper_id, expected):
    assert acl_id_year_venue(paper_id) == expected


# --------------------------------------------------------------------------- real corpora


def test_aclsum_demo_corpus():
    corpus = load_aclsum()
    assert load_corpus(None).papers.equals(corpus.papers)
    assert load_corpus("aclsum").report.source == "aclsum"
    papers = corpus.papers
    assert papers.height == 250 and corpus.report.n_loaded == 250 and corpus.report.skipped == []
    assert dict(papers.schema) == EXPECTED_SCHEMA
    for column in ("title", "abstract", "full_text"):
        assert papers[column].null_count() == 0
        assert papers[column].str.strip_chars().str.len_chars().min() > 0, column

    spec = importlib.util.find_spec("aclsum")
    folder = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "paper_jsons"
    files = sorted(folder.glob("*.json"), key=lambda p: p.name)
    assert papers["paper_id"].to_list() == [f.stem for f in files]
    assert papers["year"].null_count() == 0
    assert 1990 <= papers["year"].min() and papers["year"].max() <= 2023
    assert papers["venue"].null_count() == 0

    # Oracle: every bibliography entry of every file is either kept, dropped or removed.
    n_bib = sum(len(json.loads(f.read_bytes())["pdf_parse"]["bib_entries"]) for f in files)
    report = corpus.report
    print(f"ACLSum: {report.resolved_references} resolved references of {n_bib} bib entries")
    assert report.resolved_references > 0
    assert (
        report.resolved_references
        + report.dropped_references
        + report.self_references
        + report.duplicate_references
        == n_bib
    )
    assert corpus.citations().height == report.resolved_references
    assert load_aclsum(limit=10).papers["paper_id"].to_list() == papers["paper_id"].to_list()[:10]


@pytest.mark.slow
@pytest.mark.skipif(
    not CS768.exists(), reason=f"cs768 corpus not found at {CS768} (../shared/data beside the repo)"
)
def test_cs768_corpus():
    start = time.perf_counter()
    corpus = load_corpus(CS768)
    seconds = time.perf_counter() - start
    print(f"cs768: loaded {corpus.papers.height} papers in {seconds:.2f}s")
    assert corpus.papers.height == 6545
    assert corpus.report.skipped == [] and corpus.report.dropped_references == 0
    assert corpus.citations().height == corpus.report.resolved_references == 30762
    assert corpus.papers["paper_id"].n_unique() == 6545
    assert seconds < 15  # "loads in a few seconds"; measured ~0.2 s
    assert load_corpus(CS768).content_hash() == corpus.content_hash()
