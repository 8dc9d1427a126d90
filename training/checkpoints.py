"""Trainer checkpoints and the final model folder, each written atomically.

A checkpoint `<index>/model/checkpoints/step-N/` holds:
- `model.safetensors`: the weights (safetensors `save_model`, which handles tied embeddings);
- `optimizer.pt`: the optimizer state dict — tensors and numbers only, read with
  `torch.load(weights_only=True)`, so no pickled objects are executed;
- `scheduler.json`: the LR scheduler's state dict;
- `rng.safetensors`: torch CPU and CUDA RNG states;
- `trainer_state.json`: step, tokens, loss history, elapsed seconds, the TrainConfig, the data
  seed and the run fingerprint. It is written last, so a folder without it is unfinished.
The folder is written under a temporary name and renamed, and only the newest `keep` are kept.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from graft.jsonio import read_json_file
from graft.manifest import MODEL_DONE
from graft.store import FILE_MODE

TRAINER_STATE = "trainer_state.json"
TRAINING_CONFIG = MODEL_DONE  # written last into model/: marks a finished model


def list_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    """Finished checkpoints (those holding trainer_state.json) under `folder`, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        if p.name.startswith("step-") and p.name[5:].isdigit() and (p / TRAINER_STATE).is_file():
            out.append((int(p.name[5:]), p))
    return sorted(out)


def last_checkpoint(model_dir: str | Path) -> Path | None:
    """The newest finished checkpoint under `<model_dir>/checkpoints`, or None."""
    found = list_checkpoints(Path(model_dir) / "checkpoints")
    return found[-1][1] if found else None


def rng_state() -> dict[str, Any]:
    import torch

    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            state[f"cuda_{i}"] = s
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["cpu"])
    cuda = [state[k] for k in sorted((k for k in state if k.startswith("cuda_")), key=lambda k: int(k[5:]))]
    # a checkpoint of another GPU count (or a CPU one) keeps the freshly seeded CUDA RNG
    if torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(folder: Path, step: int, model: Any, optimizer: Any, scheduler: Any,
                    state: dict[str, Any], keep: int) -> Path:
    """Write `folder/step-N` atomically and delete all but the newest `keep` checkpoints.

    Args:
        folder: `<index>/model/checkpoints`.
        step: optimizer steps done.
        model: the unwrapped model.
        optimizer, scheduler: their state dicts are saved.
        state: the trainer state (JSON-serialisable; must hold `step`).
        keep: checkpoints kept.
    """
    import torch
    from safetensors.torch import save_file, save_model

    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step-{step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{step}.", suffix=".tmp", dir=folder))
    try:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "scheduler.json").write_text(json.dumps(scheduler.state_dict()))
        save_file({k: v.contiguous() for k, v in rng_state().items()}, str(tmp / "rng.safetensors"))
        (tmp / TRAINER_STATE).write_text(json.dumps(state, indent=2, default=str))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for _, old in list_checkpoints(folder)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    return read_json_file(checkpoint / TRAINER_STATE)


def load_model_weights(model: Any, checkpoint: Path) -> None:
    """Load a checkpoint's weights into `model` (before `accelerator.prepare`)."""
    from safetensors.torch import load_model

    load_model(model, str(checkpoint / "model.safetensors"), device="cpu")


def load_training_state(checkpoint: Path, optimizer: Any, scheduler: Any) -> None:
    """Restore optimizer, scheduler and RNG states (after `accelerator.prepare`)."""
    import torch
    from safetensors.torch import load_file

    optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", map_location="cpu", weights_only=True))
    scheduler.load_state_dict(read_json_file(checkpoint / "scheduler.json"))
    set_rng_state(load_file(str(checkpoint / "rng.safetensors")))


def save_final_model(model_dir: Path, model: Any, tokenizer: Any, record: dict[str, Any]) -> None:
    """Save model + tokenizer into `model_dir` (HF format) and the training record last.

    Each file is written into a temporary folder and renamed into place (checkpoints/ beside it
    stays untouched); the old record is removed first, so a folder without training_config.json
    is never taken for a finished model.
    """
    model_dir.mkdir(parents=True, exist_ok=True)
    marker = model_dir / TRAINING_CONFIG
    if marker.exists():
        marker.unlink()
    tmp = Path(tempfile.mkdtemp(prefix=".final.", suffix=".tmp", dir=model_dir))
    try:
        from graft.progress import hf_progress_bars

        with hf_progress_bars(False):
            model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        new = {p.name for p in tmp.iterdir()}
        for old in model_dir.glob("model*.safetensors*"):  # shards of an earlier, differently sized model
            if old.name not in new:
                old.unlink()
        for p in tmp.iterdir():
            if p.is_file():  # transformers may write a file through an owner-only temporary one
                os.chmod(p, FILE_MODE)
            os.replace(p, model_dir / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with tempfile.NamedTemporaryFile("w", dir=model_dir, prefix=".training_config.", delete=False) as fh:
        fh.write(json.dumps(record, indent=2, default=str) + "\n")
    os.chmod(fh.name, FILE_MODE)  # readable as the model's own files are, not owner-only
    os.replace(fh.name, marker)


def read_training_record(model_dir: str | Path) -> dict[str, Any] | None:
    """The finished model's training record, or None when `model_dir` holds no finished model."""
    path = Path(model_dir) / TRAINING_CONFIG
    return read_json_file(path) if path.is_file() else None
