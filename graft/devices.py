"""Torch device names, checked before any model is loaded."""

from __future__ import annotations

import contextlib
from typing import Any

from graft.errors import GraftError


def resolve_device(device: str) -> str:
    """The torch device for `device`: "cpu", "cuda", "cuda:N", "mps", or "auto" (CUDA if torch sees a
    GPU, else the CPU).

    Raises:
        GraftError: an unknown name, or a GPU that this torch build cannot see.
    """
    if device == "cpu":  # torch is not imported for it: a stored export runs without torch
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise GraftError(f"device '{device}': torch {torch.__version__} sees no CUDA GPU on this machine; "
                             "use --device cpu (or auto)")
        if device != "cuda" and int(device[5:]) >= torch.cuda.device_count():
            raise GraftError(f"device '{device}': this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        return device
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise GraftError("device 'mps': Apple's Metal backend is not available here; use --device cpu")
        return device
    raise GraftError(f"device '{device}' is unknown; allowed: cpu, cuda, cuda:N, mps, auto")


# Attention kernels that training and decoding may use. cuDNN's is left out: since torch 2.11 its
# backward returns NaN gradients on H100/H200 when an explicit mask meets a fully masked query row
# (a left-padded batch's padding) at sequence lengths of 64 mod 128 (pytorch/pytorch#196678): a
# fine-tune of SmolLM2 on an H200 under torch 2.11 had a NaN loss within its first ten steps. Flash and memory-efficient
# attention handle such rows; MATH is the fallback everywhere.
SDPA_BACKENDS: tuple[str, ...] = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def attention_kernels() -> Any:
    """A context in which `scaled_dot_product_attention` picks only among `SDPA_BACKENDS` (forward
    and the backward of what it ran); a no-op where torch lacks `torch.nn.attention`."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - torch < 2.3
        return contextlib.nullcontext()
    return sdpa_kernel([getattr(SDPBackend, name) for name in SDPA_BACKENDS])
