"""`graft train`: distil the facet graph into the generative retriever (registered by cli/app.py)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.common import console, err, fail
from cli.options import finite
from graft.check import CHECK_PAIRS, PromptCheck
from graft.errors import ConfigError


def _check_warning(check: dict | None) -> str | None:
    """The prompt check's advice when the model does not read its prompts yet (None otherwise)."""
    parsed = PromptCheck.from_dict(check)
    return parsed.warning() if parsed is not None else None


def print_train_summary(summary, console) -> None:  # noqa: ANN001 (TrainSummary, rich Console)
    """The end-of-run table: pairs, steps, tokens, loss, time, throughput, where the model is."""
    from rich.table import Table

    r = summary.result
    t = Table(title=f"graft train → {summary.model_dir}", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    status = "already trained (same data and settings): kept" if r.already_done else (
        f"resumed from step {r.resumed_from}" if r.resumed_from is not None else "trained from scratch")
    t.add_row("run", status)
    t.add_row("base model", summary.base_model)
    t.add_row("pairs", f"{summary.pairs:,} ({summary.sampling}, {'reused' if summary.pairs_reused else 'built'})")
    cov = summary.coverage or {}
    if "papers_share" in cov:
        t.add_row("papers as target", f"{cov['papers_share']:.2%}")
    t.add_row("steps", f"{r.steps:,} (batch {r.per_device_batch_size} x {r.gradient_accumulation_steps} accum "
                       f"x {r.processes} proc)")
    t.add_row("tokens (target)", f"{r.tokens:,} ({r.target_tokens:,})")
    t.add_row("final loss", "-" if r.final_loss is None else f"{r.final_loss:.4f}")
    t.add_row("precision", r.mixed_precision)
    if r.resumed_from is not None:
        t.add_row("wall time", f"{r.call_seconds:,.1f} s this run, {r.seconds:,.1f} s with the interrupted parts")
    else:
        t.add_row("wall time", f"{r.seconds:,.1f} s")
    if not r.already_done:
        t.add_row("throughput", f"{r.pairs_per_s:,.2f} pairs/s, {r.tokens_per_s:,.0f} tokens/s")
    check = PromptCheck.from_dict(summary.check)
    if check is not None:
        t.add_row("prompt check", check.summary())
    console.print(t)


def train(
    index: Path = typer.Argument(..., help="Index directory (from `graft build`)."),
    base_model: str = typer.Option("smollm2-135m", "--base-model",
                                   help="smollm2-135m (default, offline), tiny (random, for tests) or a local "
                                        "Hugging Face folder such as Llama-3.2-1B-Instruct."),
    sampling: str = typer.Option("coverage", help="Distillation pairs: coverage (GRAFT) or naive."),
    max_edges: int = typer.Option(10, "--max-edges", min=1, help="Coverage-aware pairs: out-edges sampled per "
                                  "source paper and facet (N; GRAFT: 10; K = 20 takes every edge)."),
    epochs: float = typer.Option(2.0, parser=finite(0), metavar="FLOAT", help="Passes over the pairs (> 0)."),
    max_steps: int | None = typer.Option(None, "--max-steps", min=1, help="Optimizer steps (overrides --epochs)."),
    batch_size: int = typer.Option(16, "--batch-size", min=1,
                                   help="Effective batch (per device x accumulation x GPUs)."),
    per_device_batch_size: int | None = typer.Option(
        None, "--per-device-batch-size", min=1, help="Micro-batch per device; the rest is gradient accumulation."),
    lr: float = typer.Option(5e-5, "--lr", parser=finite(0), metavar="FLOAT", help="Peak learning rate (AdamW, linear warm-up and decay)."),
    layers: int | None = typer.Option(None, "--layers", min=1,
                                      help="Keep the base model's first N decoder layers: a shallower decoder, "
                                           "cheaper to train and to query (default: all)."),
    freeze_embeddings: bool = typer.Option(False, "--freeze-embeddings",
                                           help="Do not train the token embeddings (nor an LM head tied to them)."),
    save_every_steps: int = typer.Option(500, "--save-every-steps", min=0, help="Checkpoint interval; 0 = none."),
    pack: bool = typer.Option(True, "--pack/--no-pack",
                              help="Compute each prompt once for all its targets in a batch (the same loss per "
                                   "batch, a fraction of the tokens); --no-pack: one padded row per pair."),
    progress_every: float = typer.Option(120.0, "--progress-every", parser=finite(0),
                                         metavar="SECONDS",
                                         help="When the output is not a terminal (a log file): a progress line "
                                              "(step, loss, pairs/s, ETA) every SECONDS and at the end."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the last checkpoint."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Only print the coverage of naive vs coverage-aware pairs."),
    check_pairs: int = typer.Option(CHECK_PAIRS, "--check-pairs", min=0,
                                    help="Training prompts decoded after training to check that the model reads "
                                         "its prompts (distinct DocIDs back); 0 = no check."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no summary."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Train the generative retriever: DocIDs, distillation pairs, fine-tuning into INDEX/model."""
    from graft.errors import GraftError
    from graft.progress import Reporter
    from training.pairs import DistillConfig
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    try:
        if sampling not in ("coverage", "naive"):
            raise ConfigError(f"--sampling {sampling!r} is unknown; allowed: coverage, naive")
        config = TrainConfig(epochs=epochs, max_steps=max_steps, batch_size=batch_size,
                             per_device_batch_size=per_device_batch_size, lr=lr,
                             save_every_steps=save_every_steps, pack_prompts=pack, progress_every_s=progress_every,
                             layers=layers, freeze_embeddings=freeze_embeddings)
        summary = train_index(index, config, base_model=base_model, sampling=sampling, resume=resume,
                              dry_run=dry_run, reporter=Reporter(quiet=quiet or as_json),
                              distill=DistillConfig(sampling=sampling, max_edges_per_source=max_edges),
                              check_pairs=check_pairs)
    except GraftError as exc:
        fail(exc)
    warning = _check_warning(summary.check)
    if warning:  # on stderr, whatever the output mode
        err.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(summary.to_dict(), indent=2, default=str))
        return
    if dry_run:
        from training.pairs import print_coverage_table

        print_coverage_table(summary.coverage, console)
        return
    if not quiet:
        print_train_summary(summary, console)
