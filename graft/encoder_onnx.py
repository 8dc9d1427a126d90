"""The sentence encoder's transformer run by ONNX Runtime, for bulk encoding on the CPU.

A build spends most of its time in the encoder (every abstract sentence, every title + abstract).
On the CPU, ONNX Runtime runs MiniLM's transformer about twice as fast as PyTorch at the same
float32 precision, with the same vectors to float32 rounding (`python -m
experiments.encoder_backend`, docs/results/encoder_backend.md). Only the transformer's forward
pass moves: the sentence-transformers model still tokenises (its own truncation and casing), pools
and normalises, module by module, so any model folder sentence-transformers reads keeps its own
pooling.

The model is exported from the loaded PyTorch weights into memory when the backbone is made
(about 1.5 s for MiniLM). Nothing is written to disk here; an `Encoder` given a store (the user
cache's `encoders/`) keeps the export there, and later processes run it without torch
(`graft.encoder_store`).
An `Encoder` on "auto" (its default) makes the backbone with its first call of
`embeddings.AUTO_ONNX_TEXTS` new texts: the few sentences of a query stay on PyTorch.
"""

from __future__ import annotations

import inspect
import io
import warnings
from typing import Any

import numpy as np

from graft.errors import ConfigError, GraftError

#: The transformer inputs the export may take, in the order the exported graph names them.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

#: ONNX opset of the export (supported by the pinned onnxruntime).
OPSET = 17

#: What to do when the packages are missing.
MISSING = ("the onnx encoder backend needs the packages 'onnxruntime' and 'onnx' (pip install onnxruntime onnx), "
           "or use the torch backend")


def available() -> bool:
    """True when onnxruntime and onnx (which torch's exporter writes with) are importable."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def preprocess(model: Any, texts: list[str]) -> dict[str, Any]:
    """sentence-transformers' own tokenisation: `preprocess` (v6) or `tokenize` (older)."""
    fn = getattr(model, "preprocess", None) or model.tokenize
    return fn(texts)


def token_offsets(model: Any, texts: list[str], input_ids: Any) -> np.ndarray | None:
    """Each token's character span in its text, (b, t, 2) with (0, 0) for special and padding
    tokens, from the model's fast tokenizer; None where the tokenizer gives no spans or tokenises
    otherwise than sentence-transformers did (`input_ids`, its batch)."""
    tokenizer = getattr(model, "tokenizer", None)
    first = next(iter(model), None)
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        return None
    if getattr(first, "do_lower_case", False):
        texts = [t.lower() for t in texts]
    enc = tokenizer(list(texts), padding=True, truncation="longest_first", max_length=model.max_seq_length,
                    return_offsets_mapping=True, return_special_tokens_mask=True, return_tensors="np")
    ids = np.asarray(input_ids)
    if enc["input_ids"].shape != ids.shape or not (enc["input_ids"] == ids).all():
        return None
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64)
    offsets[np.asarray(enc["special_tokens_mask"], dtype=bool)] = 0
    return offsets


class OnnxBackbone:
    """A loaded sentence-transformers model whose first module's transformer runs in ONNX Runtime.

    Args:
        model: a `SentenceTransformer` on the CPU whose first module is a Hugging Face transformer
            (`auto_model`) giving `last_hidden_state`.
        threads: ONNX Runtime's intra-op threads (None: torch's thread count, so both backends use
            the same cores).
        keep_bytes: keep the serialised export for `take_bytes` (to store it for later processes).
        exported: (file, input names) of this model's stored export (`graft.encoder_store`):
            run from it instead of exporting, where its inputs are the model's and it loads.
    Raises:
        GraftError: onnxruntime / onnx missing, or a model this export does not cover.
    """

    def __init__(self, model: Any, *, threads: int | None = None, keep_bytes: bool = False,
                 exported: tuple[Any, list[str]] | None = None) -> None:
        if not available():
            raise GraftError(MISSING)
        import onnxruntime as ort
        import torch

        modules = list(model)
        transformer = getattr(modules[0], "auto_model", None) if modules else None
        if transformer is None:
            raise GraftError(f"the ONNX encoder backend needs a transformer as the model's first module; "
                             f"this model starts with {type(modules[0]).__name__ if modules else 'nothing'}")
        sample = preprocess(model, ["An example sentence.", "A second, somewhat longer example sentence."])
        accepted = set(inspect.signature(transformer.forward).parameters)
        self.input_names = [k for k in INPUT_NAMES if k in sample and k in accepted]
        if "input_ids" not in self.input_names:
            raise GraftError(f"the ONNX encoder backend needs a text model taking input_ids; "
                             f"{type(transformer).__name__} does not")
        self.model = model
        self.rest = modules[1:]  # pooling, dense, normalise: run as sentence-transformers runs them
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads or torch.get_num_threads())
        options.log_severity_level = 3  # errors only
        self._bytes: bytes | None = None
        #: True when the session runs the stored export given as `exported` (nothing was exported)
        self.from_stored = False
        if exported is not None and list(exported[1]) == self.input_names:
            try:  # this model's stored export (`graft.encoder_store`): no export to make
                self.session = ort.InferenceSession(str(exported[0]), options, providers=["CPUExecutionProvider"])
                self.from_stored = True
                return
            except Exception:  # noqa: BLE001 - an unreadable file: export as if there were none
                pass

        names = self.input_names

        class Forward(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = transformer

            def forward(self, *args: Any) -> Any:
                return self.inner(**dict(zip(names, args)), return_dict=True).last_hidden_state

        axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]}
        buffer = io.BytesIO()
        was_training = transformer.training
        transformer.eval()
        try:
            with torch.no_grad(), warnings.catch_warnings():
                # the tracer's notes on shape-dependent Python branches (the attention mask's padding
                # check): the exported graph is checked against PyTorch on other shapes in the tests
                warnings.simplefilter("ignore")
                torch.onnx.export(Forward(), tuple(sample[k] for k in names), buffer, input_names=names,
                                  output_names=["last_hidden_state"], dynamic_axes=axes,
                                  opset_version=OPSET, dynamo=False)
        except Exception as exc:
            raise GraftError(f"exporting {type(transformer).__name__} to ONNX failed ({exc}); "
                             "use the torch encoder backend") from exc
        finally:
            transformer.train(was_training)
        self.session = ort.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
        self._bytes = buffer.getvalue() if keep_bytes else None

    def take_bytes(self) -> bytes:
        """The serialised export, once (`keep_bytes=True`; `graft.encoder_store.save` writes it)."""
        if self._bytes is None:
            raise ConfigError("the export's bytes were not kept (keep_bytes=False) or were taken already")
        data, self._bytes = self._bytes, None
        return data

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 embeddings of `texts`, one batch (the caller batches)."""
        return self._run(texts, False)[0]

    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """One batch's unit embeddings (as `encode`) with the transformer's token states (b, t, d),
        the attention mask (b, t) and each token's character span (`token_offsets`, or None)."""
        return self._run(texts, True)

    def _run(self, texts: list[str], tokens: bool) -> tuple[Any, ...]:
        import torch

        # Tokenising and pooling are light; with torch's own thread pool on, its threads keep
        # spinning after each op and take the cores from ONNX Runtime's (the texts/s fall to ~0.75x).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            features = preprocess(self.model, list(texts))
            inputs = {k: np.ascontiguousarray(features[k].numpy(), dtype=np.int64) for k in self.input_names}
            hidden = self.session.run(["last_hidden_state"], inputs)[0]
            mask = features["attention_mask"].numpy() > 0
            offsets = token_offsets(self.model, list(texts), inputs["input_ids"]) if tokens else None
            features["token_embeddings"] = torch.from_numpy(hidden)
            with torch.no_grad():
                for module in self.rest:
                    features = module(features)
            out = features["sentence_embedding"].numpy().astype(np.float32, copy=False)
        finally:
            torch.set_num_threads(threads)
        out = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return (out, np.asarray(hidden, dtype=np.float32), mask, offsets) if tokens else (out,)
