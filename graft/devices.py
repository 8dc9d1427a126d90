"""Torch device names, checked before any model is loaded."""

from __future__ import annotations

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
