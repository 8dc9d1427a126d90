"""The sentence encoder stored as an ONNX file, run with neither torch nor transformers.

A query for a paper outside the corpus (`graft query --text / --record / --queries`, the survey,
`graft eval`) embeds a handful of sentences, yet loading sentence-transformers (and with it torch
and transformers) takes most of its time: about 8 of a `--text` query's 9.5 s on 2 cores. The
model's transformer, once exported to ONNX (`graft.encoder_onnx`), needs none of them: the
model folder's `tokenizer.json` tokenises through the `tokenizers` package, ONNX Runtime runs the
transformer, and the pooling is a few NumPy lines.

Where such an export is kept: the user cache (`graft.store.user_cache_dir`: `$GRAFT_CACHE`, else
`~/.cache/graft`), `encoders/<fingerprint>.onnx` with a JSON sidecar. The export depends on the
model alone, so every index of the model shares one (86 MiB for MiniLM). The fingerprint names the
model folder's files (names, sizes, modification times), so another model, or the same model changed
on disk, never reads a stale export. `graft build` writes it when its encoder moves to ONNX Runtime
(the bytes are already in memory), and later builds run that file instead of exporting again; where
there is none yet (an index built on a GPU or on torch,
the cache deleted), the first query exports and writes it once, and later queries start without
torch. The folder may be deleted at any time.

Only models whose whole pipeline this module reproduces are stored (`light_spec`): a Transformer
module, then Pooling by the CLS token, the mean or the max of the tokens, then optionally
Normalize, with `max_seq_length` given in `sentence_bert_config.json` and a `tokenizer.json`.
Anything else (a Dense layer, weighted pooling, prompts, extra tokenizer arguments) is encoded by
sentence-transformers as before, and so is a model with a default prompt. The vectors equal
sentence-transformers' to float32 rounding (tests/test_encoder_store.py: within 1e-6 of its ONNX
Runtime path and 2e-6 of PyTorch on demo-corpus texts, empty, accented and over-long ones included;
on 500 cs768 out-of-corpus papers the same facet items and edge weights within 2.4e-7 of PyTorch's,
`python -m experiments.ooc_encoder`, docs/results/ooc_encoder_cs768.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graft.errors import ConfigError
from graft.jsonio import read_json_file
from graft.store import atomic_path, user_cache_dir

#: The store's folder inside the user cache.
STORE = "encoders"

#: Sidecar format; a sidecar of another format or version is ignored (the model is exported again).
FORMAT, VERSION = "graft-encoder-onnx", 1

#: Pooling modes reproduced here, by sentence-transformers' Pooling config key.
POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}

#: Pooling config keys that must be off (modes not reproduced here).
POOLING_OFF = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")

#: `sentence_bert_config.json` keys understood here; any other key may change the tokenisation.
SBERT_KEYS = {"max_seq_length", "do_lower_case"}


def available() -> bool:
    """True when onnxruntime and tokenizers are importable (neither needs torch)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "tokenizers"))


def default_store() -> Path:
    """Where encoder exports are kept: `STORE` in the user cache."""
    return user_cache_dir() / STORE


@dataclass(frozen=True)
class Spec:
    """What the light pipeline needs of a model folder (`light_spec`)."""

    max_length: int  # tokens, special tokens included (sentence-transformers' max_seq_length)
    lowercase: bool  # sentence-transformers' do_lower_case: lowercase before the tokenizer's normaliser
    pooling: str  # "cls", "mean" or "max"
    dim: int
    pad_token: str
    padding_left: bool


def _read_json(path: Path) -> Any:
    return read_json_file(path)


def _short_type(entry: dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def light_spec(model_path: str | Path) -> Spec | str:
    """The `Spec` of a sentence-transformers folder whose pipeline this module reproduces, or why
    it does not (a sentence)."""
    root = Path(model_path)
    try:
        modules = _read_json(root / "modules.json")
        kinds = [_short_type(m) for m in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            return f"modules {kinds} (reproduced: Transformer, Pooling[, Normalize])"
        if modules[0].get("path", "") not in ("", "."):
            return "the transformer is not at the folder's top level"
        sbert = _read_json(root / "sentence_bert_config.json")
        if set(sbert) - SBERT_KEYS or not isinstance(sbert.get("max_seq_length"), int):
            return f"sentence_bert_config.json {sorted(sbert)} (reproduced: max_seq_length [, do_lower_case])"
        pooling = _read_json(root / modules[1]["path"] / "config.json")
        modes = [name for key, name in POOLING.items() if pooling.get(key)]
        if len(modes) != 1 or any(pooling.get(key) for key in POOLING_OFF):
            return f"pooling {sorted(k for k, v in pooling.items() if v is True)} (reproduced: one of cls, mean, max)"
        if not (root / "tokenizer.json").is_file():
            return "no tokenizer.json"
        st_config = root / "config_sentence_transformers.json"
        if st_config.is_file() and _read_json(st_config).get("default_prompt_name"):
            return "a default prompt (sentence-transformers prepends it to every text)"
        tok_config = _read_json(root / "tokenizer_config.json") if (root / "tokenizer_config.json").is_file() else {}
        pad = tok_config.get("pad_token")
        if pad is None and (root / "special_tokens_map.json").is_file():
            pad = _read_json(root / "special_tokens_map.json").get("pad_token")
        if isinstance(pad, dict):
            pad = pad.get("content")
        if not isinstance(pad, str):
            return "no pad token"
        return Spec(max_length=int(sbert["max_seq_length"]), lowercase=bool(sbert.get("do_lower_case", False)),
                    pooling=modes[0], dim=int(pooling["word_embedding_dimension"]), pad_token=pad,
                    padding_left=tok_config.get("padding_side", "right") == "left")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return f"unreadable model configuration ({exc})"


def fingerprint(model_path: str | Path) -> str:
    """A digest of the model folder's files: relative names, sizes and modification times."""
    root = Path(model_path)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        h.update(f"{path.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _paths(store: Path, model_path: str | Path) -> tuple[Path, Path]:
    key = fingerprint(model_path)
    return store / f"{key}.onnx", store / f"{key}.json"


def writable(store: Path) -> bool:
    """True when `store` exists or can be made, and files can be written in it."""
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(store, os.W_OK)


def save(store: Path, model_path: str | Path, onnx_bytes: bytes, input_names: list[str]) -> Path | None:
    """Store an export of `model_path`'s transformer (its ONNX bytes and input names) in `store`;
    nothing for a model `light_spec` does not reproduce. Each file is written under a temporary name
    and renamed, the sidecar last, so a reader sees a whole export or none.

    Returns:
        the ONNX file's path, or None when nothing was stored (an unreproduced model, a read-only
        or full disk).
    """
    spec = light_spec(model_path)
    if isinstance(spec, str):
        return None
    onnx_path, meta_path = _paths(store, model_path)
    meta = {"format": FORMAT, "version": VERSION, "model": str(model_path), "fingerprint": onnx_path.stem,
            "input_names": list(input_names), "spec": asdict(spec), "bytes": len(onnx_bytes)}
    try:
        for path, data in ((onnx_path, onnx_bytes), (meta_path, json.dumps(meta, indent=1).encode())):
            with atomic_path(path) as tmp:
                tmp.write_bytes(data)
    except OSError:
        return None
    return onnx_path


def _matching(store: Path, model_path: str | Path) -> tuple[Spec, Path, dict[str, Any]] | None:
    """The spec, ONNX file and sidecar of a stored export that fits the model as it is now, or None."""
    onnx_path, meta_path = _paths(store, model_path)
    spec = light_spec(model_path)
    try:
        meta = _read_json(meta_path)
    except (OSError, ValueError):
        return None
    if (isinstance(spec, str) or not isinstance(meta, dict) or meta.get("format") != FORMAT
            or meta.get("version") != VERSION or meta.get("spec") != asdict(spec) or not onnx_path.is_file()
            or onnx_path.stat().st_size != meta.get("bytes")):  # a file cut short is exported again
        return None
    return spec, onnx_path, meta


def stored_export(store: Path, model_path: str | Path) -> tuple[Path, list[str]] | None:
    """The ONNX file and input names of a stored export that fits the model as it is now, or None:
    what `encoder_onnx.OnnxBackbone` runs instead of exporting the model again."""
    found = _matching(store, model_path)
    return None if found is None else (found[1], list(found[2].get("input_names") or []))


def load(store: Path, model_path: str | Path, *, threads: int | None = None) -> StoredEncoder | None:
    """The stored export of `model_path` ready to run, or None when there is none for the model as it
    is now (no file, another fingerprint or sidecar version, a configuration that changed, a file
    ONNX Runtime cannot read, or onnxruntime / tokenizers missing)."""
    found = _matching(store, model_path) if available() else None
    if found is None:
        return None
    spec, onnx_path, meta = found
    try:
        return StoredEncoder(model_path, onnx_path, spec, list(meta["input_names"]), threads=threads)
    except Exception:  # noqa: BLE001 - a truncated or foreign file: export again
        return None


class StoredEncoder:
    """One model's stored export: `tokenizers`, ONNX Runtime and NumPy pooling.

    Args:
        model_path: the sentence-transformers folder (its `tokenizer.json`).
        onnx_path: the stored export of its transformer.
        spec: `light_spec(model_path)`.
        input_names: the export's inputs (`input_ids`, `attention_mask`[, `token_type_ids`]).
        threads: ONNX Runtime's intra-op threads (None: its default, the physical cores).
    """

    def __init__(self, model_path: str | Path, onnx_path: Path, spec: Spec, input_names: list[str], *,
                 threads: int | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer, normalizers

        self.spec = spec
        self.input_names = input_names
        self.tokenizer = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
        # as sentence-transformers calls the tokenizer: pad to the batch's longest text, truncate
        # to max_seq_length (the file's own padding and truncation settings are overridden there too)
        self.tokenizer.enable_truncation(max_length=spec.max_length, strategy="longest_first")
        pad_id = self.tokenizer.token_to_id(spec.pad_token)
        if pad_id is None:
            raise ConfigError(f"pad token {spec.pad_token!r} is not in the vocabulary")
        self.tokenizer.enable_padding(direction="left" if spec.padding_left else "right", pad_id=pad_id,
                                      pad_token=spec.pad_token)
        if spec.lowercase:
            current = self.tokenizer.normalizer
            self.tokenizer.normalizer = (normalizers.Sequence([normalizers.Lowercase(), current])
                                         if current is not None else normalizers.Lowercase())
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        options.log_severity_level = 3  # errors only
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 embeddings of `texts`, one batch (the caller batches)."""
        return self._run(texts, False)[0]

    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One batch's unit embeddings (as `encode`) with what they were pooled from: the
        transformer's token states (b, t, d), the attention mask (b, t) and each token's character
        span in its text (b, t, 2; (0, 0) for special and padding tokens)."""
        return self._run(texts, True)

    def _run(self, texts: list[str], tokens: bool) -> tuple[Any, ...]:
        encodings = self.tokenizer.encode_batch(list(texts))
        columns = {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings],
                   "token_type_ids": [e.type_ids for e in encodings]}
        inputs = {k: np.asarray(columns[k], dtype=np.int64) for k in self.input_names}
        hidden = self.session.run(["last_hidden_state"], inputs)[0]
        mask = np.asarray(columns["attention_mask"], dtype=np.float32)[..., None]
        if self.spec.pooling == "cls":
            out = hidden[:, 0]
        elif self.spec.pooling == "max":
            out = np.where(mask > 0, hidden, np.float32(-1e9)).max(axis=1)
        else:
            out = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), np.float32(1e-9))
        out = np.asarray(out, dtype=np.float32)
        out = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        if not tokens:  # a query's sentences: no per-token offsets to gather
            return (out,)
        offsets = np.asarray([[list(o) for o in e.offsets] for e in encodings], dtype=np.int64).reshape(len(texts), -1, 2)
        special = np.asarray([e.special_tokens_mask for e in encodings], dtype=bool).reshape(len(texts), -1)
        offsets[special] = 0
        return out, np.asarray(hidden, dtype=np.float32), mask[..., 0] > 0, offsets
