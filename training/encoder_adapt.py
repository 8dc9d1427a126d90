"""A sentence encoder adapted to a corpus: contrastive fine-tuning on the corpus's own citation links.

SPECTER / SciNCL style: a paper and a paper it cites (or that cites it) are a positive pair; the
other papers of the batch are negatives, and with `hard_negatives` each pair brings one more: a
paper close to the first by the generic encoder's title + abstract vectors but not linked to it
(a "graph-near" negative, the kind the generic encoder ranks too high). The loss is the symmetric
in-batch cross-entropy of cosine similarities times `scale` (multiple-negatives ranking).

A batch never holds a paper twice, so no in-batch negative is the anchor's own positive or itself.

Leak-free use: `link_pairs(..., exclude=...)` drops every link that touches an evaluation query, so
the encoder never sees the links a query is judged by (`experiments/adapt_encoder.py` excludes all
in-corpus queries of a split; out-of-corpus queries are not in the build corpus at all).

The result is a sentence-transformers folder: `graft build --embedding-model FOLDER` embeds items
and papers with it (the learned facet scorer keeps reading the packaged encoder).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graft.errors import ConfigError, GraftError


@dataclass(frozen=True)
class AdaptConfig:
    """Settings of one fine-tuning run."""

    epochs: float = 1.0  # passes over the link pairs (a fraction: that share of the first pass)
    batch_size: int = 32  # pairs per step (each paper at most once per batch)
    max_tokens: int = 128  # tokens kept of each title + abstract while training
    lr: float = 2e-5
    warmup: float = 0.1  # share of the steps the learning rate rises over, then falls linearly to 0
    scale: float = 20.0  # cosine similarities times this are the logits
    hard_negatives: bool = True
    negative_ranks: tuple[int, int] = (5, 30)  # a pair's hard negative: one of the anchor's dense neighbours at these ranks
    max_pairs: int | None = None  # at most this many link pairs (a random sample), None: all
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ConfigError(f"epochs must be > 0, got {self.epochs}")
        if self.batch_size < 2:
            raise ConfigError(f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}")
        if self.max_tokens < 8:
            raise ConfigError(f"max_tokens must be >= 8, got {self.max_tokens}")
        if not (0 < self.lr < 1):
            raise ConfigError(f"lr must be in (0, 1), got {self.lr}")
        lo, hi = self.negative_ranks
        if not 1 <= lo < hi:
            raise ConfigError(f"negative_ranks must be 1 <= low < high, got {self.negative_ranks}")


def link_pairs(paper_ids: list[str], citations: Iterable[tuple[str, str]], *,
               exclude: set[str] = frozenset()) -> list[tuple[int, int]]:
    """Undirected citation links between the papers `paper_ids` as (row, row) pairs, lower row first,
    each once; links to papers outside the list, self-citations and every link touching a paper in
    `exclude` are left out."""
    row = {pid: i for i, pid in enumerate(paper_ids)}
    out: set[tuple[int, int]] = set()
    for citing, cited in citations:
        if citing in exclude or cited in exclude:
            continue
        a, b = row.get(citing), row.get(cited)
        if a is None or b is None or a == b:
            continue
        out.add((min(a, b), max(a, b)))
    return sorted(out)


def batches(pairs: list[tuple[int, int]], batch_size: int, rng: random.Random) -> list[list[tuple[int, int]]]:
    """The pairs in shuffled batches of up to `batch_size` in which no paper occurs twice (a pair
    that would repeat one waits for a later batch)."""
    pending = list(pairs)
    rng.shuffle(pending)
    out: list[list[tuple[int, int]]] = []
    while pending:
        batch, seen, rest = [], set(), []
        for a, b in pending:
            if len(batch) < batch_size and a not in seen and b not in seen:
                batch.append((a, b))
                seen.update((a, b))
            else:
                rest.append((a, b))
        out.append(batch)
        pending = rest
    return out


def linked_papers(pairs: list[tuple[int, int]]) -> dict[int, set[int]]:
    """Every paper of `pairs` -> the papers it is linked to."""
    linked: dict[int, set[int]] = {}
    for a, b in pairs:
        linked.setdefault(a, set()).add(b)
        linked.setdefault(b, set()).add(a)
    return linked


def near_negatives(vectors: np.ndarray, linked: dict[int, set[int]], ranks: tuple[int, int],
                   block: int = 1024) -> dict[int, list[int]]:
    """For every paper of `linked` (`linked_papers`): its nearest papers by `vectors` (unit rows) at
    ranks [low, high), less the papers it is linked to: the candidates of its hard negatives."""
    nodes = np.array(sorted(linked), dtype=np.int64)
    lo, hi = ranks
    out: dict[int, list[int]] = {}
    for start in range(0, len(nodes), block):
        rows = nodes[start : start + block]
        sims = vectors[rows] @ vectors.T
        sims[np.arange(len(rows)), rows] = -np.inf
        top = np.argsort(-sims, axis=1)[:, : hi]
        for node, near in zip(rows.tolist(), top.tolist()):
            out[node] = [p for p in near[lo - 1 :] if p not in linked[node]]
    return out


def _schedule(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def adapt_encoder(texts: list[str], pairs: list[tuple[int, int]], out: str | Path,
                  config: AdaptConfig = AdaptConfig(), *, base: str | None = None,
                  vectors: np.ndarray | None = None, threads: int | None = None,
                  log: Callable[[str], None] | None = None, every: int = 20) -> dict[str, Any]:
    """Fine-tune the sentence encoder `base` (a local folder; None: the packaged MiniLM) on the link
    `pairs` between papers whose texts (title + abstract) are `texts`, and save it to `out`.

    Args:
        vectors: the generic encoder's unit vectors of `texts` (rows aligned), needed for hard
            negatives; encoded here when None and `config.hard_negatives`.
        threads: torch threads (None: torch's default).
        log: progress lines (a step every `every` steps: loss, pairs/s, ETA); default stderr.
    Returns:
        What the run did: pairs, steps, seconds, pairs/s, mean loss of the first and last tenth of steps.
    Raises:
        GraftError: no pairs, or a pair naming a text that does not exist.
    """
    import torch
    import torch.nn.functional as F
    from sentence_transformers import SentenceTransformer

    from graft.encoder import Encoder, resolve_model_path

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if not pairs:
        raise GraftError("no citation links to train on (every link was excluded, or the corpus has none)")
    if max(max(p) for p in pairs) >= len(texts) or min(min(p) for p in pairs) < 0:
        raise GraftError("a link pair names a paper row outside the texts")
    if threads:
        torch.set_num_threads(threads)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    pairs = list(pairs)
    if config.max_pairs is not None and len(pairs) > config.max_pairs:
        pairs = rng.sample(pairs, config.max_pairs)
    near: dict[int, list[int]] = {}
    linked = linked_papers(pairs)
    if config.hard_negatives:
        if vectors is None:
            vectors = Encoder(base).encode(texts)
        near = near_negatives(np.asarray(vectors, dtype=np.float32), linked, config.negative_ranks)

    plan: list[list[tuple[int, int]]] = []
    passes = math.ceil(config.epochs)
    for _ in range(passes):
        plan.extend(batches(pairs, config.batch_size, rng))
    plan = plan[: max(1, round(len(plan) * config.epochs / passes))]

    model = SentenceTransformer(resolve_model_path(base), device="cpu")
    encode_tokens = model.max_seq_length  # what the saved model keeps for encoding
    model.max_seq_length = config.max_tokens
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    warmup = max(1, round(config.warmup * len(plan)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _schedule(s, len(plan), warmup))

    prepare = getattr(model, "preprocess", None) or model.tokenize  # `tokenize` before sentence-transformers 6

    def embed(rows: list[int]) -> torch.Tensor:
        features = prepare([texts[r] for r in rows])
        return F.normalize(model(features)["sentence_embedding"], dim=-1)

    losses: list[float] = []
    started = time.perf_counter()
    done_pairs = 0
    for step, batch in enumerate(plan):
        anchors = [a for a, _ in batch]
        positives = [b for _, b in batch]
        in_batch = set(anchors) | set(positives)
        negatives = []
        for a in anchors:
            # never a paper linked to an anchor of the batch: it would be that anchor's false negative
            options = [p for p in near.get(a, ()) if p not in in_batch and not linked.get(p, set()) & in_batch]
            if options:
                pick = rng.choice(options)
                negatives.append(pick)
                in_batch.add(pick)
        a_vec = embed(anchors)
        b_vec = embed(positives + negatives)
        logits = config.scale * a_vec @ b_vec.T
        target = torch.arange(len(batch))
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits[:, : len(batch)].T, target)) / 2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        done_pairs += len(batch)
        if (step + 1) % every == 0 or step + 1 == len(plan):
            spent = time.perf_counter() - started
            rate = done_pairs / spent
            left = sum(len(b) for b in plan[step + 1 :]) / rate if rate else 0.0
            recent = np.mean(losses[-every:])
            log(f"adapt: step {step + 1}/{len(plan)} loss {recent:.4f} pairs/s {rate:.2f} "
                f"elapsed {spent:.0f} s eta {left:.0f} s")
    seconds = time.perf_counter() - started
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.max_seq_length = encode_tokens
    model.save(str(out))
    tenth = max(1, len(losses) // 10)
    return {"pairs": len(pairs), "steps": len(plan), "pairs_trained": done_pairs, "seconds": round(seconds, 1),
            "pairs_per_s": round(done_pairs / seconds, 2) if seconds else None,
            "loss_first": round(float(np.mean(losses[:tenth])), 4),
            "loss_last": round(float(np.mean(losses[-tenth:])), 4),
            "hard_negatives": sum(1 for p in near.values() if p), "config": asdict(config)}
