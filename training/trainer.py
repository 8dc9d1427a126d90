"""The generative retriever's trainer: full fine-tuning, cross-entropy on the target DocID only.

A custom accelerate loop in the style of Hugging Face's `no_trainer` examples: `accelerator.prepare`,
`accelerator.accumulate(model)`, AdamW with linear warm-up and decay, bf16 autocast on GPUs that
support it (never on the CPU). By default the pairs of a prompt are batched together and each
prompt is computed once for all its targets (`training.packing`: the same loss per batch, a third
of the tokens on real pairs); `pack_prompts=False` gives one padded row per pair in length-grouped
batches (`training.data.BatchPlan`). It runs on one CPU, one GPU or several:
`accelerate launch -m cli.app train INDEX [options]` (`graft train`, the only training command).

The data order is a pure function of (data_seed, epoch), so a run killed mid-way and restarted
with the same command resumes from its newest checkpoint (`training.checkpoints`), skips exactly
the consumed batches and ends at the same step with the same weights (bit-identical on the CPU).
Only the main process writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graft.config import config_from_dict, type_problems
from graft.devices import attention_kernels
from graft.errors import ConfigError, GraftError
from training import checkpoints as ckpts
from training.data import BatchPlan, Collator, EncodedPairs
from training.packing import PACKED_ATTENTION, PackedCollator, packed_loss


@dataclass
class TrainConfig:
    """Trainer settings, recorded in the model folder, in every checkpoint and in manifest.json.

    Names mean what `transformers.TrainingArguments`' do (epochs = num_train_epochs, lr =
    learning_rate, save_every_steps = save_steps, ...); the loop is our own accelerate loop, so only
    the fields it uses exist. Unknown keys are an error (`from_dict`).
    """

    epochs: float = 2.0  # passes over the pairs (GRAFT reference: 2)
    max_steps: int | None = None  # optimizer steps; when set it overrides epochs
    batch_size: int = 16  # effective batch = per-device batch x accumulation x processes (reference: 16)
    per_device_batch_size: int | None = None  # micro-batch per process; None = batch_size / processes
    lr: float = 5e-5  # peak AdamW learning rate (reference: 5e-5)
    weight_decay: float = 0.0  # decoupled AdamW decay, never on norms/biases (TrainingArguments default)
    warmup_ratio: float = 0.03  # share of steps with linear warm-up; then linear decay to 0
    max_grad_norm: float = 1.0  # clip the global L2 gradient norm (TrainingArguments default); 0 = off
    adam_beta1: float = 0.9  # TrainingArguments default
    adam_beta2: float = 0.999  # TrainingArguments default
    adam_epsilon: float = 1e-8  # TrainingArguments default
    fused_adamw: bool = True  # AdamW as one fused kernel (adamw_torch_fused); False = torch's foreach AdamW
    max_length: int = 512  # tokens per example; longer prompts are cut, targets never (reference: 512)
    bf16: bool | None = None  # bf16 autocast; None = when the GPU supports it; never on the CPU
    seed: int = 42  # torch RNG: random init of `tiny`, dropout if a model has any
    data_seed: int | None = None  # batch order; None = seed
    mega_batch_mult: int = 50  # length grouping: sort within groups of this many micro-batches
    pad_to_multiple_of: int | None = None  # round padded length up; None = 8 on GPU (tensor cores), exact on CPU
    target_logits_only: bool = True  # LM head over target positions only (left padding); same loss, fewer FLOPs
    pack_prompts: bool = True  # a prompt once for all its targets in a micro-batch (training.packing); same loss
    pack_row_tokens: int = 512  # packing: most tokens per packed row (bounds attention's quadratic part)
    layers: int | None = None  # keep the base model's first N decoder layers (a shallower decoder); None = all
    freeze_embeddings: bool = False  # the token embeddings (and a tied LM head) are not trained
    save_every_steps: int = 500  # checkpoint interval in optimizer steps; 0 = none
    save_total_limit: int = 2  # checkpoints kept (the newest)
    logging_steps: int = 10  # read the loss off the device (a sync) every N steps
    progress_every_s: float = 120.0  # output not a terminal: a progress line every N seconds (and at the end)

    def __post_init__(self) -> None:
        problems = type_problems(self)  # 2.5 steps or a string seed: named before the ranges below
        if problems:
            raise ConfigError("TrainConfig: " + "; ".join(problems))
        if self.seed < 0 or (self.data_seed is not None and self.data_seed < 0):
            raise ConfigError(f"seed and data_seed must be >= 0, got {self.seed}, {self.data_seed}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1 (or None to use epochs), got {self.max_steps}")
        if self.max_steps is None and not 0 < self.epochs < math.inf:
            raise ConfigError(f"epochs must be finite and > 0, got {self.epochs}")
        if self.layers is not None and self.layers < 1:
            raise ConfigError(f"layers must be >= 1 (or None for all), got {self.layers}")
        for name in ("batch_size", "max_length", "save_total_limit", "logging_steps", "mega_batch_mult",
                     "pack_row_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.per_device_batch_size is not None and self.per_device_batch_size < 1:
            raise ConfigError(f"per_device_batch_size must be >= 1, got {self.per_device_batch_size}")
        if not 0 < self.lr < math.inf:
            raise ConfigError(f"lr must be finite and > 0, got {self.lr}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.save_every_steps < 0:
            raise ConfigError(f"save_every_steps must be >= 0, got {self.save_every_steps}")
        if not 0 <= self.progress_every_s < math.inf:
            raise ConfigError(f"progress_every_s must be finite and >= 0 (0 = a line every step), got "
                              f"{self.progress_every_s}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        return config_from_dict(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def order_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed


@dataclass
class TrainResult:
    """What one `fit` call did. Token counts are real (non-padding) tokens over all processes."""

    steps: int
    examples: int
    tokens: int  # tokens trained on, all steps (resumed ones included)
    target_tokens: int  # of which target tokens (the ones with a loss)
    final_loss: float | None  # mean loss of the last logging window
    losses: list[tuple[int, float]]  # (step, mean loss since the previous entry)
    seconds: float  # wall time of the whole run, interrupted parts included
    call_seconds: float  # wall time of this call's part (0 when already_done)
    tokens_per_s: float  # of this call's part of the run (the pairs' tokens, as one row per pair counts them)
    pairs_per_s: float  # of this call's part of the run
    resumed_from: int | None  # step of the checkpoint this call started from
    already_done: bool  # a finished model with the same fingerprint was found; nothing trained
    processes: int
    per_device_batch_size: int
    gradient_accumulation_steps: int
    mixed_precision: str
    fingerprint: str
    model_dir: str | None
    model: Any = field(default=None, repr=False)  # the trained model, unwrapped (None if already_done)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "model"}
        out["losses"] = [list(x) for x in self.losses]
        return out


StepCallback = Callable[[int, dict[str, Any]], None]


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class _Progress:
    """Training progress on the main process unless quiet: a step bar with loss, tokens/s and ETA
    (rich) on a terminal; otherwise (output redirected to a file, a background run) a plain line
    every `every_s` seconds and at the end: step, loss, pairs/s, tokens/s, elapsed and ETA."""

    def __init__(self, enabled: bool, total: int, start: int, *, every_s: float = 120.0,
                 stream: Any = None, terminal: bool | None = None) -> None:
        import sys

        self.bar = None
        self.stream = None
        self.total, self.start, self.every_s = total, start, every_s
        if not enabled:
            return
        stream = stream or sys.stdout
        if terminal is None:
            terminal = bool(getattr(stream, "isatty", lambda: False)())
        if not terminal:
            self.stream, self.last_line = stream, time.perf_counter()
            self.stream.write(f"train: {total - start} steps to go (from step {start} of {total}); progress "
                              f"every {every_s:g} s\n")
            self.stream.flush()
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tps]} tok/s"),
                            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
        self.bar.start()
        self.task = self.bar.add_task("train", total=total, completed=start, loss="-", tps="-")

    def update(self, step: int, loss: float | None, tokens_per_s: float, pairs_per_s: float = 0.0,
               elapsed: float = 0.0) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, tps=f"{tokens_per_s:,.0f}",
                            **({"loss": f"{loss:.4f}"} if loss is not None else {}))
        elif self.stream is not None:
            now = time.perf_counter()
            if now - self.last_line >= self.every_s or step == self.total:
                self.last_line = now
                done = step - self.start
                eta = elapsed / done * (self.total - step) if done > 0 else float("nan")
                self.stream.write(
                    f"train: step {step}/{self.total} ({step / self.total:.1%}) loss "
                    f"{'-' if loss is None else f'{loss:.4f}'} pairs/s {pairs_per_s:,.2f} tokens/s "
                    f"{tokens_per_s:,.0f} elapsed {_clock(elapsed)} eta "
                    f"{_clock(eta) if math.isfinite(eta) else '-'}\n")
                self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class TrainingDiverged(GraftError):
    """The training loss became nan or inf: the weights are lost, and nothing is saved."""


class _LossLog:
    """Mean loss per logging window, read off the device without stalling it.

    On a GPU the reduced loss is copied to the host asynchronously and read once an event says the
    copy is done (a step or so later), so logging adds no host-device sync to the loop.
    """

    def __init__(self, losses: list[tuple[int, float]], cuda: bool) -> None:
        self.losses, self.cuda, self.pending = losses, cuda, []

    def push(self, step: int, value: Any) -> None:
        import torch

        if not self.cuda:
            self.losses.append((step, float(value)))
            return
        host = value.detach().to("cpu", non_blocking=True)  # lands in pinned memory
        event = torch.cuda.Event()
        event.record()
        self.pending.append((step, host, event))

    def poll(self, wait: bool = False) -> None:
        while self.pending and (wait or self.pending[0][2].query()):
            step, host, event = self.pending.pop(0)
            event.synchronize()
            self.losses.append((step, float(host)))

    @property
    def last(self) -> float | None:
        return self.losses[-1][1] if self.losses else None


def process_state() -> Any:
    """accelerate's process state; on a machine without CUDA it must be told `cpu=True` at first
    creation, or several launched processes (torchrun / accelerate launch) would not form a group."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def batch_layout(config: TrainConfig, processes: int) -> tuple[int, int]:
    """(per-device batch, gradient accumulation steps) that make `config.batch_size` on `processes`.

    Raises:
        ValueError: the batch size is not a multiple of the per-device batch times the processes.
    """
    micro = config.per_device_batch_size or max(1, config.batch_size // processes)
    if config.batch_size % (micro * processes):
        raise ConfigError(f"batch_size {config.batch_size} is not a multiple of per-device batch {micro} x "
                         f"{processes} process(es); choose sizes that divide")
    return micro, config.batch_size // (micro * processes)


def check_run(config: TrainConfig, processes: int) -> None:
    """Refuse, before any data is made, the settings `fit` would refuse on this machine: a batch
    size that does not divide, bf16 without a supporting GPU.

    Raises:
        ValueError: naming the setting.
    """
    batch_layout(config, processes)
    _mixed_precision(config)


def _mixed_precision(config: TrainConfig) -> str:
    import torch

    supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if config.bf16 and not supported:
        raise ConfigError("bf16=True needs a CUDA GPU with bf16 support; use bf16=None (auto) or False")
    return "bf16" if supported and config.bf16 is not False else "no"


def shape_model(model: Any, config: TrainConfig) -> Any:
    """Apply the config's model shape: keep the first `layers` decoder layers (the saved model's config
    says so, and it loads as that shallower model), and freeze the token embeddings. In place."""
    if config.layers is not None:
        stack = model.get_decoder().layers
        if config.layers > len(stack):
            raise ConfigError(f"layers={config.layers}, but the base model has {len(stack)} decoder layers")
        if config.layers < len(stack):
            model.get_decoder().layers = stack[: config.layers]
            model.config.num_hidden_layers = config.layers
            if isinstance(getattr(model.config, "layer_types", None), list):
                model.config.layer_types = model.config.layer_types[: config.layers]
    if config.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)  # a tied LM head shares this tensor
    return model


def _optimizer(model: Any, config: TrainConfig) -> Any:
    import torch

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel per parameter group for the whole update (TrainingArguments' adamw_torch_fused),
    # the same arithmetic as the foreach implementation without its whole-model temporaries (on the
    # CPU too: docs/training.md#prompt-sharing-and-the-trainers-cost-on-a-cpu)
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_epsilon, fused=config.fused_adamw,
                             foreach=None if config.fused_adamw else True)


def _fingerprint(config: TrainConfig, data: EncodedPairs, record: dict[str, Any], layout: dict[str, int]) -> str:
    """What a resumed run must share with the interrupted one: data, settings, base model, layout."""
    relevant = {k: v for k, v in config.to_dict().items()
                if k not in ("save_every_steps", "save_total_limit", "logging_steps", "progress_every_s",
                             "fused_adamw")}  # fused_adamw: the same update by another kernel
    if not config.pack_prompts:  # the plain layout: the fingerprint of runs made before packing existed
        for k in ("pack_prompts", "pack_row_tokens"):
            relevant.pop(k)
    blob = json.dumps({"config": relevant, "data": data.fingerprint(), "record": record, "layout": layout},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fit(
    model: Any,
    tokenizer: Any,
    data: EncodedPairs,
    model_dir: str | Path | None,
    config: TrainConfig | None = None,
    *,
    resume: bool = True,
    quiet: bool = False,
    on_step: StepCallback | None = None,
    save_final: bool = True,
    record: dict[str, Any] | None = None,
) -> TrainResult:
    """Fine-tune `model` on encoded pairs.

    Args:
        model: a causal LM with float32 weights (bf16 is autocast on supporting GPUs).
        tokenizer: its tokenizer (saved beside the final model; gives the pad id).
        data: the encoded examples.
        model_dir: `<index>/model`: checkpoints go to `checkpoints/`, the final model beside them.
            None: no checkpoints, no final save (benchmarks).
        config: trainer settings.
        resume: continue from the newest checkpoint (it must have the same fingerprint); a
            finished model with the same fingerprint is kept and nothing is trained.
        quiet: no progress bar.
        on_step: `on_step(step, info)` runs on every process after each optimizer step and its
            checkpoint (info: loss, tokens, elapsed seconds, total steps, the model in training);
            an exception it raises stops training (tests simulate a kill with it).
        save_final: write the final model, tokenizer and training record into `model_dir`.
        record: facts that identify the run beyond data and config (base model, sampling); part
            of the fingerprint and of the training record.
    Returns:
        the run's `TrainResult`.
    Raises:
        ValueError: no data; a batch size that does not divide; bf16 without a supporting GPU;
            a checkpoint of another run while resuming.
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    config = config or TrainConfig()
    record = dict(record or {})
    if len(data) == 0:
        raise ConfigError("no training examples: the pairs table is empty")
    mixed = _mixed_precision(config)
    cpu = not torch.cuda.is_available()
    procs = process_state().num_processes
    micro, acc = batch_layout(config, procs)
    # The scheduler is stepped by hand once per optimizer step (accelerate would step it once per
    # process per step otherwise).
    accelerator = Accelerator(cpu=cpu, mixed_precision=mixed, gradient_accumulation_steps=acc,
                              step_scheduler_with_optimizer=False)
    set_seed(config.seed)  # here, when training starts; never at import

    attention = getattr(model.config, "_attn_implementation", None)
    if config.pack_prompts and attention not in PACKED_ATTENTION:
        raise ConfigError(f"pack_prompts needs a model whose attention takes a 4D mask ({', '.join(PACKED_ATTENTION)}); "
                          f"this one uses {attention!r}: load it with attn_implementation='sdpa' or train with "
                          f"pack_prompts=False (--no-pack)")
    plan = BatchPlan(data.lengths, micro, acc, procs, seed=config.order_seed, mega_batch_mult=config.mega_batch_mult,
                     groups=data.prompt_groups() if config.pack_prompts else None)
    total = config.max_steps or plan.steps_for(config.epochs)
    layout = {"per_device_batch_size": micro, "accumulation": acc, "processes": procs, "total_steps": total}
    fingerprint = _fingerprint(config, data, record, layout)
    model_dir = Path(model_dir) if model_dir is not None else None
    ckpt_dir = model_dir / "checkpoints" if model_dir is not None else None
    common = {"examples": len(data), "processes": procs, "per_device_batch_size": micro,
              "gradient_accumulation_steps": acc, "mixed_precision": mixed, "fingerprint": fingerprint,
              "model_dir": str(model_dir) if model_dir is not None else None}

    done_record = ckpts.read_training_record(model_dir) if (resume and model_dir is not None) else None
    if done_record is not None and done_record.get("fingerprint") == fingerprint:
        r = done_record["result"]
        return TrainResult(steps=r["steps"], tokens=r["tokens"], target_tokens=r["target_tokens"],
                           final_loss=r["final_loss"], losses=[tuple(x) for x in r["losses"]],
                           seconds=r["seconds"], call_seconds=0.0, tokens_per_s=0.0, pairs_per_s=0.0,
                           resumed_from=None,
                           already_done=True, **common)

    shape_model(model, config)
    state: dict[str, Any] = {"step": 0, "tokens": 0, "target_tokens": 0, "losses": [], "seconds": 0.0}
    ckpt = ckpts.last_checkpoint(model_dir) if (resume and model_dir is not None) else None
    if ckpt is not None:
        saved = ckpts.read_trainer_state(ckpt)
        if saved.get("fingerprint") != fingerprint:
            raise ConfigError(f"checkpoint {ckpt} belongs to another run (other pairs, base model or settings; "
                             f"its settings: {saved.get('config')}); rerun with --no-resume to start over")
        ckpts.load_model_weights(model, ckpt)
        state = saved
    elif ckpt_dir is not None and not resume and accelerator.is_main_process:
        shutil.rmtree(ckpt_dir, ignore_errors=True)  # --no-resume: never resume these later either

    optimizer = _optimizer(model, config)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total), total)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    if ckpt is not None:
        ckpts.load_training_state(ckpt, optimizer, scheduler)

    on_gpu = accelerator.device.type == "cuda"
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    multiple = config.pad_to_multiple_of or (8 if on_gpu else None)
    if config.pack_prompts:
        collate: Any = PackedCollator(pad_id, config.pack_row_tokens, attention=attention, pad_to_multiple_of=multiple)
    else:
        collate = Collator(pad_id, multiple, target_logits_only=config.target_logits_only)
    ones = np.ones(len(data), dtype=np.int64)
    target_len = data.lengths - data.prompt_lengths
    start = int(state["step"])
    tokens, target_tokens = int(state["tokens"]), int(state["target_tokens"])
    losses = [tuple(x) for x in state["losses"]]
    log = _LossLog(losses, cuda=on_gpu)
    progress = _Progress(accelerator.is_main_process and not quiet, total, start, every_s=config.progress_every_s)
    running = torch.zeros((), device=accelerator.device)
    since_log, t0, tokens0, pairs = 0, time.perf_counter(), tokens, 0
    model.train()
    try:
        with attention_kernels():  # never cuDNN's attention: see graft.devices.SDPA_BACKENDS
            for step in range(start, total):
                for ids in plan.step(step, accelerator.process_index):
                    batch = collate([data.example(i) for i in ids])
                    # pinned + non_blocking: the copy overlaps the previous step's kernels
                    batch = {k: (v.pin_memory().to(accelerator.device, non_blocking=True)
                                 if on_gpu and isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
                    with accelerator.accumulate(model):
                        loss = packed_loss(model, batch) if config.pack_prompts else model(**batch).loss
                        accelerator.backward(loss)
                        if accelerator.sync_gradients and config.max_grad_norm:
                            accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                    running += loss.detach().float()
                scheduler.step()
                tokens += plan.step_tokens(step)
                target_tokens += plan.step_tokens(step, target_len)
                pairs += plan.step_tokens(step, ones)
                done, since_log = step + 1, since_log + 1
                if done % config.logging_steps == 0 or done == total:
                    log.push(done, accelerator.reduce(running, reduction="mean") / (since_log * acc))
                    running, since_log = torch.zeros_like(running), 0
                log.poll()
                if procs == 1 and log.last is not None and not math.isfinite(log.last):
                    break  # diverged: the rest would be spent on lost weights (reported below). With
                    # several processes each would see the loss at its own step, so all run to the end
                elapsed = time.perf_counter() - t0
                rate = 1 / elapsed if elapsed > 0 else 0.0
                progress.update(done, log.last, (tokens - tokens0) * rate, pairs * rate, elapsed)
                if ckpt_dir is not None and config.save_every_steps and done % config.save_every_steps == 0 \
                        and done < total:
                    accelerator.wait_for_everyone()
                    log.poll(wait=True)
                    if accelerator.is_main_process:
                        ckpts.save_checkpoint(
                            ckpt_dir, done, accelerator.unwrap_model(model), optimizer, scheduler,
                            {"step": done, "tokens": tokens, "target_tokens": target_tokens, "losses": losses,
                             "seconds": float(state["seconds"]) + elapsed, "fingerprint": fingerprint,
                             "config": config.to_dict(), "data_seed": config.order_seed, "layout": layout,
                             "record": record},
                            config.save_total_limit)
                    accelerator.wait_for_everyone()
                if on_step is not None:
                    on_step(done, {"loss": log.last, "tokens": tokens, "elapsed": elapsed, "total": total,
                                   "model": accelerator.unwrap_model(model)})
    finally:
        progress.close()
    if on_gpu:
        torch.cuda.synchronize()
    log.poll(wait=True)
    diverged = next(((s, v) for s, v in losses if not math.isfinite(v)), None)
    if diverged is not None:
        # a model whose loss is nan or inf has lost its weights: it is never saved as a finished one
        if accelerator.is_main_process and ckpt_dir is not None:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
        raise TrainingDiverged(f"training diverged: the loss was {diverged[1]} at step {diverged[0]} of {total}; "
                               f"no model was saved. Train again with a lower --lr (this run: {config.lr:g})")
    seconds = time.perf_counter() - t0
    trained = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    result = TrainResult(steps=total, tokens=tokens, target_tokens=target_tokens, final_loss=log.last,
                         losses=losses, seconds=float(state["seconds"]) + seconds, call_seconds=seconds,
                         tokens_per_s=(tokens - tokens0) / seconds if seconds > 0 else 0.0,
                         pairs_per_s=pairs / seconds if seconds > 0 else 0.0,
                         resumed_from=start if ckpt is not None else None, already_done=False,
                         model=trained, **common)
    if save_final and model_dir is not None:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            ckpts.save_final_model(model_dir, trained, tokenizer,
                                   {"fingerprint": fingerprint, "train_config": config.to_dict(), "layout": layout,
                                    **record, "result": result.to_dict()})
            shutil.rmtree(ckpt_dir, ignore_errors=True)  # superseded by the final model
        accelerator.wait_for_everyone()
    return result
