"""Settings dataclasses refuse values of the wrong type when made, naming the field and what it takes."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytest

from eval.runner import RunOptions, run_suites
from eval.splits import SplitConfig
from graft.config import config_to_dict, type_problems
from graft.errors import GraftError
from graft.extract import HeuristicConfig
from graft.llm.client import LLMConfig
from graft.survey.config import SurveyConfig, SurveyError
from graft.teacher import TeacherConfig
from graphbuild.build import BuildConfig
from training.pairs import DistillConfig
from training.trainer import TrainConfig


@dataclass
class Sample:
    count: int = 1
    share: float = 0.5
    flag: bool = True
    name: str = "a"
    names: list[str] | None = None
    cap: int | None = None
    anything: object = None


def test_type_problems_names_each_wrong_field() -> None:
    assert type_problems(Sample()) == []
    assert type_problems(Sample(count=3, share=2, names=["x"], cap=None, anything="free")) == []  # an int is a number
    wrong = Sample(count=2.5, share=math.nan, flag=1, name=None, names="x", cap=True)
    assert type_problems(wrong) == [
        "count=2.5 (a whole number)", "share=nan (a finite number)", "flag=1 (True or False)",
        "name=None (a string)", "names='x' (a list of strings or None)", "cap=True (a whole number or None)"]
    assert type_problems(Sample(share=math.inf, names=["a", 1])) == [
        "share=inf (a finite number)", "names=['a', 1] (a list of strings or None)"]


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: SurveyConfig(pool=2.5), SurveyError, "pool=2.5 (a whole number)"),
    (lambda: SurveyConfig(seed="a"), SurveyError, "seed='a' (a whole number)"),
    (lambda: SurveyConfig(seed=-1), SurveyError, "seed=-1 (an integer >= 0)"),
    (lambda: SurveyConfig(citation_weight=math.nan), SurveyError, "citation_weight=nan (a finite number)"),
    (lambda: SurveyConfig(support_threshold=2), SurveyError, "support_threshold=2 (in [0, 1])"),
    (lambda: SurveyConfig(min_relevance=-0.1), SurveyError, "min_relevance=-0.1 (in [0, 1])"),
    (lambda: SurveyConfig(rerank="no"), SurveyError, "rerank='no' (True or False)"),
    (lambda: SurveyConfig(until_year=True), SurveyError, "until_year=True (a whole number or None)"),
    (lambda: SurveyConfig(until_year=-5), SurveyError, "until_year=-5 (a year"),
    (lambda: SurveyConfig(relative_relevance="a"), SurveyError, "relative_relevance='a' (a finite number)"),
    (lambda: RunOptions(limit=2.5), GraftError, "limit=2.5 (a whole number or None)"),
    (lambda: RunOptions(beams=True), GraftError, "beams=True (a whole number)"),
    (lambda: RunOptions(time_budget_s=-1), GraftError, "time_budget_s=-1 must be >= 0"),
    (lambda: RunOptions(time_budget_s=math.inf), GraftError, "time_budget_s=inf (a finite number or None)"),
    (lambda: RunOptions(systems="teacher"), GraftError, "not one string: systems=['teacher']"),
    (lambda: TrainConfig(max_steps=2.5), ValueError, "max_steps=2.5 (a whole number or None)"),
    (lambda: TrainConfig(seed="a"), ValueError, "seed='a' (a whole number)"),
    (lambda: TrainConfig(seed=-1), ValueError, "seed and data_seed must be >= 0"),
    (lambda: DistillConfig(k_min=2.5), ValueError, "k_min=2.5 (a whole number)"),
    (lambda: DistillConfig(seed=-1), ValueError, "seed must be >= 0"),
    (lambda: SplitConfig(n_ooc=2.5), GraftError, "n_ooc=2.5 (a whole number)"),
    (lambda: SplitConfig(n_ooc="a"), GraftError, "n_ooc='a' (a whole number)"),
    (lambda: TeacherConfig(depth=2.5), ValueError, "depth=2.5 (a whole number)"),
    (lambda: HeuristicConfig(w_cue=math.nan), ValueError, "w_cue=nan (a finite number)"),
    (lambda: LLMConfig(model="m", timeout_s="60"), GraftError, "timeout_s='60' (a finite number)"),
    (lambda: LLMConfig(model=None), GraftError, "model=None (a string)"),
    (lambda: BuildConfig(top_k=2.5), ValueError, "top_k=2.5 (a whole number)"),
])
def test_settings_refuse_wrong_types_and_ranges(make, error, message) -> None:
    with pytest.raises(error, match=re.escape(message)):
        make()


def test_run_options_read_string_paths_and_suites_must_be_a_list(tmp_path) -> None:
    options = RunOptions(index_dir=str(tmp_path / "idx"), results_dir=str(tmp_path))
    assert options.index_dir == tmp_path / "idx" and options.results_dir == tmp_path
    assert RunOptions(systems=["bm25", "bm25", "dense"]).systems == ["bm25", "dense"]
    with pytest.raises(GraftError, match=re.escape("not one string: ['incorpus']")):
        run_suites(tmp_path, "incorpus", RunOptions())


def test_config_records_hold_no_url_password() -> None:
    """survey.json recorded `"base_url": "http://alice:s3cr3tPW@..."` (the manifest did not): every
    config a file records goes through config_to_dict, which replaces the password of every URL."""
    survey = config_to_dict(SurveyConfig(llm="openai", model="m", base_url="http://alice:s3cr3tPW@127.0.0.1:8000/v1"))
    assert survey["base_url"] == "http://alice:***@127.0.0.1:8000/v1"
    build = config_to_dict(BuildConfig(extractor="llm", llm={"model": "m", "base_url": "https://:tok3n@host/v1"}))
    assert build["llm"]["base_url"] == "https://***@host/v1" and "tok3n" not in str(build)
    plain = config_to_dict(SurveyConfig(llm="openai", model="m", base_url="http://127.0.0.1:8000/v1"))
    assert plain == {**survey, "base_url": "http://127.0.0.1:8000/v1"}  # nothing else changed
