"""A static sentence encoder distilled from a transformer one, for corpora too large to encode on CPUs.

A static encoder keeps one vector per vocabulary token; a text's vector is the mean of its tokens'
vectors (sentence-transformers' `StaticEmbedding`), with no transformer pass, so it encodes hundreds
of times as many texts a second as MiniLM on the same cores. The vectors are made from the
transformer the way Model2Vec makes them (Tulkens & van Dongen, 2024):

1. every vocabulary token (special and unused tokens left out) goes through the transformer alone,
   between the end and start tokens (in that order, as Model2Vec does: dense R@20 on cs768's dev part
   0.180 against 0.153 in the usual order), and is mean-pooled as the model pools a text;
2. the token vectors are projected on their top `dims` principal components (PCA);
3. each token's vector is scaled by a smooth inverse frequency weight a / (a + p(token)) (Arora et
   al., 2017), with p counted over sample texts (e.g. the corpus's own abstracts), so that frequent
   tokens ("the", "we", "model") count less in a text's mean; without sample texts no weighting.

The result is a sentence-transformers folder (`StaticEmbedding`, then `Normalize`) that
`graft build --embedding-model DIR` takes as any other. Made locally from the packaged MiniLM: nothing
is downloaded. (The `model2vec` package does the same, but its distillation extra pins an older
transformers than this project needs.)

    python -m training.static_encoder --out /tmp/minilm-static [--sample corpus.jsonl.gz] [--dims 256]
        [--sif-a 3e-3] [--forward]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from graft.errors import ConfigError

#: Principal components kept (Model2Vec's default).
DIMS = 256
#: The smooth inverse frequency constant a of the weight a / (a + p): on cs768's leak-free dev part,
#: dense R@20 0.169 / 0.180 / 0.182 / 0.172 at a = 3e-4 / 1e-3 / 3e-3 / 1e-2 (0.118 unweighted).
SIF_A = 3e-3
#: Tokens per transformer batch while distilling.
BATCH = 512


def token_vectors(model: Any, ids: list[int], *, batch: int = BATCH, reverse: bool = True,
                  progress: Callable[[int], None] | None = None) -> np.ndarray:
    """(len(ids), d) float32: each token id alone between the tokenizer's start and end tokens
    (end and start swapped with `reverse`, as Model2Vec reads them), through the model's
    transformer and its pooling (sentence-transformers `model`)."""
    import torch

    tokenizer = model.tokenizer
    start = [tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else []
    end = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
    if reverse:
        start, end = end, start
    out = np.zeros((len(ids), model.get_embedding_dimension()), dtype=np.float32)
    with torch.inference_mode():
        for at in range(0, len(ids), batch):
            part = ids[at : at + batch]
            input_ids = torch.tensor([[*start, t, *end] for t in part], dtype=torch.long)
            features = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
            if "token_type_ids" in tokenizer.model_input_names:
                features["token_type_ids"] = torch.zeros_like(input_ids)
            for module in model:  # Transformer, Pooling (a Normalize module is left to the end)
                if type(module).__name__ == "Normalize":
                    continue
                features = module(features)
            out[at : at + len(part)] = features["sentence_embedding"].float().numpy()
            if progress is not None:
                progress(len(part))
    return out


def plain_tokenizer(tokenizer: Any) -> Any:
    """A copy of a fast tokenizer's `tokenizers.Tokenizer` that neither pads nor truncates: a static
    encoder reads every token of a text, and padding would count as tokens."""
    from tokenizers import Tokenizer

    plain = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    plain.no_padding()
    plain.no_truncation()
    return plain


def sif_weights(tokenizer: Any, texts: Iterable[str], vocab_size: int, a: float = SIF_A) -> np.ndarray:
    """a / (a + p(token)) per token id, p counted over `texts` tokenised without special tokens."""
    counts = np.zeros(vocab_size, dtype=np.float64)
    backend = plain_tokenizer(tokenizer)
    batch: list[str] = []

    def count(part: list[str]) -> None:
        for enc in backend.encode_batch(part, add_special_tokens=False):
            np.add.at(counts, np.asarray(enc.ids, dtype=np.int64), 1.0)

    for text in texts:
        batch.append(text)
        if len(batch) == 1024:
            count(batch)
            batch = []
    if batch:
        count(batch)
    total = counts.sum()
    if total == 0:
        raise ConfigError("the sample texts hold no tokens to count")
    return (a / (a + counts / total)).astype(np.float32)


def distill(model_path: str | None, out: str | Path, *, dims: int = DIMS, sample: Iterable[str] | None = None,
            only_sample_tokens: bool = False, a: float = SIF_A, reverse: bool = True,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Distil the sentence-transformers model at `model_path` (None: the packaged MiniLM) into a
    static encoder written to `out` (a sentence-transformers folder). Returns what was made.

    Args:
        dims: principal components kept.
        sample: texts whose token frequencies give the SIF weights (None: no weighting).
        a: the SIF constant.
        reverse: read each token between the end and start tokens (False: start, token, end).
        only_sample_tokens: distil only the tokens the sample holds (the others get zero vectors and
            are ignored in a text's mean): faster, for a corpus known in advance.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding

    from graft.encoder import resolve_model_path

    say = progress or (lambda _: None)
    t0 = time.perf_counter()
    model = SentenceTransformer(resolve_model_path(model_path), device="cpu")
    tokenizer = model.tokenizer
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError("distilling needs a fast tokenizer (tokenizer.json)")
    vocab = tokenizer.get_vocab()
    size = max(vocab.values()) + 1
    special = set(tokenizer.all_special_ids)
    keep = sorted(i for tok, i in vocab.items() if i not in special and not (tok.startswith("[unused")))
    weights = np.ones(size, dtype=np.float32)
    if sample is not None:
        weights = sif_weights(tokenizer, sample, size, a)
        if only_sample_tokens:
            keep = [i for i in keep if weights[i] < 1.0]  # counted at least once
    elif only_sample_tokens:
        raise ConfigError("only_sample_tokens needs sample texts")
    if not 1 <= dims <= min(model.get_embedding_dimension(), len(keep)):
        raise ConfigError(f"dims must lie in [1, {min(model.get_embedding_dimension(), len(keep))}] (the "
                          f"encoder's dimension and the tokens distilled), got {dims}")
    say(f"{len(keep)} tokens through the transformer")
    vecs = token_vectors(model, keep, reverse=reverse)
    mean = vecs.mean(axis=0)
    _, _, vt = np.linalg.svd(vecs - mean, full_matrices=False)
    reduced = (vecs - mean) @ vt[:dims].T
    table = np.zeros((size, dims), dtype=np.float32)  # special and unused tokens: zero vectors
    table[keep] = reduced * weights[keep][:, None]
    static = StaticEmbedding(plain_tokenizer(tokenizer), embedding_weights=table)
    SentenceTransformer(modules=[static, Normalize()], device="cpu").save(str(out))
    info = {"tokens": len(keep), "dims": dims, "weighted": sample is not None,
            "seconds": round(time.perf_counter() - t0, 1), "out": str(out)}
    say(f"written to {out} in {info['seconds']} s")
    return info


def corpus_texts(path: str | Path) -> Iterable[str]:
    """Title + abstract of each record of a JSON-lines corpus (`.jsonl` or `.jsonl.gz`); lines that
    are not JSON objects, or too long to read, are passed over."""
    import gzip

    from graft.jsonio import iter_lines, loads
    from graft.text import paper_text

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        for _, line in iter_lines(fh):
            if not line or not line.strip():
                continue
            try:
                rec = loads(line, f"a line of {path}")
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield paper_text(rec.get("title"), rec.get("abstract"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write the static encoder to")
    ap.add_argument("--model", default=None, help="sentence-transformers folder to distil (default: packaged MiniLM)")
    ap.add_argument("--dims", type=int, default=DIMS, help=f"principal components kept (default {DIMS})")
    ap.add_argument("--sample", default=None, help="a JSON-lines corpus (.jsonl[.gz]) whose titles + abstracts give "
                                                   "the token frequencies of the SIF weights (default: no weighting)")
    ap.add_argument("--sif-a", type=float, default=SIF_A, help=f"the SIF constant a (default {SIF_A:g})")
    ap.add_argument("--forward", action="store_true", help="read each token between the start and end tokens "
                                                           "(default: end, token, start)")
    args = ap.parse_args(argv)
    if not args.sif_a > 0:
        ap.error(f"--sif-a must be > 0, got {args.sif_a}")
    info = distill(args.model, args.out, dims=args.dims, sample=corpus_texts(args.sample) if args.sample else None,
                   a=args.sif_a, reverse=not args.forward, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
