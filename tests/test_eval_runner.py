"""`graft eval` end to end on a citation-dense cs768 slice: split, build, runs, tables, re-scoring, CLI."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, cs768_path
from typer.testing import CliRunner

from eval.runner import RunOptions, load_queries, read_credits, read_labels, run_paths, run_suite, score_run
from eval.splits import SplitConfig, build_split_indexes, part_index, prepare_split, read_queries
from eval.trec import read_qrels, read_run
from graft.errors import GraftError
from graft.index import Index
from graphbuild.build import BuildConfig, build_index

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def stored(table, key):
    """(TREC run, credits, record) files behind a table's row (`table["runs"][key]`)."""
    trec = Path(table["runs"][key])
    return trec, trec.with_suffix(".credits.jsonl"), trec.with_suffix(".json")


def write_dense_slice(path, tmp_path, n_core: int = 40, n: int = 120):
    """The n_core most-cited cs768 papers plus the papers citing most of them (real records)."""
    records = [json.loads(line) for line in gzip.open(path, "rt")]
    cited = Counter(r for rec in records for r in rec["references"])
    core = {p for p, _ in cited.most_common(n_core)}
    citing = sorted((r for r in records if r["id"] not in core),
                    key=lambda r: (-len(set(r["references"]) & core), r["id"]))[: n - n_core]
    keep = core | {r["id"] for r in citing}
    out = tmp_path / "dense.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in records if r["id"] in keep))
    return out


SPLIT = SplitConfig(seed=0, n_ooc=10, n_survey=0, n_survey_dev=0, incorpus_queries=48)


def incorpus_index(split: Path) -> Path:
    """The leak-free index the in-corpus test part is answered from."""
    return part_index(split, "test")


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):
    tmp = tmp_path_factory.mktemp("evalrun")
    corpus = write_dense_slice(cs768_path(), tmp)
    split = tmp / "split"
    prepare_split(corpus, split, SPLIT)
    build_split_indexes(split, encoder=encoder)
    return corpus, split


def test_built_index_holds_no_out_of_corpus_query(built) -> None:
    _, split = built
    idx = Index.open(split / "index")
    held = {q["paper_id"] for q in read_queries(split, "ooc")}
    assert len(held) == 10
    assert not held & set(idx.paper_ids)
    assert not held & (set(idx.citations["citing"]) | set(idx.citations["cited"]))
    assert idx.manifest["corpus_hash"] == json.loads((split / "split.json").read_text())["corpus_hash"]


def test_incorpus_and_ooc_suites_write_runs_and_tables(built, encoder, tmp_path) -> None:
    _, split = built
    systems = ["bm25", "dense", "citation", "facet", "teacher"]
    opts = RunOptions(systems=systems, results_dir=tmp_path)
    table = run_suite(split, "incorpus", opts, encoder=encoder, command="graft eval run SPLIT")
    rows = {r["system"]: r for r in table["rows"]}
    assert list(rows) == systems
    n_test = len(read_queries(split, "incorpus", part="test"))
    assert table["meta"]["queries"] == n_test > 20
    for name, row in rows.items():
        if name == "citation":  # n/a leak-free (below)
            continue
        assert 0.0 <= row["R@20"] <= row["R@50"] <= 1.0, name
        assert row["correct@20"] >= 0
        # every number comes from the run file: re-scoring it gives the same recall
        trec = run_paths(split, "incorpus", name)[0]
        test_qrels = tmp_path / "test_qrels.txt"
        ids = {q["qid"] for q in read_queries(split, "incorpus", part="test")}
        test_qrels.write_text("".join(line + "\n" for line in (split / "incorpus" / "qrels.txt").read_text().splitlines()
                                      if line.split()[0] in ids))
        assert score_run(trec, test_qrels)["R@20"] == pytest.approx(row["R@20"])
    assert rows["teacher"]["R@20"] > 0.1
    # leak-free: the queries' citation links are hidden, so a citation-only ranking has nothing to go on
    assert rows["citation"]["R@20"] is None and any(n.startswith("citation: citation-only has nothing to rank")
                                                    for n in table["notes"])
    md = next(tmp_path.glob("eval_incorpus_*.md"))
    text = md.read_text()
    assert "graft eval run SPLIT" in text and table["meta"]["corpus_hash"][:16] in text and "| teacher |" in text
    assert ("Index build: heuristic facets (learned scorer) · top-K 20 · alpha 0.75 · beta 0.25 · title weight 0.35 · items read in context · encoder on torch"
            in text)  # the test's shared encoder runs torch
    saved = json.loads(next(tmp_path.glob("eval_incorpus_*.json")).read_text())
    assert saved["rows"][4]["R@20"] == pytest.approx(rows["teacher"]["R@20"])
    assert saved["meta"]["seed"] == 0 and "bm25s" in saved["meta"]["versions"]
    assert "onnxruntime" in saved["meta"]["versions"] and saved["meta"]["build"]["encoder_backend"] == "torch"

    # runs are reused unless forced
    meta_path = run_paths(split, "incorpus", "teacher")[2]
    created = json.loads(meta_path.read_text())["created"]
    run_suite(split, "incorpus", RunOptions(systems=["teacher"], results_dir=tmp_path), encoder=encoder)
    assert json.loads(meta_path.read_text())["created"] == created
    again = run_suite(split, "incorpus", RunOptions(systems=["teacher"], results_dir=tmp_path, limit=5), encoder=encoder)
    # a --limit run reads the stored full run, and its table is named for the cut
    assert again["meta"]["queries"] == 5 and json.loads(meta_path.read_text())["queries"] == n_test
    assert Path(again["files"][0]).name == f"eval_incorpus-first5_{md.name.split('_', 2)[2]}" and md.is_file()
    forced = run_suite(split, "incorpus", RunOptions(systems=["teacher"], results_dir=tmp_path, limit=5, force=True),
                       encoder=encoder)
    # forced: computed again for the 5 queries, into a file of its own; the full table's run stays
    first5 = run_paths(split, "incorpus", "teacher", first=5)
    assert forced["meta"]["queries"] == json.loads(first5[2].read_text())["queries"] == 5  # asked for
    assert forced["runs"]["teacher"] == str(first5[0]) and saved["runs"]["teacher"] == str(meta_path.with_suffix(".trec"))
    assert json.loads(meta_path.read_text())["created"] == created
    assert score_run(meta_path.with_suffix(".trec"), test_qrels)["R@20"] == pytest.approx(rows["teacher"]["R@20"])
    # the first-5 run serves the next limit run of 5, forced or not, without touching the full one
    assert run_suite(split, "incorpus", RunOptions(systems=["teacher"], results_dir=tmp_path, limit=3),
                     encoder=encoder)["runs"]["teacher"] == str(meta_path.with_suffix(".trec"))
    # a rebuilt graph over the same corpus (another build, e.g. other settings) is never scored with
    # the older graph's runs: the teacher is recomputed, bm25 (text only) is reused
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(split, rebuilt)
    manifest_file = incorpus_index(rebuilt) / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["stages"]["build"]["finished_at"] = "2000-01-01T00:00:00+00:00"
    manifest_file.write_text(json.dumps(manifest))
    stored = {"bm25": run_paths(rebuilt, "incorpus", "bm25"), "teacher": run_paths(rebuilt, "incorpus", "teacher")}
    before = {s: json.loads(p[2].read_text()) for s, p in stored.items()}
    # the same queries as runs on file (all test queries)
    run_suite(rebuilt, "incorpus", RunOptions(systems=["bm25", "teacher"], results_dir=tmp_path / "r"), encoder=encoder)
    after = {s: json.loads(p[2].read_text()) for s, p in stored.items()}
    # a run's metadata is rewritten only when the run is recomputed
    assert before["teacher"]["build"]["finished_at"] != "2000-01-01T00:00:00+00:00"
    assert after["teacher"]["build"]["finished_at"] == "2000-01-01T00:00:00+00:00"
    assert after["bm25"] == before["bm25"] and after["bm25"]["build"] is None

    # another index over the same split writes runs named for it; the split's own are untouched
    from eval.runner import index_key

    other = tmp_path / "other index"
    shutil.copytree(split / "index", other)
    key = index_key(split, other)
    assert key.startswith("other_index-") and index_key(split, split / "index") is None
    elsewhere = run_suite(split, "incorpus", RunOptions(systems=["teacher", "bm25"], index_dir=other,
                                                        results_dir=tmp_path / "other"), encoder=encoder)
    assert elsewhere["runs"]["teacher"] == str(run_paths(split, "incorpus", "teacher", index_key=key)[0])
    assert elsewhere["runs"]["bm25"] == str(run_paths(split, "incorpus", "bm25")[0])  # text only: the same run
    assert json.loads(meta_path.read_text())["created"] == created

    ooc = run_suite(split, "ooc", RunOptions(systems=["bm25", "dense", "citation", "teacher"], results_dir=tmp_path),
                    encoder=encoder)
    orow = {r["system"]: r for r in ooc["rows"]}
    assert orow["citation"]["R@20"] is None and any("citation" in n and "n/a" in n for n in ooc["notes"])
    assert orow["bm25"]["R@20"] > 0 and orow["teacher"]["R@20"] > 0
    assert ooc["meta"]["queries"] == 10
    # runs from the cached rows are reused only for rows made the same way (text coupling included)
    meta = {s: json.loads(run_paths(split, "ooc", s)[2].read_text()) for s in ("bm25", "teacher")}
    assert meta["teacher"]["ooc_rows"]["key"]["text_neighbours"] == 10 and meta["bm25"]["ooc_rows"] is None
    assert any("citation half: text coupling with its nearest papers" in n for n in ooc["notes"])
    assert not any("{" in n for n in ooc["notes"])


def test_tables_default_beside_the_split_and_systems_run_once(built, encoder) -> None:
    """Without --results the tables go to SPLITDIR/results (a quick run never replaces the
    repository's tables); a system named twice is one row."""
    _, split = built
    opts = RunOptions(systems=["bm25", "bm25"], limit=3)
    assert opts.systems == ["bm25"]
    table = run_suite(split, "incorpus", opts, encoder=encoder)
    assert [r["system"] for r in table["rows"]] == ["bm25"]
    assert [Path(f).parent for f in table["files"]] == [split / "results"] * 2
    md = Path(table["files"][0]).read_text()
    assert "Queries: 3 · gold pairs: " in md
    # each in-corpus part keeps its own runs: running dev leaves test's to be reused
    made = json.loads(stored(table, "bm25")[2].read_text())["created"]
    dev = run_suite(split, "incorpus", RunOptions(systems=["bm25"], limit=3, part="dev"), encoder=encoder)
    assert dev["runs"]["bm25"].endswith("runs/incorpus-dev-first3.bm25.trec")  # 3 of the dev part
    assert read_run(stored(dev, "bm25")[0]).keys() != read_run(stored(table, "bm25")[0]).keys()
    run_suite(split, "incorpus", opts, encoder=encoder)
    assert json.loads(stored(table, "bm25")[2].read_text())["created"] == made  # reused
    # ... and its own tables beside the test part's
    name = Path(table["files"][0]).name.split("_", 2)[2]
    assert Path(table["files"][0]).name == f"eval_incorpus-first3_{name}"  # 3 of the part's queries
    assert Path(dev["files"][0]).name == f"eval_incorpus-dev-first3_{name}"
    assert "part: dev" in Path(dev["files"][0]).read_text() and "part: test" in md


def test_a_limit_run_reads_a_stored_run_of_more_queries_instead_of_replacing_it(built, encoder, tmp_path) -> None:
    _, split = built
    for path in run_paths(split, "incorpus", "bm25"):
        path.unlink(missing_ok=True)
    full = run_suite(split, "incorpus", RunOptions(systems=["bm25"], results_dir=tmp_path), encoder=encoder)
    trec, _, meta_path = run_paths(split, "incorpus", "bm25")
    stored_bytes, meta = trec.read_bytes(), json.loads(meta_path.read_text())
    n = full["meta"]["queries"]
    assert n > 4 and meta["queries"] == len(meta["qids"]) == n
    short = run_suite(split, "incorpus", RunOptions(systems=["bm25"], limit=4, results_dir=tmp_path), encoder=encoder)
    assert trec.read_bytes() == stored_bytes and json.loads(meta_path.read_text()) == meta  # not replaced
    first4 = {q.qid for q in load_queries(split, "incorpus", "test", 4)}
    qrels = read_qrels(split / "incorpus" / "qrels.txt")
    run = read_run(trec)
    expected = sum(len(set(d for d, _ in run.get(q, [])[:20]) & set(qrels[q])) / len(qrels[q]) for q in first4) / 4
    row = short["rows"][0]
    assert short["meta"]["queries"] == 4 and row["R@20"] == pytest.approx(expected)
    assert row["seconds"] == pytest.approx(meta["seconds"] * 4 / n, abs=0.01)
    assert f"bm25: read from its stored run of {n} queries (seconds prorated)" in short["notes"]
    # `graft eval score --limit 4` of the stored run gives the short table's figures
    qrels_test = split / "incorpus" / "qrels.test.txt"
    assert score_run(trec, qrels_test, limit=4)["R@20"] == pytest.approx(row["R@20"])
    assert score_run(trec, qrels_test)["R@20"] == pytest.approx(full["rows"][0]["R@20"])
    # a run whose record names another corpus than the qrels' split is refused
    other = tmp_path / "other.trec"
    other.write_bytes(stored_bytes)
    other.with_suffix(".json").write_text(json.dumps({**meta, "corpus_hash": "0123456789abcdef"}))
    with pytest.raises(GraftError, match="was made on another corpus .*0123456789ab.* than the split of"):
        score_run(other, qrels_test)
    with pytest.raises(GraftError, match="--limit 0 must be >= 1"):
        score_run(trec, qrels_test, limit=0)
    # a run written without its qids serves a subset of the queries its file answers
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "qids"}))
    again = run_suite(split, "incorpus", RunOptions(systems=["bm25"], limit=4, results_dir=tmp_path), encoder=encoder)
    assert again["rows"][0]["R@20"] == row["R@20"] and trec.read_bytes() == stored_bytes
    # another corpus's run is not read for a subset: the 4 queries are computed into a file of their own
    meta_path.write_text(json.dumps({**meta, "corpus_hash": "another"}))
    own = run_suite(split, "incorpus", RunOptions(systems=["bm25"], limit=4, results_dir=tmp_path), encoder=encoder)
    assert json.loads(stored(own, "bm25")[2].read_text())["queries"] == 4 and own["runs"]["bm25"] != str(trec)
    assert json.loads(meta_path.read_text())["corpus_hash"] == "another" and trec.read_bytes() == stored_bytes


def test_attribution_suite_checks_credits_against_edges(built, encoder, tmp_path) -> None:
    _, split = built
    table = run_suite(split, "attribution", RunOptions(systems=["bm25", "teacher"], results_dir=tmp_path),
                      encoder=encoder)
    rows = {(r["system"], r["setting"]): r for r in table["rows"]}
    assert set(rows) == {("teacher", "incorpus"), ("teacher", "ooc")}
    head = Path(table["files"][0]).read_text()
    assert f"Queries: incorpus {table['meta']['queries']['incorpus']}, ooc 10" in head  # not a Python dict
    for row in rows.values():
        assert row["credits"] == row["1-hop credits"] + row["2-hop credits"] > 0
        # a one-hop credit is a direct edge of the walked graph; a two-hop one has none by construction
        assert row["1-hop"] == 1.0
        assert row["2-hop credits"] == 0 or row["2-hop"] == 0.0
        assert row["precision"] == pytest.approx(row["1-hop credits"] / row["credits"])
        # the label names direct facets first, so it is never less right than the credits as a whole
        assert row["label precision"] >= row["precision"] and 1 <= row["label facets / hit"] <= 4
    credits = read_credits(run_paths(split, "incorpus", "teacher")[1])
    assert all(set(f) <= {"problem", "method", "result", "contribution"} for hits in credits.values() for _, f in hits)
    labels = read_labels(run_paths(split, "incorpus", "teacher")[1])
    for qid, hits in credits.items():  # a label names credited facets, direct ones whenever the hit has one
        assert len(labels[qid]) == len(hits)
        for (_, facets), named in zip(hits, labels[qid]):
            assert named and set(named) <= set(facets)
            if 1 in facets.values():
                assert all(facets[f] == 1 for f in named)
    assert any("bm25" in n for n in table["notes"])


def test_attribution_suite_without_queries_on_one_side_or_both(built, encoder, tmp_path) -> None:
    """A split without out-of-corpus queries is scored in corpus alone (a note says so, no empty
    run file); one without queries on either side is refused, as the retrieval suites refuse it."""
    _, built_split = built
    split = tmp_path / "split"
    shutil.copytree(built_split, split, ignore=shutil.ignore_patterns("runs", "results"))
    (split / "ooc" / "queries.jsonl").write_text("")
    opts = RunOptions(systems=["teacher"], index_dir=built_split / "index", limit=4, results_dir=tmp_path / "res")
    table = run_suite(split, "attribution", opts, encoder=encoder)
    assert [r["setting"] for r in table["rows"]] == ["incorpus"] and "ooc: the split has no queries here" in table["notes"]
    assert not list((split / "runs").glob("ooc.*"))
    (split / "incorpus" / "queries.jsonl").write_text("")
    with pytest.raises(GraftError, match="has no in-corpus .part test. or out-of-corpus queries"):
        run_suite(split, "attribution", opts, encoder=encoder)


def test_teacher_with_the_feedback_pass_in_corpus(built, encoder, tmp_path, monkeypatch) -> None:
    """teacher-fb: in corpus, the teacher over the rows with the feedback pass; out of corpus not
    applicable (the teacher's rows have the pass there); its credits are attributed."""
    from graft.external import CorpusScorer

    _, split = built
    opts = RunOptions(systems=["teacher", "teacher-fb"], results_dir=tmp_path, limit=12)
    table = run_suite(split, "incorpus", opts, encoder=encoder)
    rows = {r["system"]: r for r in table["rows"]}
    assert 0.0 < rows["teacher-fb"]["R@20"] <= rows["teacher-fb"]["R@50"] <= 1.0
    idx = Index.open(incorpus_index(split))
    run = read_run(stored(table, "teacher-fb")[0])
    scorer = CorpusScorer(idx, feedback=3, citation_weight=0)
    queries = load_queries(split, "incorpus", "test", 12)
    assert len(run) == len(queries) == 12
    for q in queries:
        want = [h.paper_id for h in scorer.query_paper(q.paper_id, k=20).hits]
        assert [d for d, _ in run[q.qid]][:20] == want
    assert run != read_run(stored(table, "teacher")[0])
    meta = json.loads(stored(table, "teacher-fb")[2].read_text())
    assert meta["feedback"] == 3
    # another R is another run: not reused
    monkeypatch.setattr("eval.runner._feedback_stamp", lambda: 5)
    run_suite(split, "incorpus", RunOptions(systems=["teacher-fb"], results_dir=tmp_path, limit=12), encoder=encoder)
    assert json.loads(stored(table, "teacher-fb")[2].read_text())["feedback"] == 5
    monkeypatch.undo()
    ooc = run_suite(split, "ooc", RunOptions(systems=["teacher-fb"], results_dir=tmp_path), encoder=encoder)
    assert ooc["rows"][0]["R@20"] is None and any("teacher-fb" in n and "already" in n for n in ooc["notes"])
    att = run_suite(split, "attribution", RunOptions(systems=["teacher-fb"], results_dir=tmp_path, limit=12),
                    encoder=encoder)
    rows = {(r["system"], r["setting"]): r for r in att["rows"]}
    assert set(rows) == {("teacher-fb", "incorpus")} and 0.0 < rows[("teacher-fb", "incorpus")]["precision"] <= 1.0


def test_teacher_with_the_citation_channel(built, encoder, tmp_path, monkeypatch) -> None:
    """teacher-cite: `graft query`'s teacher with the citation channel, in corpus (stored rows) and
    out of corpus (the text-only rows); its credits are facets only; a change of W is another run."""
    from eval.systems import EvalContext
    from graft.fusion import CITATION_WEIGHT

    _, split = built
    opts = RunOptions(systems=["teacher", "teacher-cite"], results_dir=tmp_path, limit=12)
    table = run_suite(split, "incorpus", opts, encoder=encoder)
    rows = {r["system"]: r for r in table["rows"]}
    assert 0.0 < rows["teacher-cite"]["R@20"] <= rows["teacher-cite"]["R@50"] <= 1.0
    idx = Index.open(incorpus_index(split))
    searcher = idx.searcher(retriever="teacher")  # graft query --paper's teacher: stored rows, the channel at W
    run = read_run(stored(table, "teacher-cite")[0])
    for q in load_queries(split, "incorpus", "test", 12):
        result = searcher.paper(q.paper_id)
        assert [d for d, _ in run[q.qid]][:20] == [h.paper_id for h in result.hits]
    assert any(h.citation is not None for h in result.hits)
    assert run != read_run(stored(table, "teacher")[0])
    meta = json.loads(stored(table, "teacher-cite")[2].read_text())
    assert meta["citation"] == {"weight": CITATION_WEIGHT, "first": 3, "keep": 3}
    credits = read_credits(stored(table, "teacher-cite")[1])
    assert all(set(f) <= {"problem", "method", "result", "contribution"} for hits in credits.values() for _, f in hits)
    att = run_suite(split, "attribution", RunOptions(systems=["teacher", "teacher-cite"], results_dir=tmp_path,
                                                     limit=12), encoder=encoder)
    rows = {(r["system"], r["setting"]): r for r in att["rows"]}
    assert rows[("teacher", "incorpus")]["hits without a facet credit"] == 0.0
    top = [f for hits in credits.values() for _, f in hits[:20]]  # the attribution suite's top-20 hits
    assert rows[("teacher-cite", "incorpus")]["hits without a facet credit"] == pytest.approx(
        sum(not f for f in top) / len(top))

    ooc = run_suite(split, "ooc", RunOptions(systems=["teacher-cite"], results_dir=tmp_path, limit=5),
                    encoder=encoder)
    assert ooc["rows"][0]["R@20"] is not None
    main = Index.open(split / "index")  # out of corpus: the split's own index
    ctx, searcher = EvalContext(main, encoder=encoder, split_dir=split), main.searcher(retriever="teacher")
    run = read_run(stored(ooc, "teacher-cite")[0])
    for q in load_queries(split, "ooc", "test", 5):
        want = searcher.rows(ctx.ooc_rows(q)[0], query_id=q.qid)
        assert [d for d, _ in run[q.qid]][:20] == [h.paper_id for h in want.hits]
    monkeypatch.setattr("eval.runner._citation_stamp", lambda: {"weight": 1.0, "first": 3, "keep": 3})
    run_suite(split, "incorpus", RunOptions(systems=["teacher-cite"], results_dir=tmp_path, limit=12), encoder=encoder)
    assert json.loads(stored(table, "teacher-cite")[2].read_text())["citation"]["weight"] == 1.0


def test_graft_pipeline_check_with_a_tiny_model(built, encoder, tmp_path, monkeypatch) -> None:
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    _, split = built
    index = tmp_path / "index"
    shutil.copytree(split / "index", index)
    train_index(index, TrainConfig(max_steps=4, lr=2e-3, save_every_steps=0, logging_steps=2), base_model="tiny")
    opts = RunOptions(systems=["graft", "graft-rrf", "graft-walk", "graft-naive", "graft-cite", "graft-text"],
                      index_dir=index,
                      limit=2, beams=2,
                      results_dir=tmp_path / "res")
    table = run_suite(split, "incorpus", opts, encoder=encoder)
    rows = {r["system"]: r for r in table["rows"]}
    assert all(rows[s]["R@20"] is not None for s in ("graft", "graft-rrf", "graft-walk", "graft-cite"))
    assert any("graft, graft-rrf, graft-walk, graft-cite decode each query once" in n for n in table["notes"])
    assert rows["graft-naive"]["R@20"] is None and any("--naive-index" in n for n in table["notes"])
    assert rows["graft-text"]["R@20"] is None and any("graft-text: the text channel is for papers outside" in n
                                                      for n in table["notes"])
    assert "pipeline check" in table["meta"]["label"]
    assert "pipeline check" in next((tmp_path / "res").glob("eval_incorpus*.md")).read_text()
    # the model's note carries its prompt check as `graft train` recorded it
    from graft.check import PromptCheck

    check = PromptCheck.from_dict(Index.open(index).manifest["stages"]["train"]["check"])
    note = next(n for n in table["notes"] if n.startswith("model: "))
    assert note.endswith(f"4 steps); prompt check: {check.distinct_top_beams} distinct top DocIDs of 32 training "
                         f"prompts, taught target among 5 beams for {check.target_in_beams:.0%}: {check.verdict()}"), note
    # graft, graft-rrf and graft-walk decode each query once, the items of several queries in shared
    # calls, and the runs equal one query at a time through Index.query
    from eval.runner import load_queries
    from eval.systems import DEPTH, EvalContext, run_system
    from graft.retriever import GenerativeRetriever

    decoded = []
    real = GenerativeRetriever.facet_lists

    def counting(self, queries, beams, **kw):
        decoded.extend(queries)
        return real(self, queries, beams, **kw)

    monkeypatch.setattr(GenerativeRetriever, "facet_lists", counting)
    idx = Index.open(index)
    ctx = EvalContext(idx, encoder=encoder, beams=2, split_dir=split, decode_batch=4)
    for suite in ("incorpus", "ooc"):
        queries = load_queries(split, suite, "test", 3)
        decoded.clear()
        systems = [("graph-rrf", 0, "graft"), ("rrf", 0, "graft-rrf"), ("graph-walk", 0, "graft-walk"),
                   ("graph-rrf", 3, "graft-cite")] + ([("graph-rrf", 3, "graft-text")] if suite == "ooc" else [])
        runs = {(f, w, s): run_system(s, ctx, queries) for f, w, s in systems}
        assert len(decoded) == len(queries)
        texts = 0
        for (fusion, w, system), run in runs.items():
            for q in queries:
                if q.in_corpus:
                    one = idx.query(paper=q.paper_id, retriever="graft", fusion=fusion, k=DEPTH, beams=2,
                                    citation_weight=w)
                else:
                    near = ctx.ooc_neighbours(q) if system == "graft-text" else None
                    one = idx.query(facets=ctx.ooc_rows(q)[1], retriever="graft", fusion=fusion, k=DEPTH, beams=2,
                                    query_id=q.qid, citation_weight=w, neighbours=near)
                    texts += sum(h.text is not None for h in one.hits)
                assert [d for d, _ in run.run[q.qid]] == [h.paper_id for h in one.hits]
                assert [s for _, s in run.run[q.qid]] == pytest.approx([h.score for h in one.hits])
        assert (texts > 0) == (suite == "ooc")  # graft-text's hits carry the text channel
    # past the time budget, lists decoded for another system of the model are still fused; new decoding stops
    import time

    from eval.systems import NotApplicable

    ctx.deadline = time.monotonic() - 1.0
    assert run_system("graft-walk", ctx, queries).run == runs[("graph-walk", 0, "graft-walk")].run
    with pytest.raises(NotApplicable, match="stopped by the time budget after 2 of 5 queries"):  # 2 a round
        run_system("graft", ctx, load_queries(split, "ooc", "test", 5))
    # a spent time budget stops the generative systems: n/a with a note, no run file
    spent = run_suite(split, "incorpus", RunOptions(systems=["graft"], index_dir=index, limit=2, beams=2, force=True,
                                                    time_budget_s=0.0, results_dir=tmp_path / "spent"),
                      encoder=encoder)
    assert spent["rows"][0]["R@20"] is None and any("time budget" in n for n in spent["notes"])
    att = run_suite(split, "attribution", RunOptions(systems=["graft"], index_dir=index, limit=2, beams=2,
                                                     results_dir=tmp_path / "res"), encoder=encoder)
    arow = {r["setting"]: r for r in att["rows"]}
    if arow["incorpus"]["credits"]:
        # graph-RRF keeps an in-corpus facet term only where the query has an edge to the hit
        assert arow["incorpus"]["precision"] == 1.0
    cov = run_suite(split, "coverage", RunOptions(systems=[], index_dir=index, base_model="tiny",
                                                  results_dir=tmp_path / "res"))
    crow = {r["sampling"]: r for r in cov["rows"]}
    assert crow["coverage-aware"]["papers (every facet)"] == 1.0
    assert crow["coverage-aware"]["DocIDs"] == 1.0 >= crow["naive"]["DocIDs"]


def test_ooc_facets_are_cached_once_reused_without_the_encoder_and_rebuilt_when_stale(built, encoder,
                                                                                        tmp_path) -> None:
    import numpy as np

    from eval.ooc_facets import cache_path, read_cache
    from eval.runner import load_queries
    from eval.systems import DEPTH, EvalContext
    from graft.external import ExternalScorer
    from graft.facets import FACETS

    _, built_split = built
    split = tmp_path / "split"
    shutil.copytree(built_split, split, ignore=shutil.ignore_patterns("runs", "index", "facets.jsonl"))
    idx = Index.open(built_split / "index")
    queries = load_queries(split, "ooc", "test", None)
    # the uncached path: one query at a time, as `ExternalScorer.rows` does for `graft query --text`
    plain = ExternalScorer(idx, encoder=encoder)
    expected = {q.qid: plain.rows(q.record()) for q in queries}
    near = dict(zip([q.qid for q in queries], plain.facets_of.neighbours([q.record() for q in queries])))

    ctx = EvalContext(idx, encoder=encoder, split_dir=split)
    ctx.prepare_ooc(queries)
    path = cache_path(split)
    assert path.is_file() and len(path.read_text().splitlines()) == len(queries) + 1
    teacher = idx.teacher()
    for q in queries:
        rows, facets = ctx.ooc_rows(q)
        want_rows, want_facets = expected[q.qid]
        assert facets == want_facets
        for f in FACETS:
            assert rows[f].indices.tolist() == want_rows[f].indices.tolist()
            np.testing.assert_allclose(rows[f].data, want_rows[f].data, atol=1e-6)
        assert len(near[q.qid]) == 10 and ctx.ooc_neighbours(q) == pytest.approx(near[q.qid], abs=1e-6)
        got, _ = teacher.retrieve(rows, k=DEPTH)
        want, _ = teacher.retrieve(want_rows, k=DEPTH)
        assert [n for n, _, _ in got] == [n for n, _, _ in want]
        assert [s for _, s, _ in got] == pytest.approx([s for _, s, _ in want])

    class NoEncoder:
        """Fails if anything embeds: a reused cache needs no encoder."""

        name = encoder.name
        dim = encoder.dim  # the learned facet classifier checks the encoder it reads before it embeds

        def encode(self, texts):
            raise AssertionError("the encoder was used although the cache holds every query")

    stamp = path.stat().st_mtime_ns
    reused = EvalContext(idx, encoder=NoEncoder(), split_dir=split)
    reused.prepare_ooc(queries)
    assert path.stat().st_mtime_ns == stamp
    for q in queries:
        for f in FACETS:  # bit for bit: float32 weights survive the JSON round trip
            a, b = reused.ooc_rows(q)[0][f], ctx.ooc_rows(q)[0][f]
            assert a.indices.tolist() == b.indices.tolist() and a.data.tobytes() == b.data.tobytes()
            a, b = reused.ooc_facet_only_rows(q)[f], ctx.ooc_facet_only_rows(q)[f]
            assert a.indices.tolist() == b.indices.tolist() and a.data.tobytes() == b.data.tobytes()
        assert reused.ooc_neighbours(q) == ctx.ooc_neighbours(q)
    # the facet-only rows weigh the same candidates by facet similarity alone (alpha 1, beta 0): where
    # a column's citation half is zero (no text coupling, no feedback link), its weight is the rows' / alpha
    alpha = ctx.scorer.params.alpha
    records = [q.record() for q in queries]
    firsts = ctx.scorer.citation_rows(records)
    facets = [ctx.ooc_rows(q)[1] for q in queries]
    vectors = ctx.scorer.embed_items(records, facets)
    lexical = ctx.scorer.lexical_rows(records, facets)
    assert all(lex is not None for lex in lexical)  # facet similarity blends in their words
    cites = [ctx.scorer.with_feedback(rec, ctx.scorer.rows_from(c, v, lexical=lex), c)
             for rec, c, v, lex in zip(records, firsts, vectors, lexical)]
    assert sum(c.nnz for c in cites) > sum(c.nnz for c in firsts)  # the feedback pass added links
    checked = 0
    for q, cite in zip(queries, cites):
        for f in FACETS:
            full, only = ctx.ooc_rows(q)[0][f].toarray().ravel(), ctx.ooc_facet_only_rows(q)[f].toarray().ravel()
            plain = [c for c in np.flatnonzero(full) if only[c] > 0 and cite[0, c] == 0]
            np.testing.assert_allclose(full[plain], alpha * only[plain], atol=1e-6)
            coupled = [c for c in np.flatnonzero(full) if only[c] > 0 and cite[0, c] > 0]
            np.testing.assert_allclose(full[coupled], alpha * only[coupled] + (1 - alpha) * cite[0, coupled].toarray().ravel(),
                                       atol=1e-6)
            checked += len(plain) + len(coupled)
    assert checked > 0 and any(cite.nnz for cite in cites)

    # stale: a file made for another corpus (or extractor, encoder, graph settings) is rebuilt whole
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["key"]["corpus_hash"] = "another-corpus"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert read_cache(path, ctx.ooc_key, idx.n) is None
    # the items' title weight is part of the key: an index built with items alone is another key
    from eval.ooc_facets import default_key

    plain = json.loads(json.dumps(idx.manifest))
    plain["stages"]["build"]["config"]["title_weight"] = 0.0
    assert ctx.ooc_key["graph"]["title_weight"] == 0.35 and ctx.ooc_key["graph"]["item_context"] == "late"
    assert default_key(plain) != default_key(idx.manifest)
    del plain["stages"]["build"]["config"]["title_weight"]  # an index built before the setting
    assert default_key(plain)["graph"]["title_weight"] == 0.0
    # the rows' text coupling is part of the key: none for an index built before paper embeddings
    assert ctx.ooc_key["text_neighbours"] == ctx.scorer.text_neighbours == 10
    del plain["stages"]["build"]["counts"]["paper_embeddings"]
    assert default_key(plain)["text_neighbours"] == 0
    # so is the code that takes the queries apart (the sentence splitter and the learned facet
    # classifier with its weights among it)
    from graphbuild.checkpoints import source_digest

    assert ctx.ooc_key["code"] == source_digest("graft/extract.py", "graft/facets.py", "graft/text.py",
                                                 "graft/facet_classifier.py", "graft/facet_classifier.json",
                                                 "graft/external.py", "graft/lexical.py")
    with pytest.raises(AssertionError, match="encoder was used"):
        EvalContext(idx, encoder=NoEncoder(), split_dir=split).prepare_ooc(queries)
    EvalContext(idx, encoder=encoder, split_dir=split).prepare_ooc(queries)
    assert json.loads(path.read_text().splitlines()[0])["key"] == ctx.ooc_key
    # an entry whose query text changed is recomputed, the others are kept
    lines = path.read_text().splitlines()
    first = json.loads(lines[1])
    first["text_sha"] = "0" * 16
    first["facets"] = {f: ["stale item"] for f in FACETS}
    path.write_text("\n".join([lines[0], json.dumps(first), *lines[2:]]) + "\n")
    again = EvalContext(idx, encoder=encoder, split_dir=split)
    again.prepare_ooc(queries)
    q0 = next(q for q in queries if q.qid == first["qid"])
    assert again.ooc_rows(q0)[1] == expected[q0.qid][1]
    assert read_cache(path, ctx.ooc_key, idx.n)[q0.qid].facets == expected[q0.qid][1]


def test_ooc_facets_stopped_midway_keep_the_chunks_already_made(built, encoder, tmp_path, monkeypatch) -> None:
    import eval.systems as systems
    from eval.ooc_facets import cache_path, read_cache
    from eval.runner import load_queries
    from eval.systems import EvalContext
    from graft.external import ExternalScorer

    _, built_split = built
    split = tmp_path / "split"
    shutil.copytree(built_split, split, ignore=shutil.ignore_patterns("runs", "index", "facets.jsonl"))
    idx = Index.open(built_split / "index")
    queries = load_queries(split, "ooc", "test", None)
    assert len(queries) >= 3
    monkeypatch.setattr(systems, "OOC_CHUNK", 2)
    real = ExternalScorer.score_many
    calls, stop = [], [True]

    def stops_on_the_second_chunk(self, records, **kw):
        calls.append([r["id"] for r in records])
        if len(calls) == 2 and stop[0]:
            raise RuntimeError("stopped")
        return real(self, records, **kw)

    monkeypatch.setattr(ExternalScorer, "score_many", stops_on_the_second_chunk)
    with pytest.raises(RuntimeError, match="stopped"):
        EvalContext(idx, encoder=encoder, split_dir=split).prepare_ooc(queries)
    kept = read_cache(cache_path(split), EvalContext(idx, encoder=encoder).ooc_key, idx.n)
    assert sorted(kept) == sorted(q.qid for q in queries[:2])
    # the rerun makes only the queries the stopped run had not finished, in chunks of 2
    calls.clear()
    stop[0] = False
    ctx = EvalContext(idx, encoder=encoder, split_dir=split)
    ctx.prepare_ooc(queries)
    rest = [q.record()["id"] for q in queries[2:]]
    assert [i for c in calls for i in c] == rest and all(len(c) <= 2 for c in calls)
    assert sorted(read_cache(cache_path(split), ctx.ooc_key, idx.n)) == sorted(q.qid for q in queries)


#: `gpu_eval.py run` as on the device image: polars, marisa-trie and gguf cannot be imported until the
#: run's wheels step (which this stand-in replaces, the slice's stage carrying no wheels).
RUN_WITHOUT_CARRIED_PACKAGES = """
import sys

CARRIED = ("polars", "marisa_trie", "gguf")
for name in CARRIED:  # None in sys.modules: `import` fails and importlib.util.find_spec says absent
    sys.modules[name] = None
import experiments.gpu.gpu_eval as gpu_eval
assert set(CARRIED) == set(gpu_eval.CARRIED_MODULES), gpu_eval.CARRIED_MODULES

def install_wheels(wheels, site):
    for name in CARRIED:
        del sys.modules[name]
    return "wheels step reached"

gpu_eval._install_wheels = install_wheels
sys.exit(gpu_eval.main(sys.argv[1:]))
"""


def test_gpu_eval_script_stages_a_split_and_rehearses_the_run_on_the_cpu(built, tmp_path) -> None:
    """experiments/gpu/gpu_eval.py: `prepare` stages the split in carry-sized folders; `run --smoke`
    joins the GGUF, trains the tiny model on coverage-aware and naive pairs for the same calibrated
    steps, calibrates the query limit and writes the three tables, the report and the runs. The run
    imports nothing that needs a carried wheel before it has installed them."""
    import subprocess
    import tarfile

    from experiments.gpu.gpu_common import CARRY_LIMIT, CARRY_MARGIN, folder_bytes
    from experiments.gpu.gpu_eval import main

    _, split = built
    stage = tmp_path / "stage"
    assert main(["prepare", "--split", str(split), "--work", str(tmp_path / "prep"), "--stage", str(stage),
                 "--skip-wheels", "--quiet"]) == 0
    folders = sorted(stage.iterdir())
    assert folders and all(folder_bytes(f) <= CARRY_LIMIT - CARRY_MARGIN for f in folders)
    assert (folders[-1] / "stage.json").is_file() and (folders[-1] / "data.tar.gz").is_file()
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", RUN_WITHOUT_CARRIED_PACKAGES, "run", "--smoke", "--quiet",
                           "--stage", ",".join(map(str, folders)), "--out", str(out), "--work", str(tmp_path / "work")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "gpu_eval.json").read_text())
    assert report["error"] is None and "wheels step reached" in report["notes"]
    steps = {s: t["result"]["steps"] for s, t in report["train"].items()}
    assert set(steps) == {"coverage", "naive"} and steps["coverage"] == steps["naive"] > 0
    mem = report["train"]["coverage"]["memorisation"]
    assert mem["pairs"] == 16 and 0 <= mem["target_is_top_beam"] <= mem["target_in_beams"] <= 1
    assert 1 <= mem["distinct_top_beams"] <= 16 and "of 16 training pairs" in (out / "gpu_eval.md").read_text()
    assert report["calibration"]["decoding"]["seconds_per_query"] > 0 and report["limit"]["per_suite"] == 3
    for suite in ("incorpus", "ooc", "attribution"):
        # the first 3 queries of each suite: tables named for the cut, beside any full table
        assert "pipeline check" in (out / f"eval_{suite}-first3_cs768_graft.md").read_text()
    with tarfile.open(out / "results.tar.gz") as tar:
        names = set(tar.getnames())
        table = json.load(tar.extractfile("tables/eval_incorpus-first3_cs768_graft.json"))
        ooc_table = json.load(tar.extractfile("tables/eval_ooc-first3_cs768_graft.json"))
    # the runs the tables name, over the trained copies of the index: named for the cut and the index
    graft_run, naive_run = Path(table["runs"]["graft"]).name, Path(ooc_table["runs"]["graft-naive"]).name
    assert graft_run.startswith("incorpus-first3@index-coverage-") and naive_run.startswith("ooc-first3@index-naive-")
    assert {f"runs/{graft_run}", f"runs/{naive_run}", "index-naive/manifest.json"} <= names
    rows = {r["system"]: r for r in table["rows"]}
    assert all(rows[s]["R@20"] is not None for s in ("graft", "graft-rrf", "graft-naive", "teacher"))
    # trained on the test part's leak-free index: the in-corpus table reads no gold link
    assert table["meta"]["protocol"] == "leak-free"
    assert json.loads((stage / folders[-1].name / "stage.json").read_text())["index"]["part"] == "test"


def test_cli_prepare_run_score(built, tmp_path, monkeypatch) -> None:
    import typer

    from cli.eval_cmd import eval_app

    corpus, split = built
    app = typer.Typer()
    app.add_typer(eval_app, name="eval")
    runner = CliRunner()
    out = tmp_path / "cli-split"
    res = runner.invoke(app, ["eval", "prepare", str(corpus), "--out", str(out), "--ooc", "10", "--survey", "0",
                              "--survey-dev", "0"])
    assert res.exit_code == 0, res.output
    assert "of the 10 asked" not in res.output  # all found
    res = runner.invoke(app, ["eval", "prepare", str(corpus), "--out", str(tmp_path / "short"), "--ooc", "10",
                              "--survey", "500", "--survey-dev", "0"])
    assert res.exit_code == 0 and "survey test hold-outs of the 500 asked for" in " ".join(res.output.split())
    meta = json.loads((out / "split.json").read_text())
    assert meta["corpus_hash"] == json.loads((split / "split.json").read_text())["corpus_hash"]
    assert meta["command"].startswith("graft ")
    res = runner.invoke(app, ["eval", "run", str(out), "--suite", "ooc,attribution", "--systems", "bm25,facet",
                              "--index", str(split / "index"), "--results", str(tmp_path / "res"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "| bm25 |" in res.output and "bm25: no facet attribution" in res.output
    assert (tmp_path / "res" / f"eval_attribution_{corpus.stem}.md").is_file()
    res = runner.invoke(app, ["eval", "score", str(out / "runs" / "ooc.bm25.trec"), str(out / "ooc" / "qrels.txt"),
                              "--json"])
    assert res.exit_code == 0, res.output
    scored = json.loads(res.output)
    table = json.loads(next((tmp_path / "res").glob("eval_ooc_*.json")).read_text())
    assert scored["R@20"] == pytest.approx(table["rows"][0]["R@20"]) and scored["queries"] == 10
    res = runner.invoke(app, ["eval", "score", str(out / "runs" / "ooc.bm25.trec"), str(out / "ooc" / "qrels.txt"),
                              "--limit", "3", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["queries"] == 3, res.output
    # --suite survey without --systems runs the survey writers (this split holds no survey hold-out)
    res = runner.invoke(app, ["eval", "run", str(out), "--suite", "survey", "--index", str(split / "index")])
    assert res.exit_code == 2 and "no survey hold-out" in res.output, res.output
    # a split folder prepared again from another corpus: what the earlier split made is named
    again = tmp_path / "again"
    shutil.copytree(out, again)
    other = tmp_path / "fewer.jsonl"
    other.write_text("".join(corpus.read_text().splitlines(keepends=True)[:-5]))
    res = runner.invoke(app, ["eval", "prepare", str(other), "--out", str(again), "--ooc", "10", "--survey", "0",
                              "--survey-dev", "0"])
    assert res.exit_code == 0 and f"note: {again / 'runs'} belong to the split this one replaced" in \
        " ".join(res.output.split()), res.output
    res = runner.invoke(app, ["eval", "run", str(out), "--systems", "bm25,nope", "--index", str(split / "index")])
    assert res.exit_code == 2 and "nope" in res.output
    res = runner.invoke(app, ["eval", "run", str(tmp_path), "--systems", "bm25"])
    assert res.exit_code == 2 and "graft eval prepare" in res.output
    for flags, message in ((["--beams", "0"], "Invalid value for '--beams'"), (["--device", "tpu"], "'tpu' is unknown")):
        res = runner.invoke(app, ["eval", "run", str(out), "--systems", "bm25", *flags])
        assert res.exit_code == 2 and message in res.output, res.output
    # systems, the tables' folder and name are checked before any suite runs
    (tmp_path / "a-file").write_text("x")
    for flags, message in ((["--systems", ""], "no systems given"),
                           (["--systems", "bm25", "--suite", "ooc,survey"], "--suite survey runs none"),
                           (["--systems", "graft-survey", "--suite", "ooc"], "--suite ooc runs none"),
                           (["--systems", "bm25", "--results", str(tmp_path / "a-file")], "is a file"),
                           (["--systems", "bm25", "--results", str(tmp_path / "a-file" / "r")], "which is a file"),
                           (["--systems", "bm25", "--name", "a/b"], "path separators"),
                           # options no suite of the call would use are refused, not ignored
                           (["--systems", "bm25", "--part", "dev"], "--part dev: the ooc suite has one set"),
                           (["--systems", "bm25", "--suite", "coverage", "--limit", "2"],
                            "--limit: the coverage suite has no queries"),
                           (["--systems", "bm25", "--judge-model", "m", "--judge-base-url", "http://127.0.0.1:9/v1"],
                            "judge the survey suite's claims"),
                           (["--systems", "bm25", "--base-model", "tiny"], "--base-model is the coverage suite's"),
                           (["--systems", "bm25,dense", "--suite", "attribution"],
                            "none of the systems given credits facets (bm25, dense)")):
        res = runner.invoke(app, ["eval", "run", str(out), "--suite", "ooc", "--index", str(split / "index"),
                                  "--results", str(tmp_path / "res2"), *flags])
        assert res.exit_code == 2 and message in res.output, (flags, res.output)
    assert not (tmp_path / "res2").exists()  # nothing written
    # a file given as the split is named as one; a split whose runs folder is a file, too
    res = runner.invoke(app, ["eval", "run", str(tmp_path / "a-file"), "--systems", "bm25"])
    assert res.exit_code == 2 and "is not an evaluation split" in res.output and "--results" not in res.output
    runs_file = tmp_path / "runs-file"
    shutil.copytree(out, runs_file, ignore=shutil.ignore_patterns("runs", "results"))
    (runs_file / "runs").write_text("x")
    res = runner.invoke(app, ["eval", "run", str(runs_file), "--systems", "bm25", "--index", str(split / "index")])
    assert res.exit_code == 2 and "runs is a file; the split keeps its TREC runs in that folder" in \
        " ".join(res.output.split()), res.output
    from eval.runner import SURVEY_SYSTEMS, _suite_systems
    from eval.survey_suite import SYSTEMS as SURVEY_SUITE_SYSTEMS

    assert SURVEY_SYSTEMS == SURVEY_SUITE_SYSTEMS
    assert _suite_systems("survey", ["bm25", "graft-survey"]) == ["graft-survey"]
    assert _suite_systems("ooc", ["bm25", "graft-survey"]) == ["bm25"]
    # a split file that is not split.json's JSON object, or a damaged query line, is named
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "split.json").write_text('{"format": ')
    res = runner.invoke(app, ["eval", "run", str(tmp_path / "broken"), "--systems", "bm25"])
    assert res.exit_code == 2 and "split.json: cannot be read as JSON" in res.output, res.output
    # the survey suite is a separate module, imported only when asked for
    monkeypatch.setitem(sys.modules, "eval.survey_suite", None)
    with pytest.raises(GraftError, match="survey_suite"):
        run_suite(out, "survey", RunOptions(systems=["graft-survey"], index_dir=split / "index",
                                            results_dir=tmp_path))


def test_distill_ceiling_lists_by_hand() -> None:
    """A perfect memoriser's facet lists: the papers of the taught DocIDs (a shared DocID gives all
    its papers), ranked by pair count, then edge weight to the query; the query itself left out;
    graph-RRF then drops a candidate without an edge to the query."""
    import polars as pl
    import scipy.sparse as sp

    from experiments.distill_ceiling import facet_lists_from_pairs, fused_rows

    class Docids:
        facet_names = ["method"]

        def facet(self, facet):
            return pl.DataFrame({"paper_ids": [["a"], ["b"], ["c", "d"], ["q"]]})

    row_of = {"q": 0, "a": 1, "b": 2, "c": 3, "d": 4}
    w = sp.csr_matrix(np.array([[0, .2, .5, .3, 0], [.2, 0, 0, 0, 0], [.5, 0, 0, 0, .4],
                                [.3, 0, 0, 0, 0], [0, 0, .4, 0, 0]], dtype=np.float32))
    pairs = pl.DataFrame({"facet": ["method"] * 6, "source_paper": ["q", "q", "q", "q", "q", "a"],
                          "target_docid_id": [0, 0, 1, 2, 3, 1]})
    lists = facet_lists_from_pairs(pairs, Docids(), row_of, {"method": w}, {"q"})
    # a twice; then b (0.5) before c (0.3) before d (no edge); q (self) and a's own pair are absent.
    assert lists == {"q": {"method": [1, 2, 3, 4]}}
    assert fused_rows(lists["q"], 0, {"method": w}, fusion="rrf") == [1, 2, 3, 4]
    # graph-RRF: 0.2/61, 0.5/62, 0.3/63, d dropped.
    assert fused_rows(lists["q"], 0, {"method": w}, fusion="graph-rrf") == [2, 3, 1]
    # graph-walk: rows {a: .2, b: .5, c: .3} walked; d comes back two hops through b:
    # 0.5 x (0.5 x 0.4) / (0.2 + 0.5 + 0.3) = 0.1, below a's one-hop 0.2
    from graft.teacher import GraphTeacher

    assert fused_rows(lists["q"], 0, {"method": w}, fusion="graph-walk", teacher=GraphTeacher({"method": w})) == [
        2, 3, 1, 4]
    # the citation channel, W = 3: d cites b, one of the first 3 (b, c, a): share 1/3, support 3 x 1/3 = 1,
    # term 1/61 above b's 0.5/62; plain RRF: d's term 1/64 + 3/61 puts it first too
    links = sp.csr_matrix(([1.0, 1.0], ([4, 2], [2, 4])), shape=(5, 5))
    assert fused_rows(lists["q"], 0, {"method": w}, fusion="graph-rrf", links=links, citation_weight=3.0) == [
        4, 2, 3, 1]
    assert fused_rows(lists["q"], 0, {"method": w}, fusion="rrf", links=links, citation_weight=3.0) == [4, 1, 2, 3]


def test_distill_ceiling_benchmark_on_the_slice(built, tmp_path) -> None:
    from experiments.distill_ceiling import main

    _, split = built
    assert main(["--split", str(split), "--limit", "10", "--max-edges", "2,20", "--name", "slice",
                 "--results", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "distill_ceiling_slice.json").read_text())["rows"]
    by = {(r["system"], r["fusion"]): r for r in rows}
    assert by[("teacher", "rrf (teacher)")]["R@20 / teacher"] == 1.0
    few, many = by[("pairs: coverage-aware N=2", "graph-rrf")], by[("pairs: coverage-aware N=20", "graph-rrf")]
    assert few["pairs"] < many["pairs"] < by[("pairs: naive (every edge)", "graph-rrf")]["pairs"]
    assert few["R@50"] <= many["R@50"]  # two taught neighbours per facet cannot reach more of the gold
    assert all(0.0 <= r["R@20"] <= r["R@50"] <= 1.0 for r in rows)
    assert "| every symmetric edge | graph-rrf |" in (tmp_path / "distill_ceiling_slice.md").read_text()
    walked = by[("pairs: coverage-aware N=2", "graph-walk")]
    assert walked["pairs"] == few["pairs"] and walked["R@50"] >= few["R@50"]  # here: graph-RRF's papers and more
    assert ("teacher + citation channel", "rrf, W = 3 (teacher-cite)") in by
    for fusion in ("graph-rrf", "graph-walk"):
        assert by[("pairs: coverage-aware N=2", f"{fusion} + citation channel (W = 3)")]["pairs"] == few["pairs"]


def test_slice_check_trains_on_the_slice_pairs_and_scores_against_their_ceiling(built, tmp_path) -> None:
    import polars as pl

    from experiments.slice_check import main

    _, split = built
    before = sorted(p.name for p in (split / "runs").iterdir()) if (split / "runs").is_dir() else []
    work, res = tmp_path / "work", tmp_path / "res"
    res.mkdir()
    assert main(["--split", str(split), "--queries", "3", "--base-model", "tiny", "--max-steps", "4",
                 "--beams", "2", "--work", str(work), "--results", str(res), "--name", "s3", "--quiet"]) == 0
    queries = sorted(q["paper_id"] for q in read_queries(split, "incorpus", part="test"))[:3]
    pairs = pl.read_parquet(work / "index" / "train" / "pairs.parquet")
    assert pairs.height > 0 and set(pairs["source_paper"]) <= set(queries)
    manifest = json.loads((work / "index" / "manifest.json").read_text())
    assert manifest["stages"]["pairs"]["counts"]["sources"] == 3
    assert manifest["stages"]["train"]["counts"]["pairs"] == pairs.height
    record = json.loads((res / "slice_check_s3.json").read_text())
    rows = {r["system"]: r for r in record["rows"]}
    assert set(rows) == {"graft", "graft-rrf", "teacher"}
    assert 0.0 <= rows["graft"]["ceiling R@20"] <= 1.0 and rows["teacher"]["of teacher"] == 1.0
    assert "pipeline check" in (res / "eval_incorpus-first3_s3.md").read_text()
    assert "pipeline check" in (res / "slice_check_s3.md").read_text()
    assert record["meta"]["check"]["pairs"] >= 1 and "- prompt check (`graft train`'s" in (
        res / "slice_check_s3.md").read_text()
    # the split's own runs are untouched: the check runs in a copy under --work
    assert (sorted(p.name for p in (split / "runs").iterdir()) if (split / "runs").is_dir() else []) == before
    made = [p.name for p in (work / "split" / "runs").glob("*.graft.trec")]
    assert len(made) == 1 and made[0].startswith("incorpus-first3@index-"), made  # over the trained copy


def test_title_weight_benchmark_reproduces_the_index_at_its_own_weight(built, tmp_path) -> None:
    from experiments.title_weight import main, teacher_recalls

    _, split = built
    assert main(["--split", str(split), "--weights", "0,0.35", "--part", "test", "--name", "slice",
                 "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "title_weight_slice.json").read_text())
    by = {(r["title_weight"], r["graphs"]): r for r in saved["rows"]}
    assert set(by) == {(w, g) for w in (0.0, 0.35) for g in ("full graphs (teacher)", "facet-only graphs (beta = 0)")}
    assert all(0.0 <= r["R@20"] <= r["R@50"] <= 1.0 for r in saved["rows"])
    # the slice's index was built with w = 0.35, items read in context: rebuilding its graphs at 0.35
    # gives its teacher's recall
    idx = Index.open(incorpus_index(split))
    qrels = read_qrels(split / "incorpus" / "qrels.txt")
    queries = {r["qid"]: idx.row_of[r["paper_id"]] for r in read_queries(split, "incorpus", part="test")
               if qrels.get(r["qid"])}
    gold = {q: {idx.row_of[p] for p in qrels[q] if p in idx.row_of} for q in queries}
    own = teacher_recalls(idx.graphs, queries, gold)
    assert by[(0.35, "full graphs (teacher)")]["R@20"] == pytest.approx(own["R@20"], abs=1e-9)
    assert saved["meta"]["queries"] == len(queries) and saved["meta"]["index_title_weight"] == 0.35
    assert "| 0.35 | facet-only graphs (beta = 0) |" in (tmp_path / "title_weight_slice.md").read_text()


def test_edge_mix_benchmark_rebuilds_the_index_at_its_own_setting(built, tmp_path) -> None:
    from experiments.edge_mix import main
    from experiments.title_weight import teacher_recalls

    _, split = built
    assert main(["--split", str(split), "--alphas", "0.75,1", "--top-k", "20,5", "--part", "test", "--name", "slice",
                 "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "edge_mix_slice.json").read_text())
    rows = saved["rows"]
    assert [(r["alpha"], r["top_k"], r["graphs"]) for r in rows] == [
        (0.75, 20, "the index's own"), (0.75, 20, "rebuilt"), (1.0, 20, "rebuilt"), (0.75, 5, "rebuilt"),
        (1.0, 5, "rebuilt")]
    assert all(0.0 <= r[f"{p}R@20"] <= r[f"{p}R@50"] <= 1.0 for r in rows for p in ("", "cite "))
    idx = Index.open(incorpus_index(split))
    qrels = read_qrels(split / "incorpus" / "qrels.txt")
    queries = {r["qid"]: idx.row_of[r["paper_id"]] for r in read_queries(split, "incorpus", part="test")
               if qrels.get(r["qid"])}
    gold = {q: {idx.row_of[p] for p in qrels[q] if p in idx.row_of} for q in queries}
    assert rows[0]["R@20"] == pytest.approx(teacher_recalls(idx.graphs, queries, gold)["R@20"], abs=1e-12)
    # rebuilt from the stored float16 vectors at the index's own setting: its teacher, near-ties aside
    assert rows[1]["R@20"] == pytest.approx(rows[0]["R@20"], abs=0.01)
    assert rows[1]["cite R@20"] == pytest.approx(rows[0]["cite R@20"], abs=0.01)
    assert "| 1 | 0 | 5 | rebuilt |" in (tmp_path / "edge_mix_slice.md").read_text()
    for bad in ("1.5", "x", ""):
        with pytest.raises(SystemExit):
            main(["--split", str(split), "--alphas", bad, "--results", str(tmp_path)])


def test_text_coupling_benchmark_rows(built, tmp_path) -> None:
    """experiments/text_coupling.py: in-corpus papers posed as text-only queries, the teacher with
    the beta half of their rows filled three ways, and dense retrieval recomputed here by hand."""
    from eval.metrics import recall_at
    from experiments.text_coupling import main

    _, split = built
    assert main(["--split", str(split), "--part", "test", "--limit", "12", "--feedback", "5",
                 "--neighbours", "10", "--name", "slice", "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "text_coupling_slice.json").read_text())
    by = {r["rows"]: r for r in saved["rows"]}
    assert set(by) == {"dense (title + abstract)", "text only", "pseudo-references R = 5", "text coupling M = 10",
                       "text coupling M = 10, then links of its first R = 5"}
    assert all(0.0 <= r["R@20"] <= r["R@50"] <= 1.0 for r in saved["rows"])
    assert by["text only"]["R@20 / text only"] == pytest.approx(1.0)
    # the dense row: cosine of the build's title + abstract embeddings, the query paper itself never returned
    idx = Index.open(split / "index")
    qrels = read_qrels(split / "incorpus" / "qrels.txt")
    queries = [r for r in read_queries(split, "incorpus", part="test") if qrels.get(r["qid"])]
    queries = sorted(queries, key=lambda r: r["qid"])[:12]
    vecs = np.asarray(idx.paper_embeddings, dtype=np.float32)
    recalls = []
    for q in queries:
        node = idx.row_of[q["paper_id"]]
        sims = vecs @ vecs[node]
        sims[node] = -np.inf
        ranked = [idx.paper_ids[i] for i in np.argsort(-sims, kind="stable")[:50]]
        recalls.append(recall_at(ranked, qrels[q["qid"]], 50))
    assert saved["meta"]["queries"] == len(queries) == 12
    assert by["dense (title + abstract)"]["R@50"] == pytest.approx(float(np.mean(recalls)), abs=1e-6)
    assert "| text coupling M = 10 |" in (tmp_path / "text_coupling_slice.md").read_text()


def test_ooc_fusion_proxy_rows(built, tmp_path) -> None:
    """experiments/ooc_fusion_proxy.py: stand-in decoded lists fused as GRAFT fuses them out of
    corpus; its teacher row is text_coupling's `graft query --text` row on the same queries (its
    graph-RRF support is the retriever's own `corroboration`, checked by hand below)."""
    from experiments.ooc_fusion_proxy import main
    from experiments.text_coupling import main as text_main

    _, split = built
    common = ["--split", str(split), "--part", "test", "--limit", "8", "--name", "slice", "--results", str(tmp_path)]
    assert main([*common, "--list-length", "10"]) == 0
    saved = json.loads((tmp_path / "ooc_fusion_proxy_slice.json").read_text())
    by = {r["fusion"]: r for r in saved["rows"]}
    assert list(by) == ["rrf", "graph-rrf (corroboration)", "graph-walk", "graph-walk + links of its first 3",
                        "graph-rrf + citation channel",
                        *(f"graph-rrf + citation channel + text channel W_t = {w}" for w in (1, 2, 3)),
                        "graph-walk + citation channel", "graph-walk + citation channel + text neighbours",
                        "teacher (graft query --text)"]
    assert saved["meta"]["list_length"] == 10 and by["teacher (graft query --text)"]["R@20 / teacher"] == 1.0
    assert all(0.0 <= r["R@20"] <= r["R@50"] <= 1.0 for r in by.values())
    assert text_main([*common, "--feedback", "3", "--neighbours", "10"]) == 0
    text = {r["rows"]: r for r in json.loads((tmp_path / "text_coupling_slice.json").read_text())["rows"]}
    for k in ("R@20", "R@50"):
        assert by["teacher (graft query --text)"][k] == text["text coupling M = 10, then links of its first R = 3"][k]
    with pytest.raises(SystemExit):
        main([*common, "--list-length", "0"])
    with pytest.raises(SystemExit):
        main([*common, "--text-weight", "0"])


def test_ooc_encoder_benchmark_rows(built, tmp_path, monkeypatch) -> None:
    """experiments/ooc_encoder.py: the slice's out-of-corpus entries made on torch, on an
    "auto" encoder that moves to ONNX Runtime (threshold lowered so the slice's calls reach it) and
    on the index's stored export: the same facet items and edge rows to float32 rounding."""
    from experiments.ooc_encoder import main
    from graft import encoder as embeddings

    _, split = built
    monkeypatch.setattr(embeddings, "AUTO_ONNX_TEXTS", 2)
    assert main(["--split", str(split), "--rounds", "1", "--name", "slice", "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "ooc_encoder_slice.json").read_text())
    by = {r["encoder"]: r for r in saved["rows"]}
    assert [(e, r["ran_on"]) for e, r in by.items()] == [("torch", "torch"), ("auto", "onnx"), ("stored", "onnx file")]
    assert saved["meta"]["queries"] == len(read_queries(split, "ooc")) > 0
    assert by["torch"]["ratio_to_torch"] == 1.0 and by["auto"]["seconds"] > 0
    for which in ("auto", "stored"):
        assert by[which]["same_facet_items"] == 1.0 and by[which]["max_weight_diff"] < 1e-5
    assert "| auto | onnx |" in (tmp_path / "ooc_encoder_slice.md").read_text()
    with pytest.raises(SystemExit):
        main(["--split", str(split), "--rounds", "0"])


def test_text_channel_benchmark_rows(built, tmp_path) -> None:
    """experiments/text_channel.py: its W_t = 0 row is `graft query --paper`'s teacher (stored rows
    with the citation channel), recomputed here through Index.query_paper; the channel rows differ."""
    import argparse

    from experiments.common import open_split_queries
    from experiments.distill_ceiling import mean_recalls
    from experiments.text_channel import main
    from graft.fusion import CITATION_WEIGHT
    from graft.teacher import TeacherConfig

    _, split = built
    assert main(["--split", str(split), "--part", "test", "--limit", "8", "--weights", "2", "--neighbours", "5",
                 "--name", "slice", "--results", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "text_channel_slice.json").read_text())["rows"]
    assert [(r["M"], r["W_t"]) for r in rows] == [(5, 0.0), (5, 2.0)]
    opened = open_split_queries(argparse.Namespace(split=str(split), index=None, part="test", limit=8))
    idx, config = opened.index, TeacherConfig(citation_weight=CITATION_WEIGHT)
    ranked = {q: [idx.row_of[h.paper_id] for h in idx.query_paper(idx.paper_ids[node], k=50, config=config).hits]
              for q, node in opened.rows.items()}
    assert rows[0]["R@20"] == pytest.approx(mean_recalls(ranked, opened.gold)["R@20"])
    assert rows[1]["R@20"] != rows[0]["R@20"] or rows[1]["R@50"] != rows[0]["R@50"]


def test_citation_first_benchmark_rows(built, tmp_path) -> None:
    """experiments/citation_first.py: its shipped-R row is `graft query --paper`'s teacher,
    recomputed here through Index.query_paper with the default channel."""
    import argparse

    from experiments.citation_first import main
    from experiments.common import open_split_queries
    from experiments.distill_ceiling import mean_recalls
    from graft.fusion import CITATION_FIRST, CITATION_WEIGHT
    from graft.teacher import TeacherConfig

    _, split = built
    assert main(["--split", str(split), "--part", "test", "--limit", "8", "--first", f"1,{CITATION_FIRST}",
                 "--name", "slice", "--results", str(tmp_path)]) == 0
    rows = {r["R"]: r for r in json.loads((tmp_path / "citation_first_slice.json").read_text())["rows"]}
    assert set(rows) == {1, CITATION_FIRST}
    opened = open_split_queries(argparse.Namespace(split=str(split), index=None, part="test", limit=8))
    idx, config = opened.index, TeacherConfig(citation_weight=CITATION_WEIGHT)
    ranked = {q: [idx.row_of[h.paper_id] for h in idx.query_paper(idx.paper_ids[node], k=50, config=config).hits]
              for q, node in opened.rows.items()}
    assert rows[CITATION_FIRST]["R@50"] == pytest.approx(mean_recalls(ranked, opened.gold)["R@50"])
    with pytest.raises(SystemExit):
        main(["--split", str(split), "--first", "0"])


def test_corroboration_support_by_hand() -> None:
    """graft.fusion.corroboration: each candidate's strongest edge to another candidate of the list."""
    import scipy.sparse as sp

    from graft.fusion import corroboration

    walk = sp.csr_matrix(np.array([[0, .5, .2, 0], [.5, 0, 0, .9], [.2, 0, 0, 0], [0, .9, 0, 0]], dtype=np.float32))
    np.testing.assert_allclose(corroboration(walk, np.array([0, 1, 2])), [.5, .5, .2])
    np.testing.assert_allclose(corroboration(walk, np.array([2, 3])), [0, 0])  # no edge between them
    np.testing.assert_allclose(corroboration(walk, np.array([3, 1, 0])), [.9, .9, .5])
    assert corroboration(walk, np.array([], dtype=np.int64)).shape == (0,)


def test_known_references_benchmark_matches_the_scorer(built, tmp_path) -> None:
    """experiments/known_references.py: out-of-corpus papers posed with k known references; the
    scorer's own rows give exactly the maximum of bibliographic coupling, text coupling and links."""
    from experiments.known_references import known_references, main

    _, split = built
    assert main(["--split", str(split), "--limit", "10", "--known", "1,2", "--name", "slice",
                 "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "known_references_slice.json").read_text())
    for k in (1, 2):
        by = {r["rows"]: r for r in saved["rows"] if r["known"] == k}
        assert {"bibliographic", "text", "none", "dense", "max(bibliographic, text, links)",
                "ExternalScorer first pass", "ExternalScorer + feedback 3",
                "ExternalScorer + feedback 3 + citation channel 3"} <= set(by)
        assert by["ExternalScorer first pass"]["R@50"] == by["max(bibliographic, text, links)"]["R@50"]
        assert all(0.0 <= r["R@20"] <= r["R@50"] <= 1.0 for r in by.values())
    assert known_references("q1", ["a", "b", "c", "d"], 2) == known_references("q1", ["d", "c", "b", "a"], 2)
    assert len(set(known_references("q1", ["a", "b", "c", "d"], 3))) == 3


def test_incorpus_feedback_benchmark_rows(built, tmp_path) -> None:
    """experiments/incorpus_feedback.py: the teacher's graph rows against recomputed rows with and
    without the feedback pass; the graph rows' recall is the teacher's own, recomputed here."""
    from eval.metrics import recall_at
    from experiments.incorpus_feedback import main

    _, split = built
    assert main(["--split", str(split), "--part", "test", "--limit", "8", "--feedback", "3",
                 "--name", "slice", "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "incorpus_feedback_slice.json").read_text())
    by = {r["rows"]: r for r in saved["rows"]}
    teacher_fb = "teacher-fb (CorpusScorer, R = 3)"
    uncut = "graph rows + beta x links of the first 3, every facet, no top-K cut"
    assert set(by) == {"graph rows", "out-rows recomputed", "out-rows + links of the first 3 (graph)",
                       "out-rows + links of the first 3 (out-rows)", teacher_fb, uncut}
    for k in ("R@20", "R@50"):  # teacher-fb walks the `(graph)` rows
        assert by[teacher_fb][k] == by["out-rows + links of the first 3 (graph)"][k]
    assert by["graph rows"]["R@20 / graph rows"] == pytest.approx(1.0)
    idx = Index.open(incorpus_index(split))
    qrels = read_qrels(split / "incorpus" / "qrels.txt")
    queries = sorted((r for r in read_queries(split, "incorpus", part="test") if qrels.get(r["qid"])),
                     key=lambda r: r["qid"])[:8]
    recalls = [recall_at([h.paper_id for h in idx.query_paper(q["paper_id"], k=50).hits], qrels[q["qid"]], 20)
               for q in queries]
    assert by["graph rows"]["R@20"] == pytest.approx(float(np.mean(recalls)), abs=1e-9)
    # no top-K cut, by hand: 0.25 x the share of the first 3 each paper cites or is cited by, on every row
    import scipy.sparse as sp

    a = idx.citation_matrix.toarray()
    linked = (a + a.T) > 0
    teacher, uncut_recalls = idx.teacher(), []
    for q in queries:
        node = idx.row_of[q["paper_id"]]
        first = [idx.row_of[h.paper_id] for h in idx.query_paper(q["paper_id"], k=3).hits]
        share = linked[first].mean(axis=0).astype(np.float32)
        share[node] = 0
        rows = {f: r + sp.csr_matrix(0.25 * share[None, :]) for f, r in teacher.node_rows(node).items()}
        hits = [h.paper_id for h in idx.query_rows(rows, k=50, exclude={node}).hits]
        uncut_recalls.append(recall_at(hits, qrels[q["qid"]], 20))
    assert by[uncut]["R@20"] == pytest.approx(float(np.mean(uncut_recalls)), abs=1e-9)


def test_citation_channel_benchmark_rows(built, tmp_path) -> None:
    """experiments/citation_channel.py: W = 0 of the stored rows is the `teacher`, the shipped W
    is `graft query --paper`'s teacher; every setting has its W = 0 baseline."""
    from eval.metrics import recall_at
    from experiments.citation_channel import main
    from graft.external import CorpusScorer
    from graft.fusion import CITATION_WEIGHT

    _, split = built
    assert main(["--split", str(split), "--part", "test", "--limit", "8", "--weights", f"1,{CITATION_WEIGHT:g}",
                 "--name", "slice", "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "citation_channel_slice.json").read_text())
    by = {(r["setting"], r["W"]): r for r in saved["rows"]}
    settings = {s for s, _ in by}
    assert settings == {"in corpus, teacher, stored rows", "in corpus, teacher, feedback rows", "text-only, teacher",
                        "text-only, stand-in decoder, graph-rrf", "text-only, stand-in decoder, rrf",
                        "text-only, stand-in decoder, graph-walk"}
    assert all((s, 0.0) in by and (s, CITATION_WEIGHT) in by for s in settings)
    idx = Index.open(incorpus_index(split))
    qrels = read_qrels(split / "incorpus" / "qrels.txt")
    queries = sorted((r for r in read_queries(split, "incorpus", part="test") if qrels.get(r["qid"])),
                     key=lambda r: r["qid"])[:8]
    scorer = CorpusScorer(idx)
    for w, query in ((0.0, lambda p: idx.query_paper(p, k=50)), (CITATION_WEIGHT, lambda p: scorer.query_paper(p, k=50))):
        recalls = [recall_at([h.paper_id for h in query(q["paper_id"]).hits], qrels[q["qid"]], 20) for q in queries]
        assert by[("in corpus, teacher, stored rows", w)]["R@20"] == pytest.approx(float(np.mean(recalls)), abs=1e-9)
    with pytest.raises(SystemExit):
        main(["--split", str(split), "--weights", "-1"])


def test_gpu_eval_retries_a_diverged_training_with_math_attention_then_float32(tmp_path, monkeypatch) -> None:
    """A training whose loss went NaN on the device is retried with the MATH attention kernel, then
    also in float32; each retry is recorded, and a third divergence ends the run with the error."""
    import argparse

    import experiments.gpu.gpu_eval as gpu_eval
    from graft import devices
    from training.trainer import TrainingDiverged

    monkeypatch.setattr(devices, "SDPA_BACKENDS", devices.SDPA_BACKENDS)
    args = argparse.Namespace(bf16=None)
    run = gpu_eval.Run(tmp_path, args)
    calls: list[tuple[tuple[str, ...], bool | None]] = []

    def train(fails: int):
        def fn():
            calls.append((devices.SDPA_BACKENDS, args.bf16))
            if len(calls) <= fails:
                raise TrainingDiverged(f"training diverged: the loss was nan at step 10 of 11; try {len(calls)}")
            return "trained"
        return fn

    assert gpu_eval._retrying("training calibration", train(1), args, run) == "trained"
    assert calls == [(("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"), None), (("MATH",), None)]
    assert run.report["departures"] == ["training calibration: training diverged: the loss was nan at step 10 of 11; "
                                        "retried, and everything after it run, with attention kernels MATH"]
    assert "attention kernels MATH" in (tmp_path / "gpu_eval.md").read_text()
    calls.clear()
    assert gpu_eval._retrying("coverage training", train(1), args, run) == "trained"  # the next level
    assert calls == [(("MATH",), None), (("MATH",), False)] and args.bf16 is False
    assert run.report["departures"][-1].endswith("MATH and float32 (no bf16 autocast)")
    calls.clear()
    with pytest.raises(TrainingDiverged, match="try 1"):
        gpu_eval._retrying("naive training", train(5), args, run)
    assert len(calls) == 1 and run.report["fallback_level"] == 2


def test_gpu_eval_samplings_and_query_limit() -> None:
    """--samplings takes coverage alone or with naive (in that order); the query limit is sized to
    the number of models that decode."""
    import argparse

    import experiments.gpu.gpu_eval as gpu_eval

    assert gpu_eval._samplings("naive, coverage") == ("coverage", "naive")
    assert gpu_eval._samplings("coverage") == ("coverage",)
    for bad in ("naive", "coverage,random", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="coverage, or coverage,naive"):
            gpu_eval._samplings(bad)
    # 0.05 s a query and model, x 1.3 for the suites' own work, plus 20 s: 124 s fit 400 queries a suite
    # with two models ((400 + 400) x 0.05 x 2 x 1.3 + 20 = 124) and, with one, 1,100 (ooc has 500)
    assert gpu_eval._choose_limit(0.05, 1602, 500, 124.0) == 400
    assert gpu_eval._choose_limit(0.05, 1602, 500, 124.0, models=1) == 1100
    assert gpu_eval._choose_limit(0.05, 1602, 500, 1000.0, models=1) == 1602
    assert gpu_eval._choose_limit(0.05, 1602, 500, 5.0) == 1  # never none


def test_damaged_or_changed_stored_runs_are_computed_again(built, encoder, tmp_path) -> None:
    """SPLITDIR/runs is a cache: a damaged sidecar or obvious-set file, or a run file cut or edited
    after it was written, is computed again instead of ending in a traceback or a wrong table."""
    _, split = built
    opts = RunOptions(systems=["bm25"], limit=6, results_dir=tmp_path)
    table = run_suite(split, "incorpus", opts, encoder=encoder)
    first = table["rows"][0]
    trec, _, meta_path = stored(table, "bm25")
    obvious = split / "runs" / "incorpus.obvious.json"
    for damage in ("{x", "[1]", json.dumps({"queries": "many", "qids": 3})):
        meta_path.write_text(damage)
        obvious.write_text(damage)
        again = run_suite(split, "incorpus", opts, encoder=encoder)["rows"][0]
        assert again["R@20"] == first["R@20"] and again["non_obvious@20"] == first["non_obvious@20"]
        assert json.loads(meta_path.read_text())["queries"] == 6 and "near" in json.loads(obvious.read_text())
    lines = trec.read_text().splitlines()
    trec.write_text("\n".join(lines[: len(lines) // 3]) + "\n")  # cut behind its sidecar's back
    again = run_suite(split, "incorpus", opts, encoder=encoder)["rows"][0]
    assert again["R@20"] == first["R@20"] and len(trec.read_text().splitlines()) == len(lines)
    trec.write_text("not a run\n")
    assert run_suite(split, "incorpus", opts, encoder=encoder)["rows"][0]["R@20"] == first["R@20"]


def test_a_run_of_other_systems_fills_the_same_table(built, encoder, tmp_path) -> None:
    """Systems run one after the other into a table of the same split, index and queries end in
    one table (the earlier rows said to be earlier); another query set is a table of its own."""
    _, split = built
    first = run_suite(split, "incorpus", RunOptions(systems=["bm25"], results_dir=tmp_path), encoder=encoder,
                      command="run 1")
    second = run_suite(split, "incorpus", RunOptions(systems=["citation", "bm25"], results_dir=tmp_path),
                       encoder=encoder, command="run 2")
    assert [r["system"] for r in second["rows"]] == ["citation", "bm25"]  # the new bm25 row, not both
    third = run_suite(split, "incorpus", RunOptions(systems=["teacher"], results_dir=tmp_path), encoder=encoder,
                      command="run 3")
    assert first["files"] == second["files"] == third["files"]
    saved = json.loads(Path(third["files"][1]).read_text())
    assert [r["system"] for r in saved["rows"]] == ["bm25", "citation", "teacher"]
    assert saved["rows"][0]["R@20"] == first["rows"][0]["R@20"] and set(saved["runs"]) == {"bm25", "teacher"}
    assert saved["rows"][1]["R@20"] is None  # citation-only: n/a on the leak-free index (no run)
    assert any(n.startswith("bm25, citation: rows of an earlier run of this table (`run 2`") for n in saved["notes"])
    assert saved["meta"]["systems"] == ["teacher", "bm25", "citation"]
    assert "| citation |" in Path(third["files"][0]).read_text()
    # each earlier row is named with the command that made it, however many runs later
    fourth = run_suite(split, "incorpus", RunOptions(systems=["facet"], results_dir=tmp_path), encoder=encoder,
                       command="run 4")
    notes = json.loads(Path(fourth["files"][1]).read_text())["notes"]
    assert any(n.startswith("bm25, citation: rows of an earlier run of this table (`run 2`") for n in notes), notes
    assert any(n.startswith("teacher: rows of an earlier run of this table (`run 3`") for n in notes), notes
    # a limit that leaves no query out is the full table: its rows stay
    n = fourth["meta"]["queries"]
    everything = run_suite(split, "incorpus", RunOptions(systems=["dense"], limit=n + 100, results_dir=tmp_path),
                           encoder=encoder, command="run 5")
    assert everything["files"] == first["files"] and everything["meta"]["limit"] is None
    assert [r["system"] for r in everything["rows"]] == ["bm25", "dense", "citation", "facet", "teacher"]
    short = run_suite(split, "incorpus", RunOptions(systems=["dense"], limit=5, results_dir=tmp_path), encoder=encoder)
    assert [r["system"] for r in short["rows"]] == ["dense"] and short["files"][0] != third["files"][0]
    assert [r["system"] for r in json.loads(Path(third["files"][1]).read_text())["rows"]] == [
        "bm25", "dense", "citation", "facet", "teacher"]


@pytest.mark.slow
def test_no_system_reads_a_query_s_own_citation_link(tmp_path, encoder) -> None:
    """A planted leak: two corpora that differ only in one citation link, from an in-corpus query Q
    to a paper G it did not cite. Leak-free, every system's answers to every query are the same
    on both (the link is Q's gold, hidden from the index of Q's part); answered from an index of
    the whole corpus (the old protocol, direct links as candidates), they are not."""
    from eval.systems import SYSTEMS, EvalContext, NotApplicable, run_system

    records = [json.loads(line) for line in write_dense_slice(cs768_path(), tmp_path).read_text().splitlines()]
    ids = {r["id"] for r in records}
    nbrs: dict[str, set[str]] = {r["id"]: set() for r in records}
    for r in records:
        for c in r["references"]:
            if c in ids:
                nbrs[r["id"]].add(c)
                nbrs[c].add(r["id"])
    by_degree = sorted(nbrs, key=lambda p: (-len(nbrs[p]), p))
    q = by_degree[0]
    threshold = len(nbrs[by_degree[7]])  # about eight queries, all in the test part
    g = next(p for p in reversed(by_degree) if p not in nbrs[q] and p != q and 0 < len(nbrs[p]) < threshold - 1)
    config = SplitConfig(seed=0, n_ooc=0, n_survey=0, n_survey_dev=0, incorpus_queries=0, dev_share=0.0,
                         incorpus_min_neighbours=threshold)
    splits = {}
    for name, plant in (("without", False), ("with", True)):
        corpus = tmp_path / f"{name}.jsonl"
        corpus.write_text("".join(json.dumps({**r, "references": r["references"] + ([g] if plant and r["id"] == q
                                                                                      else [])}) + "\n"
                                  for r in records))
        splits[name] = tmp_path / f"split-{name}"
        prepare_split(corpus, splits[name], config)
        build_split_indexes(splits[name], encoder=encoder, cache_from=splits.get("without", tmp_path / "no") / "index"
                            if plant else None)
    planted = read_qrels(splits["with"] / "incorpus" / "qrels.txt")
    assert g in planted[q] and g not in read_qrels(splits["without"] / "incorpus" / "qrels.txt")[q]
    queries = load_queries(splits["with"], "incorpus", "test", None)
    assert q in {x.qid for x in queries} and queries == load_queries(splits["without"], "incorpus", "test", None)

    def answers(index_dir: Path, systems: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
        ctx = EvalContext(Index.open(index_dir), encoder=encoder)
        out = {}
        for system in systems:
            try:
                run = run_system(system, ctx, queries)
            except NotApplicable:  # the generative systems: no model here
                continue
            out[system] = {qid: [d for d, _ in hits] for qid, hits in run.run.items()}
        return out

    leak_free = {name: answers(part_index(split, "test"), SYSTEMS) for name, split in splits.items()}
    # citation-only is n/a: leak-free, the queries have no citation links at all
    assert set(leak_free["with"]) == {"bm25", "dense", "hybrid", "facet", "teacher", "teacher-fb", "teacher-cite"}
    assert leak_free["with"] == leak_free["without"]
    # the old protocol: the index of the whole corpus holds the link, and its answers move
    for name, split in splits.items():
        build_index(split / "corpus.jsonl", tmp_path / f"leaky-{name}", BuildConfig(direct_links=True),
                    encoder=encoder, cache_from=split / "index")
    leaky = {name: answers(tmp_path / f"leaky-{name}", ("citation", "teacher", "teacher-cite")) for name in splits}
    assert any(leaky["with"][s][q] != leaky["without"][s][q] for s in leaky["with"])


def test_the_end_to_end_experiment_trains_measures_each_epoch_then_evaluates(built, tmp_path) -> None:
    """experiments.graft_e2e on a copy of the split with the `tiny` model: a curve row per point (the
    held pairs' memorisation and R@20 beside the ceiling), then the three suites' tables in one report."""
    from experiments import graft_e2e

    _, split = built
    copy = tmp_path / "split"
    shutil.copytree(split, copy, ignore=shutil.ignore_patterns(".graft-lock*"))
    work, results = tmp_path / "work", tmp_path / "results"
    argv = ["--split", str(copy), "--work", str(work), "--results", str(results), "--base-model", "tiny",
            "--epochs", "0.1", "--measure-every", "0.05", "--batch-size", "32", "--held-papers", "3", "--held-beams", "3", "--curve-queries", "4",
            "--beams", "3", "--systems", "bm25,teacher,graft", "--threads", "1", "--name", "smoke"]
    assert graft_e2e.main(argv) == 0
    rows = [json.loads(x) for x in (work / "curve.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0.05, 0.1] and rows[0]["step"] < rows[1]["step"]
    for r in rows:
        assert r["held_pairs"] >= r["held_prompts"] > 0 and r["held_beams"] == 3
        for key in ("held_target_in_beams", "held_top_beam_taught", "R@20 in corpus", "R@20 out of corpus",
                    "ceiling R@20 in corpus"):
            assert 0.0 <= r[key] <= 1.0, key
        assert 0 < r["held_distinct_top_beams"] <= 1.0
    assert rows[0]["ceiling R@20 in corpus"] > 0  # the pairs reach some of the queries' links
    report = (results / "e2e_smoke.md").read_text()
    assert report == (work / "e2e_smoke.md").read_text() and "In progress" not in report
    assert report.count("\n| 0.05 | ") == 1 and report.count("\n| 0.1 | ") == 1
    for suite in ("### incorpus", "### ooc", "### attribution"):
        assert suite in report
    assert report.count("| graft |") >= 3 and "graft / teacher R@20" in report
    assert (copy / "incorpus" / "test" / "index" / "model").is_dir()
    runs = sorted(p.name for p in results.iterdir())
    assert any(n.startswith("eval_incorpus") for n in runs) and any(n.startswith("eval_ooc") for n in runs)



def test_facet_levers_words_rows_blend_the_index_vectors_with_their_words(built, tmp_path) -> None:
    """experiments/facet_levers.py `words`: one row per lexical weight; at 0 it is the index's own
    item vectors' exact facet ranking, and the words move it."""
    from experiments.facet_levers import main

    _, split = built
    assert main(["--split", str(split), "--part", "test", "--variants", "words", "--lexical-weights", "0,0.35,1",
                 "--name", "slice", "--results", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "facet_levers_slice.json").read_text())["rows"]
    assert [r["variant"] for r in rows] == ["words λ=0", "words λ=0.35", "words λ=1"]
    assert all(0.0 <= r[c] <= 1.0 for r in rows for c in ("problem", "method", "RRF", "sum", "dense"))
    assert len({r["dense"] for r in rows}) == 1  # the same dense baseline beside every row
    assert any(rows[0][c] != rows[2][c] for c in ("problem", "method", "result", "contribution"))
