from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one process a core (`make test` runs `pytest -n 2`): intra-op threads would only contend
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
CS768 = REPO.parent / "shared" / "data" / "cs768" / "papers.jsonl.gz"


#: Fixtures that load the sentence encoder (and so build indexes or embed text): a test that asks for
#: one, directly or through another fixture, is an integration test and is marked `slow`.
ENCODER_FIXTURES = {"encoder", "onnx_encoder"}


def _shared_fixture_module(item) -> str | None:
    """The test module of a module- or session-scoped fixture the test asks for that its own module
    defines (an index built once for the module), or None."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        for fixturedef in defs:
            if fixturedef.scope in ("module", "session") and fixturedef.baseid.endswith(".py"):
                return fixturedef.baseid
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """Mark `slow` every test whose fixtures load the sentence encoder (`make check` leaves them
    out; `make test` runs them). For `pytest -n N --dist loadgroup`, the tests of a module that share
    a fixture built once for it go to one worker together; the others are spread one by one."""
    for item in items:
        if ENCODER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        module = _shared_fixture_module(item)
        if module is not None:
            item.add_marker(pytest.mark.xdist_group(module))


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
    from graphbuild.embeddings import Encoder

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
