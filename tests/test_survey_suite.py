"""The survey evaluation suite on a real cs768 slice: hold-out split layout, both systems, metrics."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import cached_folder, cs768_path

from graft.errors import InputValidationError


def write_dense_slice(tmp_path, n_reviews: int = 2, n_other: int = 30):
    """The cs768 papers with the fewest references among those with >= 20 (review-like), all their
    references, and `n_other` more."""
    with gzip.open(cs768_path(), "rt") as fh:
        records = [json.loads(line) for line in fh]
    by_id = {r["id"]: r for r in records}
    reviews = sorted((r for r in records if len(r["references"]) >= 20),
                     key=lambda r: (len(r["references"]), r["id"]))[:n_reviews]
    keep = {r["id"] for r in reviews} | {x for r in reviews for x in r["references"]}
    keep |= {r["id"] for r in records[:n_other]}
    out = tmp_path / "slice.jsonl"
    out.write_text("".join(json.dumps(by_id[i]) + "\n" for i in sorted(keep)))
    return out, [r["id"] for r in reviews]


@pytest.fixture(scope="module")
def split(request, tmp_path_factory, encoder):
    """The survey split of the dense slice with its index (kept in pytest's cache: `cached_folder`)."""
    from eval.splits import SplitConfig, prepare_split
    from graphbuild.build import BuildConfig, build_index

    tmp = tmp_path_factory.mktemp("survey-suite")
    corpus, reviews = write_dense_slice(tmp)
    config = SplitConfig(n_ooc=0, n_survey=2, survey_min_refs=20)

    def make(folder: Path) -> None:
        info = prepare_split(corpus, folder / "split", config)
        build_index(folder / "split" / "corpus.jsonl", folder / "split" / "index", BuildConfig(), encoder=encoder)
        (folder / "info.json").write_text(json.dumps(info))

    folder = cached_folder(request, tmp_path_factory, "survey-split", [corpus, repr(config), repr(BuildConfig())],
                           make)
    return folder / "split", json.loads((folder / "info.json").read_text()), reviews


def test_split_layout(split) -> None:
    from eval.survey_suite import read_survey_split

    split_dir, info, reviews = split
    queries, gold = read_survey_split(split_dir)
    kept = [json.loads(line) for line in (split_dir / "corpus.jsonl").read_text().splitlines()]
    kept_ids = {r["id"] for r in kept}
    held = {q["paper_id"] for q in queries}
    assert len(queries) == 2 and held == set(reviews)  # the only papers with >= 20 references here
    assert not held & kept_ids
    assert all(set(r["references"]) <= kept_ids for r in kept)
    for q in queries:
        assert q["title"] and q["n_references"] == len(gold[q["qid"]]) >= 20
        assert gold[q["qid"]] <= kept_ids
    saved = json.loads((split_dir / "split.json").read_text())
    assert saved["counts"]["survey"] == 2 and saved["corpus_hash"] == info["corpus_hash"]
    assert {"seed", "source", "source_hash", "corpus_hash", "counts", "params", "command", "created",
            "versions"} <= set(saved)


def test_an_empty_part_is_a_clear_error(split, encoder, tmp_path) -> None:
    from eval.survey_suite import survey_suite
    from graft.errors import InputValidationError

    split_dir, _, _ = split  # both review-like papers went to the test part: dev is empty
    with pytest.raises(InputValidationError, match="no survey hold-out in part 'dev'.*--survey-dev"):
        survey_suite(split_dir, split_dir / "index", systems=["baseline-survey"], limit=None, part="dev",
                     out_dir=tmp_path / "runs", encoder=encoder)


def test_suite_scores_both_systems(split, encoder, tmp_path) -> None:
    from eval.survey_suite import SYSTEMS, markdown_table, survey_suite
    from graft.survey.config import SurveyConfig

    split_dir, _, _ = split
    result = survey_suite(split_dir, split_dir / "index", systems=list(SYSTEMS), limit=None,
                          config=SurveyConfig(sections=2), out_dir=tmp_path / "runs",
                          encoder=encoder, support_set=20)
    rows = {r["system"]: r for r in result["rows"]}
    assert set(rows) == set(SYSTEMS)
    for row in rows.values():
        assert row["queries"] == 2 and row["failed"] == 0
        assert row["fabricated_references"] == 0
        for m in ("reference_recall", "reference_precision", "claim_recall", "claim_precision", "citation_support"):
            assert 0.0 <= row[m] <= 1.0
        assert row["cited_papers"] > 0
    # the hold-outs' bibliographies are in the corpus: both writers find some of them
    assert rows["graft-survey"]["reference_recall"] > 0 and rows["baseline-survey"]["reference_recall"] > 0
    per = result["per_query"]["graft-survey"]
    for q in per:  # recomputed from the run file and the qrels
        cited = [line.split()[2] for line in (tmp_path / "runs" / "graft-survey.run").read_text().splitlines()
                 if line.split()[0] == q["qid"]]
        gold = {line.split()[2] for line in (split_dir / "survey" / "qrels.txt").read_text().splitlines()
                if line.split()[0] == q["qid"]}
        assert q["reference_recall"] == pytest.approx(len(set(cited) & gold) / len(gold))
        assert q["reference_precision"] == pytest.approx(len(set(cited) & gold) / len(cited))
        survey = json.loads((tmp_path / "runs" / "graft-survey" / q["qid"] / "survey.json").read_text())
        pool = {c["paper_id"] for c in survey["pool"]}
        assert q["pool_recall"] == pytest.approx(len(pool & gold) / len(gold))
    # graft-survey prints only pairs its verifier accepted; the baseline is checked by the same test
    assert rows["graft-survey"]["citation_support"] == 1.0 and 0 < rows["graft-survey"]["first_check_support"] <= 1
    assert rows["baseline-survey"]["first_check_support"] != rows["baseline-survey"]["first_check_support"]  # nan
    assert any("judge: the support test" in n for n in result["notes"])
    labelled = result["labelled_support"]
    assert labelled["n"] > 0 and 0 <= labelled["precision"] <= 1 and 0 <= labelled["recall"] <= 1
    assert any(f"support test on {labelled['n']} labelled (clause, paper) pairs" in n for n in result["notes"])
    assert any("(95% paired bootstrap interval" in n for n in result["notes"])
    one = survey_suite(split_dir, split_dir / "index", systems=list(SYSTEMS), limit=1,
                       config=SurveyConfig(sections=2), out_dir=tmp_path / "one", encoder=encoder, support_set=0)
    assert any("(one hold-out: no interval); per hold-out" in n for n in one["notes"])  # not "1.17-1.17"
    # each survey is written as of its hold-out's year, and the graph retrieval widens through citations
    from graft.index import Index

    queries = {json.loads(line)["qid"]: json.loads(line)
               for line in (split_dir / "survey" / "queries.jsonl").read_text().splitlines()}
    papers = Index.open(split_dir / "index").papers
    year_of = dict(zip(papers["paper_id"].to_list(), papers["year"].to_list()))
    for system in SYSTEMS:
        for q in result["per_query"][system]:
            survey = json.loads((tmp_path / "runs" / system / q["qid"] / "survey.json").read_text())
            assert survey["config"]["until_year"] == queries[q["qid"]]["year"]
            assert all(year_of[r["paper_id"]] <= queries[q["qid"]]["year"] for r in survey["references"])
            via_citations = [c for c in survey["pool"] if "citation" in c["facets"]]
            assert bool(via_citations) == (system == "graft-survey")
    assert set(result["runs"]) == set(SYSTEMS)
    table = markdown_table(result)
    assert "| graft-survey |" in table and "| baseline-survey |" in table


def test_suite_refuses_other_index_and_systems(split, tmp_path) -> None:
    from eval.survey_suite import survey_suite

    split_dir, _, _ = split
    with pytest.raises(InputValidationError, match="unknown survey system"):
        survey_suite(split_dir, split_dir / "index", systems=["gpt-survey"], limit=1)
    other = tmp_path / "other"
    other.mkdir()
    (other / "split.json").write_text(json.dumps({"corpus_hash": "0" * 64}))
    (other / "survey").mkdir()
    for name in ("queries.jsonl", "qrels.txt"):
        (other / "survey" / name).write_text((split_dir / "survey" / name).read_text())
    with pytest.raises(InputValidationError, match="corpus hash differs"):
        survey_suite(other, split_dir / "index", systems=["graft-survey"], limit=1)
    with pytest.raises(InputValidationError, match="graft eval prepare"):
        survey_suite(tmp_path, split_dir / "index", systems=["graft-survey"], limit=1)


def test_cli_survey_suite_with_an_llm_judge(split, tmp_path) -> None:
    """`graft eval run --suite survey --judge-model M --judge-base-url URL`: claims are judged by the
    served model (here one that never finds support), and the table says which judge it was."""
    from test_llm_client import FakeLLMServer, Reply
    from typer.testing import CliRunner

    from cli.app import app

    split_dir, _, _ = split
    server = FakeLLMServer()
    asked: list[str] = []

    def never(hit: int, body: dict) -> Reply:
        asked.append(body["messages"][-1]["content"])
        return Reply(content=json.dumps({"supported": False}))

    server.behave = never
    try:
        res = CliRunner().invoke(app, ["eval", "run", str(split_dir), "--suite", "survey", "--systems",
                                       "baseline-survey", "--judge-model", "never", "--judge-base-url", server.url,
                                       "--results", str(tmp_path), "--name", "slice", "--quiet", "--json"])
    finally:
        server.close()
    assert res.exit_code == 0, res.output
    table = json.loads(res.output)
    row = table["rows"][0]
    assert row["system"] == "baseline-survey" and row["claim_precision"] == 0.0 and row["claim_recall"] == 0.0
    assert asked and all(a.startswith("Does the paper say") for a in asked)
    assert any("LLM judge (never)" in n for n in table["notes"])
    bad = CliRunner().invoke(app, ["eval", "run", str(split_dir), "--suite", "survey", "--judge-model", "x"])
    assert bad.exit_code != 0 and "--judge-base-url" in bad.output


def test_survey_tuning_benchmark_rows(split, tmp_path) -> None:
    """`experiments.survey_tuning`: the default writer and a one-setting variant against the
    baseline on the same hold-outs, written as a table."""
    from experiments.survey_tuning import main, parse_combo, parse_settings
    from graft.survey.config import SurveyConfig

    assert parse_settings(["graph_seeds=0,40", "relative_relevance=0.5", "verify=false"], SurveyConfig()) == [
        ("graph_seeds", 0), ("graph_seeds", 40), ("relative_relevance", 0.5), ("verify", False)]
    for bad, message in (("seeds=3", "unknown survey setting"), ("pool", "NAME=V1"),
                         ("pool=many", "not a int"), ("rerank=maybe", "true or false")):
        with pytest.raises(ValueError, match=message):
            parse_settings([bad], SurveyConfig())
    assert parse_combo("recency_weight=0 relative_relevance=0.4", SurveyConfig()) == {
        "recency_weight": 0.0, "relative_relevance": 0.4}
    for bad, message in (("pool=1,2", "more than one value"), ("pool=1 pool=2", "set twice"), (" ", "expected")):
        with pytest.raises(ValueError, match=message):
            parse_combo(bad, SurveyConfig())

    split_dir, _, _ = split
    assert main(["--split", str(split_dir), "--part", "test", "--set", "graph_seeds=0",
                 "--set", "papers_per_section=1", "--combo", "graph_seeds=0 papers_per_section=1",
                 "--name", "t", "--results", str(tmp_path)]) == 0
    table = json.loads((tmp_path / "survey_tuning_t.json").read_text())
    rows = {(r["setting"], r["value"]): r for r in table["rows"]}
    assert set(rows) == {("default", None), ("graph_seeds", 0), ("papers_per_section", 1),
                         ("graph_seeds + papers_per_section", "0 / 1")}
    base = table["meta"]["baseline_reference_recall"]
    assert base > 0 and table["meta"]["part"] == "test"
    assert table["meta"]["defaults"] == {"graph_seeds": 20, "papers_per_section": 8}
    for r in rows.values():
        assert r["hold_outs"] == 2 and r["fabricated"] == 0 and 0 <= r["pool_recall"] <= 1
        assert r["ratio"] == pytest.approx(r["reference_recall"] / r["baseline_recall"])
    # a graft-only setting shares the default's baseline; a shared one reruns it (fewer papers cited)
    assert rows[("graph_seeds", 0)]["baseline_recall"] == base
    assert rows[("papers_per_section", 1)]["baseline_recall"] < base
    both = rows[("graph_seeds + papers_per_section", "0 / 1")]  # both changes at once
    assert both["baseline_recall"] == rows[("papers_per_section", 1)]["baseline_recall"]
    assert "| graph_seeds + papers_per_section | 0 / 1 |" in (tmp_path / "survey_tuning_t.md").read_text()
    assert "| graph_seeds | 0 |" in (tmp_path / "survey_tuning_t.md").read_text()
