"""The survey evaluation suite on a real cs768 slice: hold-out split layout, both systems, metrics."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import cs768_path

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
def split(tmp_path_factory, encoder):
    from eval.survey_suite import prepare_survey_split
    from graphbuild.build import BuildConfig, build_index

    tmp = tmp_path_factory.mktemp("survey-suite")
    corpus, reviews = write_dense_slice(tmp)
    info = prepare_survey_split(corpus, tmp / "split", n_survey=2, min_references=20)
    build_index(tmp / "split" / "corpus.jsonl", tmp / "split" / "index", BuildConfig(), encoder=encoder)
    return tmp / "split", info, reviews


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


def test_suite_scores_both_systems(split, encoder, tmp_path) -> None:
    from eval.survey_suite import SYSTEMS, markdown_table, survey_suite
    from graft.survey.config import SurveyConfig

    split_dir, _, _ = split
    result = survey_suite(split_dir, split_dir / "index", systems=list(SYSTEMS), limit=None,
                          config=SurveyConfig(sections=2, subsections=1), out_dir=tmp_path / "runs",
                          encoder=encoder)
    rows = {r["system"]: r for r in result["rows"]}
    assert set(rows) == set(SYSTEMS)
    for row in rows.values():
        assert row["queries"] == 2 and row["failed"] == 0
        assert row["fabricated_references"] == 0
        for m in ("reference_recall", "reference_precision", "claim_recall", "claim_precision"):
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
    assert any("proxy: offline facet-aware checker" in n for n in result["notes"])
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


def test_split_max_papers_keeps_bibliographies(tmp_path) -> None:
    from eval.survey_suite import prepare_survey_split, read_survey_split

    corpus, reviews = write_dense_slice(tmp_path, n_other=80)
    info = prepare_survey_split(corpus, tmp_path / "small", n_survey=2, min_references=20, max_papers=60)
    queries, gold = read_survey_split(tmp_path / "small")
    kept = {json.loads(line)["id"] for line in (tmp_path / "small" / "corpus.jsonl").read_text().splitlines()}
    originals = {json.loads(line)["id"]: json.loads(line) for line in corpus.read_text().splitlines()}
    assert info["counts"]["corpus"] == len(kept) == 60 and not kept & set(reviews)
    for q in queries:  # the whole bibliography survives the reduction
        assert gold[q["qid"]] == set(originals[q["paper_id"]]["references"]) - set(reviews)
