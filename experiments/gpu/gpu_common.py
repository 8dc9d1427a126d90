"""What the GPU scripts share (`gpu_train.py`, `gpu_eval.py`): the carry limit, the environment of a
run, device helpers, wheel downloads and files split across several device calls.

A device call carries the working tree plus at most 8 ignored paths, 64 MiB in all, and a warm
machine keeps what an earlier call copied into /tmp for about 30 s. So anything larger (SmolLM2's
98 MB GGUF, the 52 MiB of polars wheels) travels in pieces over back-to-back calls: each call
copies its folder into one directory of the machine, and the last call joins and checks them.
Only the standard library is imported at module level: the scripts import this module before the
carried wheels are installed.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CARRY_LIMIT = 64 * 2**20  # the device tool's working-tree limit per call
#: Room left in every call for the repository's own files.
CARRY_MARGIN = 4 * 2**20
#: Where the device image's Python wants its wheels (`pip download` tags).
WHEEL_TAGS = ("--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
              "--platform", "manylinux_2_28_x86_64")


def bootstrap() -> None:
    """Keep Hugging Face offline and tokenizers single-threaded (the scripts run as
    `python -m experiments.gpu.NAME` from the repository root)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def sync() -> None:
    """Wait for queued CUDA work (timings), a no-op without a GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def free() -> None:
    """Collect garbage and return cached CUDA memory."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def env_info() -> dict[str, Any]:
    """Python, torch, transformers and accelerate versions, the GPU's name, bf16 support, and
    whether polars is importable."""
    import accelerate
    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "gpu": gpu,
            "bf16": bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
            "polars": importlib.util.find_spec("polars") is not None}


def folder_bytes(path: str | Path) -> int:
    """Total size of the files under a folder."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 8 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(8 * 2**20), b""):
            h.update(block)
    return h.hexdigest()


def download_wheels(dest: str | Path, pins: list[str]) -> list[Path]:
    """Download binary wheels for the device image (CPython 3.12, manylinux x86-64), no dependencies.

    Args:
        dest: folder for the wheels.
        pins: requirement strings, e.g. `polars==2.1.0`.
    Returns:
        the wheel files in `dest`.
    Raises:
        subprocess.CalledProcessError: pip could not find or download a wheel.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", *WHEEL_TAGS,
                    "-d", str(dest), *pins], check=True)
    return sorted(dest.glob("*.whl"))


def split_file(src: str | Path, parts: list[tuple[Path, int]]) -> None:
    """Write consecutive byte ranges of `src` to the given files.

    Args:
        src: the file to split.
        parts: (destination, bytes) in order; the sizes must add up to the file's size.
    Raises:
        ValueError: the sizes do not add up.
    """
    size = Path(src).stat().st_size
    if sum(n for _, n in parts) != size:
        raise ValueError(f"parts of {src} add up to {sum(n for _, n in parts)} bytes, the file has {size}")
    with open(src, "rb") as fh:
        for dest, n in parts:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                left = n
                while left:
                    block = fh.read(min(left, 8 * 2**20))
                    out.write(block)
                    left -= len(block)


def join_parts(parts: list[Path], out: str | Path, sha256: str) -> Path:
    """Concatenate file parts and check the result's SHA-256.

    Raises:
        FileNotFoundError: a part is missing.
        ValueError: the joined file has another hash (a part is truncated or from another file).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as dst:
        for part in parts:
            with open(part, "rb") as fh:
                for block in iter(lambda fh=fh: fh.read(8 * 2**20), b""):
                    dst.write(block)
    digest = sha256_file(out)
    if digest != sha256:
        raise ValueError(f"{out}: SHA-256 {digest[:16]}... is not the staged file's {sha256[:16]}...")
    return out
