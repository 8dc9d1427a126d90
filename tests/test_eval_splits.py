"""Evaluation splits on the full cs768 corpus: determinism, selection rules and no leakage."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import cs768_path

from eval.splits import SplitConfig, prepare_split, read_queries, read_split
from eval.trec import read_qrels
from graft.errors import GraftError
from graphbuild.corpus import load_corpus


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    out = tmp_path_factory.mktemp("split") / "s"
    meta = prepare_split(cs768_path(), out, SplitConfig(seed=0, n_ooc=200, n_survey=10, n_survey_dev=5))
    return out, meta


def test_split_is_deterministic_from_the_seed(split, tmp_path) -> None:
    out, meta = split
    again = tmp_path / "again"
    meta2 = prepare_split(cs768_path(), again, SplitConfig(seed=0, n_ooc=200, n_survey=10, n_survey_dev=5))
    for rel in ("corpus.jsonl", "incorpus/queries.jsonl", "incorpus/qrels.txt", "incorpus/dev/corpus.jsonl",
                "incorpus/test/corpus.jsonl", "ooc/queries.jsonl", "ooc/qrels.txt", "survey/queries.jsonl",
                "survey/qrels.txt"):
        assert (out / rel).read_bytes() == (again / rel).read_bytes(), rel
    assert meta2["corpus_hash"] == meta["corpus_hash"] and meta2["source_hash"] == meta["source_hash"]
    other = prepare_split(cs768_path(), tmp_path / "seed1", SplitConfig(seed=1, n_ooc=200, n_survey=10, n_survey_dev=5))
    dev0 = {r["qid"] for r in read_queries(out, "incorpus", part="dev")}
    dev1 = {r["qid"] for r in read_queries(tmp_path / "seed1", "incorpus", part="dev")}
    assert dev0 != dev1
    assert other["source_hash"] == meta["source_hash"]


def test_a_stopped_prepare_is_finished_by_running_it_again(split, tmp_path, monkeypatch) -> None:
    """A split stopped while being written (here: over an earlier split) is not read as a split, and
    the same command run again finishes it."""
    import eval.splits as splits

    out, _ = split
    config = SplitConfig(seed=0, n_ooc=200, n_survey=10, n_survey_dev=5)
    target = tmp_path / "s"
    prepare_split(cs768_path(), target, SplitConfig(seed=1, n_ooc=200, n_survey=10, n_survey_dev=5))

    def stop(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(splits, "write_qrels", stop)
    with pytest.raises(KeyboardInterrupt):
        prepare_split(cs768_path(), target, config)
    monkeypatch.undo()
    assert (target / "corpus.jsonl").read_bytes() == (out / "corpus.jsonl").read_bytes()  # seed 0's, half written
    with pytest.raises(GraftError, match="was stopped while writing this split; run it again"):
        read_split(target)
    prepare_split(cs768_path(), target, config)
    assert read_split(target)["params"]["seed"] == 0 and not (target / splits.IN_PROGRESS).exists()
    for rel in ("incorpus/queries.jsonl", "incorpus/qrels.txt", "ooc/qrels.txt", "survey/qrels.txt"):
        assert (target / rel).read_bytes() == (out / rel).read_bytes(), rel


def test_holdouts_never_reach_the_reduced_corpus(split) -> None:
    out, meta = split
    corpus = _jsonl(out / "corpus.jsonl")
    kept = {r["id"] for r in corpus}
    ooc = read_queries(out, "ooc")
    survey = read_queries(out, "survey")
    held = {r["paper_id"] for r in ooc} | {r["paper_id"] for r in survey}
    assert len(ooc) == 200 and len(survey) == 15
    assert not held & kept
    assert not {r["paper_id"] for r in ooc} & {r["paper_id"] for r in survey}
    assert all(set(r["references"]) <= kept for r in corpus)  # no edge to a held-out paper survives
    assert meta["counts"]["corpus_papers"] == len(kept) == 6545 - 215
    assert meta["counts"]["survey"] == 10 and meta["counts"]["survey_dev"] == 5
    assert read_split(out)["corpus_hash"] == load_corpus(out / "corpus.jsonl").content_hash()
    # the gold lists: references into the reduced corpus, with the minimum sizes
    source = {r["id"]: r for r in map(json.loads, gzip.open(cs768_path(), "rt"))}
    ooc_gold, survey_gold = read_qrels(out / "ooc" / "qrels.txt"), read_qrels(out / "survey" / "qrels.txt")
    for r in ooc:
        assert ooc_gold[r["qid"]] == set(source[r["paper_id"]]["references"]) & kept
        assert len(ooc_gold[r["qid"]]) >= 3
        assert r["title"] == source[r["paper_id"]]["title"]
    for r in survey:
        assert len(survey_gold[r["qid"]]) >= 20 and r["n_references"] == len(survey_gold[r["qid"]])
    # newest first: no remaining citing paper with enough references is newer than the oldest hold-out
    oldest = min(source[r["paper_id"]]["year"] for r in ooc)
    years = sorted((source[p]["year"] for p in kept), reverse=True)
    assert oldest >= years[len(years) // 4]


def test_survey_parts_dev_for_tuning_test_unchanged_by_it(split, tmp_path) -> None:
    from eval.survey_suite import read_survey_split

    out, _ = split
    test, test_gold = read_survey_split(out)  # the test part by default
    dev, dev_gold = read_survey_split(out, "dev")
    assert [q["split"] for q in test] == ["test"] * 10 and [q["split"] for q in dev] == ["dev"] * 5
    assert not {q["qid"] for q in test} & {q["qid"] for q in dev}
    assert set(test_gold) == {q["qid"] for q in test} and set(dev_gold) == {q["qid"] for q in dev}
    assert len(read_survey_split(out, None)[0]) == 15
    # the dev hold-outs are drawn after the test ones: without them the test part is the same papers
    prepare_split(cs768_path(), tmp_path / "nodev", SplitConfig(seed=0, n_ooc=200, n_survey=10, n_survey_dev=0))
    alone, _ = read_survey_split(tmp_path / "nodev")
    assert [q["qid"] for q in alone] == [q["qid"] for q in test]
    assert read_survey_split(tmp_path / "nodev", "dev")[0] == []
    # hold-outs written without parts (older splits) read as test
    rows = [{k: v for k, v in q.items() if k != "split"} for q in alone]
    (tmp_path / "nodev" / "survey" / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [q["qid"] for q in read_survey_split(tmp_path / "nodev")[0]] == [q["qid"] for q in test]


def test_incorpus_gold_is_the_citation_neighbourhood(split) -> None:
    out, meta = split
    corpus = _jsonl(out / "corpus.jsonl")
    nbrs: dict[str, set[str]] = {r["id"]: set() for r in corpus}
    for r in corpus:
        for c in r["references"]:
            nbrs[r["id"]].add(c)
            nbrs[c].add(r["id"])
    gold = read_qrels(out / "incorpus" / "qrels.txt")
    queries = read_queries(out, "incorpus")
    eligible = {p for p, n in nbrs.items() if len(n) >= 5}
    assert {q["qid"] for q in queries} == set(gold) and set(gold) < eligible
    assert len(queries) == 600 == meta["counts"]["incorpus_dev"] + meta["counts"]["incorpus_test"]
    for q in queries:
        assert gold[q["qid"]] == nbrs[q["paper_id"]]
    dev = [q for q in queries if q["split"] == "dev"]
    assert abs(len(dev) - len(queries) / 2) <= 1
    for part in ("dev", "test"):  # one part's qrels, for `graft eval score` of that part's run
        assert read_qrels(out / "incorpus" / f"qrels.{part}.txt") == {
            q["qid"]: gold[q["qid"]] for q in queries if q["split"] == part}


def test_each_incorpus_part_has_a_corpus_without_its_queries_gold_links(split) -> None:
    """Leak-free: a part's corpus is the split's corpus less every citation link of the part's
    queries (their gold, either way), with every paper and text kept; the other links stay."""
    from eval.splits import part_corpus

    out, meta = split
    corpus = _jsonl(out / "corpus.jsonl")
    links = {(r["id"], c) for r in corpus for c in r["references"]}
    gold = read_qrels(out / "incorpus" / "qrels.txt")
    assert meta["counts"]["citation_links"] == len(links)
    for part in ("dev", "test"):
        mine = {q["qid"] for q in read_queries(out, "incorpus", part=part)}
        records = _jsonl(part_corpus(out, part))
        assert [(r["id"], r["title"], r["abstract"]) for r in records] == [
            (r["id"], r["title"], r["abstract"]) for r in corpus]
        kept = {(r["id"], c) for r in records for c in r["references"]}
        assert kept == {(a, b) for a, b in links if a not in mine and b not in mine}
        for q in mine:  # no gold pair survives, either way
            assert not any((q, g) in kept or (g, q) in kept for g in gold[q])
        hidden = meta["incorpus_parts"][part]["hidden_links"]
        assert hidden == len(links) - len(kept) == meta["counts"][f"incorpus_{part}_hidden_links"]
        assert 0 < hidden < 0.25 * len(links)
        assert meta["incorpus_parts"][part]["corpus_hash"] == load_corpus(part_corpus(out, part)).content_hash()
    other = {q["qid"] for q in read_queries(out, "incorpus", part="dev")}
    test_links = {(r["id"], c) for r in _jsonl(part_corpus(out, "test")) for c in r["references"]}
    assert any(a in other or b in other for a, b in test_links)  # dev queries keep theirs in the test corpus


def test_a_corpus_with_full_text_keeps_it_in_the_split(tmp_path) -> None:
    """The facet extractor reads full text: the split's corpus keeps it, so its index is the one
    the corpus would give (and another index of the corpus can lend its facets)."""
    records = [json.loads(line) for line in gzip.open(cs768_path(), "rt")][:300]
    for r in records[::2]:
        r["full_text"] = f"Introduction. {r['abstract']} Conclusion."
    corpus = tmp_path / "ft.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    prepare_split(corpus, tmp_path / "s", SplitConfig(n_ooc=0, n_survey=0, n_survey_dev=0, incorpus_min_neighbours=1))
    given = {r["id"]: r.get("full_text") for r in records}
    kept = _jsonl(tmp_path / "s" / "corpus.jsonl")
    assert kept and all(r.get("full_text") == given[r["id"]] for r in kept)
    assert any("full_text" in r for r in kept) and any("full_text" not in r for r in kept)


def test_bad_split_inputs_are_clear_errors(tmp_path) -> None:
    with pytest.raises(GraftError, match="graft eval prepare"):
        read_split(tmp_path)
    with pytest.raises(GraftError, match="dev share"):
        SplitConfig(dev_share=1.5)
    with pytest.raises(GraftError, match="n_survey_dev"):
        SplitConfig(n_survey_dev=-1)
    with pytest.raises(GraftError, match="not found"):
        prepare_split(tmp_path / "missing.jsonl", tmp_path / "out")
    with pytest.raises(GraftError, match="incorpus_min_neighbours = 0 must be >= 1"):
        SplitConfig(incorpus_min_neighbours=0)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(GraftError, match="a-file is a file"):
        prepare_split(cs768_path(), tmp_path / "a-file")
    with pytest.raises(GraftError, match="split lies under .*a-file, which is a file"):
        prepare_split(cs768_path(), tmp_path / "a-file" / "split")
    with pytest.raises(GraftError, match="seed -1 must be an integer >= 0"):
        SplitConfig(seed=-1)
    with pytest.raises(GraftError, match="incorpus_queries = -1 must be >= 0"):
        SplitConfig(incorpus_queries=-1)
    # the corpus itself, or other files, are never written over
    own = tmp_path / "own"
    own.mkdir()
    (own / "corpus.jsonl").write_bytes(gzip.open(cs768_path()).read())
    before = (own / "corpus.jsonl").read_bytes()
    for corpus in (own / "corpus.jsonl", Path("aclsum")):
        with pytest.raises(GraftError, match="holds the corpus .*write the split into another folder|holds files but "
                                             "no split"):
            prepare_split(corpus, own)
    assert (own / "corpus.jsonl").read_bytes() == before and sorted(p.name for p in own.iterdir()) == ["corpus.jsonl"]


def test_damaged_split_files_are_named(split, tmp_path) -> None:
    import shutil

    out, _ = split
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    old = json.loads((copy / "split.json").read_text())
    (copy / "split.json").write_text(json.dumps({**old, "format_version": 1}))
    with pytest.raises(GraftError, match="v1 is not 'graft-eval-split' v2 \\(a split of the old in-corpus protocol, "
                                         "whose index holds the queries' gold links\\); re-run `graft eval prepare`"):
        read_split(copy)
    for text, message in (('{"format": ', "cannot be read as JSON"), ("[1, 2]", "expected a JSON object, got list")):
        (copy / "split.json").write_text(text)
        with pytest.raises(GraftError, match=message):
            read_split(copy)
    queries = copy / "ooc" / "queries.jsonl"
    lines = queries.read_text().splitlines()
    for bad, message in (("notjson", "line 3: invalid JSON"), ("[]", "line 3: not a query record"),
                         ('{"q": "x", "paper_id": "y"}', "line 3: not a query record")):
        queries.write_text("\n".join(lines[:2] + [bad] + lines[2:]) + "\n")
        with pytest.raises(GraftError, match=message):
            read_queries(copy, "ooc")


@pytest.mark.slow
def test_skip_bad_leaves_bad_corpus_records_out_of_the_split(tmp_path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    with gzip.open(cs768_path(), "rt", encoding="utf-8") as fh:
        corpus.write_text('{"id": "record-without-abstract", "title": "T"}\n' + fh.read(), encoding="utf-8")
    with pytest.raises(GraftError, match="line 1: missing 'abstract'"):
        prepare_split(corpus, tmp_path / "s", SplitConfig(n_ooc=20, n_survey=0, n_survey_dev=0))
    meta = prepare_split(corpus, tmp_path / "s", SplitConfig(n_ooc=20, n_survey=0, n_survey_dev=0), skip_bad=True)
    assert meta["counts"]["skipped_records"] == 1
    assert "record-without-abstract" not in {r["id"] for r in _jsonl(tmp_path / "s" / "corpus.jsonl")}
    assert len(_jsonl(tmp_path / "s" / "corpus.jsonl")) == 6545 - 20
