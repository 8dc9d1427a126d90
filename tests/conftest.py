from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
CS768 = REPO.parent / "shared" / "data" / "cs768" / "papers.jsonl.gz"


def cs768_path() -> Path:
    """The cs768 corpus beside the checkout; tests that need it skip where it is absent."""
    if not CS768.is_file():
        pytest.skip(f"cs768 corpus not found at {CS768} (../shared/data is absent on this machine)")
    return CS768


@pytest.fixture(scope="session")
def encoder():
    """The packaged MiniLM encoder on PyTorch, loaded once per session. Its backend is fixed: an
    "auto" encoder would move to ONNX Runtime with whichever test first brings it a bulk call, and
    what later tests record (a manifest's `embedding.backend`) would hang on the order they ran in."""
    from graft.encoder import Encoder

    return Encoder(backend="torch")


@pytest.fixture(scope="module")
def torch_one_thread():
    """Tiny-model steps are too small to gain from intra-op threads, and on a shared CPU OpenMP
    spin-waits make two threads many times slower than one. Modules opt in with
    `pytestmark = pytest.mark.usefixtures("torch_one_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
