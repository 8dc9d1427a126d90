"""Local Hugging Face model folders: what one must hold before it is loaded (GRAFT never
downloads a model, so a folder is checked up front and its gap named)."""

from __future__ import annotations

import os
from pathlib import Path

#: Files of a Hugging Face model folder that hold its weights (one of them, or shards named by an index).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")

#: Files that hold a tokenizer (one of them suffices).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def model_folder_problem(path: str | os.PathLike[str], *, weights: bool = True,
                         tokenizer: bool = True) -> str | None:
    """What keeps `path` from being a loadable model folder, or None: it does not exist, is not a
    folder, or has no config.json, (with `weights`) no weights or (with `tokenizer`) no tokenizer.
    The reason ends a sentence that starts with the path ("has no config.json")."""
    path = Path(path).expanduser()
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is a file, not a model folder"
    if not (path / "config.json").is_file():
        return "has no config.json"
    if weights and not any((path / name).is_file() for name in WEIGHT_FILES):
        return f"has no weights ({', '.join(WEIGHT_FILES)})"
    if tokenizer and not any((path / name).is_file() for name in TOKENIZER_FILES):
        return f"has no tokenizer ({', '.join(TOKENIZER_FILES)})"
    return None
