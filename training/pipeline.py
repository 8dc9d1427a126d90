"""`train_index`: the one library call behind `graft train` — pairs, tokenisation, training, manifest.

The pairs in `train/pairs.parquet` are reused when the manifest says they were made with the same
distillation settings and the DocIDs with the same tokenizer; otherwise DocIDs and pairs are
(re)built by `training.pairs.build_pairs`. With several processes (`accelerate launch`) the main
process builds them first and the others then read them.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graft.check import CHECK_PAIRS
from graft.errors import ConfigError, GraftError
from graft.prompts import PROMPT_VERSION
from graft.store import index_lock, lock_holder
from training.base_models import (
    SMOLLM2,
    check_base_model,
    describe_base_model,
    load_tokenizer,
    resolve_base_model,
)
from training.data import encode_pairs_table, read_docid_tokens, read_pairs
from training.trainer import TrainConfig, TrainResult, check_run, fit, process_state


@dataclass
class TrainSummary:
    """What `train_index` did: a dry run's coverage report, or a training run's result."""

    index_dir: Path
    base_model: str
    sampling: str
    dry_run: bool
    pairs: int = 0
    pairs_reused: bool = False
    coverage: dict[str, Any] | None = None  # dry run: naive vs coverage report; else the pairs' coverage
    result: TrainResult | None = None
    check: dict[str, Any] | None = None  # graft.check.PromptCheck.to_dict() of the trained model
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def model_dir(self) -> Path:
        return self.index_dir / "model"

    def to_dict(self) -> dict[str, Any]:
        return {"index": str(self.index_dir), "base_model": self.base_model, "sampling": self.sampling,
                "dry_run": self.dry_run, "pairs": self.pairs, "pairs_reused": self.pairs_reused,
                "coverage": self.coverage, "result": self.result.to_dict() if self.result else None,
                "check": self.check,
                "model_dir": None if self.dry_run else str(self.model_dir), "timings_s": self.timings}


def _fresh_pairs(index_dir: Path, manifest: dict[str, Any], distill: Any, tokenizer: Any) -> bool:
    """True when train/pairs.parquet was made with these settings from DocIDs of this tokenizer."""
    from graft.config import config_to_dict
    from graft.docids import tokenizer_info
    from training.pairs import pairs_path

    stages = manifest.get("stages", {})
    pairs, docids = stages.get("pairs"), stages.get("docids")
    if not (pairs and docids and pairs_path(index_dir).is_file()
            and (index_dir / "docids" / "docids.parquet").is_file()):
        return False
    if pairs.get("config") != config_to_dict(distill):
        return False
    have = docids.get("config", {}).get("tokenizer", {})
    want = tokenizer_info(tokenizer)
    if (have.get("fingerprint"), have.get("vocab_size")) != (want["fingerprint"], want["vocab_size"]):
        return False
    return str(pairs.get("finished_at", "")) >= str(docids.get("finished_at", ""))


def train_index(
    index_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    base_model: str = SMOLLM2,
    sampling: str = "coverage",
    resume: bool = True,
    dry_run: bool = False,
    reporter: Any = None,
    distill: Any = None,
    check_pairs: int = CHECK_PAIRS,
    on_step: Any = None,
) -> TrainSummary:
    """Train the generative retriever of an index into `<index>/model/`.

    Args:
        index_dir: a built index (`graft build`).
        config: trainer settings.
        base_model: `smollm2-135m`, `tiny` or a local Hugging Face folder.
        sampling: `coverage` (GRAFT's coverage-aware distillation) or `naive`.
        resume: continue from the newest checkpoint of the same run; False starts over.
        dry_run: only report the coverage of naive vs coverage-aware pairs; write nothing.
        reporter: a `graft.progress.Reporter` (progress bars, timings); quiet by default.
        distill: a `training.pairs.DistillConfig` (N, K_min, seed); its sampling must agree.
        check_pairs: training pairs decoded after training to check that the model reads its
            prompts (`graft.check`; recorded in the manifest); 0 = no check.
        on_step: passed to `training.trainer.fit` (experiments measure the model during training).
    Returns:
        the summary; the run is recorded as the `train` stage of manifest.json.
    Raises:
        IndexFormatError: not a built index.
        GraftError: the base model cannot be resolved.
        ValueError: bad settings, or a checkpoint of another run while resuming.
    """
    from graft.manifest import read_manifest
    from graft.progress import Reporter
    from training.pairs import DistillConfig
    from training.pairs import dry_run as coverage_dry_run

    index_dir = Path(index_dir)
    config = config or TrainConfig()
    reporter = reporter or Reporter(quiet=True)
    distill = distill or DistillConfig(sampling=sampling)
    if distill.sampling != sampling:
        raise ConfigError(f"sampling={sampling!r} disagrees with the DistillConfig's {distill.sampling!r}")
    if check_pairs < 0:
        raise ConfigError(f"check_pairs must be >= 0 (0 = no check), got {check_pairs}")
    read_manifest(index_dir, require=("build",))  # not a built index: refused before the tokenizer loads
    busy = None if dry_run else lock_holder(index_dir)  # and an index another command writes, at once too
    if busy:
        raise GraftError(f"index '{index_dir}' is being written by {busy}; run graft train again when that has "
                         "finished (or stop it)")
    summary = TrainSummary(index_dir, base_model, sampling, dry_run)
    t0 = time.perf_counter()
    with reporter.stage("tokenizer", total=None, unit=""):
        tokenizer = load_tokenizer(base_model)
    if dry_run:
        with reporter.stage("coverage", total=None, unit=""):
            summary.coverage = coverage_dry_run(index_dir, tokenizer, distill)
        summary.pairs = summary.coverage[sampling]["pairs"]
        summary.timings = reporter.timings()
        return summary

    check_base_model(base_model)  # before the pairs are written
    state = process_state()
    check_run(config, state.num_processes)  # settings fit() would refuse: refused before any write
    # one writer per index: a second `graft train` (or a build) on it is refused, not mixed in
    with index_lock(index_dir, "graft train") if state.is_main_process else nullcontext():
        return _train(index_dir, config, summary, tokenizer, state, base_model=base_model, sampling=sampling,
                      resume=resume, reporter=reporter, distill=distill, t0=t0, check_pairs=check_pairs,
                      on_step=on_step)


def _train(index_dir: Path, config: TrainConfig, summary: TrainSummary, tokenizer: Any, state: Any, *,
           base_model: str, sampling: str, resume: bool, reporter: Any, distill: Any, t0: float,
           check_pairs: int, on_step: Any = None) -> TrainSummary:
    """`train_index` past its checks, under the index's writer lock: pairs, tokenisation, training,
    the manifest's `train` stage."""
    from graft.config import config_to_dict
    from graft.manifest import read_manifest, record_stage
    from training.pairs import build_pairs, pairs_path

    with state.main_process_first():  # the main process builds pairs; the others then reuse them
        manifest = read_manifest(index_dir, require=("build",))
        summary.pairs_reused = _fresh_pairs(index_dir, manifest, distill, tokenizer)
        if not summary.pairs_reused:
            with reporter.stage("pairs", total=None, unit=""):
                _, _, summary.coverage = build_pairs(index_dir, tokenizer, distill)
        else:
            summary.coverage = manifest["stages"]["pairs"].get("counts")
    table = read_pairs(pairs_path(index_dir))
    summary.pairs = table.num_rows
    with reporter.stage("tokenise", total=None, unit=""):
        docid_tokens = read_docid_tokens(index_dir / "docids" / "docids.parquet")
        data = encode_pairs_table(table, tokenizer, docid_tokens=docid_tokens, max_length=config.max_length)
    model, _ = resolve_base_model(base_model, seed=config.seed)
    record = {"base_model": describe_base_model(base_model), "sampling": sampling,
              "distill": config_to_dict(distill), "prompt_version": PROMPT_VERSION,
              "corpus_hash": manifest.get("corpus_hash")}
    result = fit(model, tokenizer, data, summary.model_dir, config, resume=resume, quiet=reporter.quiet,
                 record=record, on_step=on_step)
    summary.result = result
    if result.already_done:
        summary.check = (manifest["stages"].get("train") or {}).get("check")
    elif check_pairs and state.is_main_process and result.model is not None:
        from graft.check import prompt_check
        from graft.docids import load_tries

        with reporter.stage("prompt check", total=None, unit=""):
            summary.check = prompt_check(result.model, tokenizer, load_tries(index_dir), table,
                                         pairs=check_pairs).to_dict()
    # this call's stages only, so that they add up to its total; a resumed run's whole training time,
    # interrupted parts included, is the record's `train_seconds_all_parts`
    summary.timings = {**reporter.timings(), "train": result.call_seconds, "total": time.perf_counter() - t0}
    if state.is_main_process and not result.already_done:
        manifest = read_manifest(index_dir, require=("build",))  # re-read: the pairs stage may be new
        record_stage(index_dir, manifest, "train",
                     config={"train": config.to_dict(), **record},
                     counts={"pairs": summary.pairs, "examples_tokens": data.n_tokens, "steps": result.steps,
                             "tokens": result.tokens, "target_tokens": result.target_tokens,
                             "processes": result.processes,
                             "per_device_batch_size": result.per_device_batch_size,
                             "gradient_accumulation_steps": result.gradient_accumulation_steps},
                     timings=summary.timings,
                     extra={"final_loss": result.final_loss, "losses": [list(x) for x in result.losses],
                            "resumed_from": result.resumed_from, "train_seconds_all_parts": round(result.seconds, 3),
                            "mixed_precision": result.mixed_precision,
                            "tokens_per_s": round(result.tokens_per_s, 1), "fingerprint": result.fingerprint,
                            "model_dir": "model", "check": summary.check})
    return summary
