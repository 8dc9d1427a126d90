"""Tokenised distillation pairs, length-grouped batches and the collator.

Reads `train/pairs.parquet` with pyarrow only: the GPU machines that run the trainer need not have
polars. Each example is `encode_prompt(...) + encode_target(...)` (`graft.prompts`); labels are
-100 on the prompt and on padding, so the cross-entropy covers the target DocID and its EOS only.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graft.errors import ConfigError
from graft.prompts import encode_prompt, encode_target, prompt_for
from training.packing import prompt_group_ids, prompt_grouped_batches

#: Columns of `train/pairs.parquet` the trainer reads (the file holds more: provenance).
PAIR_COLUMNS = ("facet", "source_text", "target_docid_id", "target_docid")
IGNORE_INDEX = -100  # label value torch's cross-entropy skips


@dataclass
class EncodedPairs:
    """Token ids of every example: prompt then target.

    Attributes:
        input_ids: one int32 array per example (prompt + target DocID + EOS).
        prompt_lengths: prompt tokens of each example (labels are masked there).
    """

    input_ids: list[np.ndarray]
    prompt_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self.input_ids))

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def n_target_tokens(self) -> int:
        return int(self.lengths.sum() - self.prompt_lengths.sum())

    def fingerprint(self) -> str:
        """Hash of the token ids and prompt lengths: a resumed run must see the same data."""
        h = hashlib.sha256()
        h.update(np.asarray(self.prompt_lengths, dtype=np.int64).tobytes())
        for x in self.input_ids:
            h.update(np.asarray(x, dtype=np.int32).tobytes())
            h.update(b"|")
        return h.hexdigest()[:16]

    def prompt_groups(self) -> np.ndarray:
        """Prompt id per example: examples with equal prompt tokens share one."""
        return prompt_group_ids(self.input_ids, self.prompt_lengths)

    def example(self, i: int) -> dict[str, Any]:
        ids = self.input_ids[i]
        p = int(self.prompt_lengths[i])
        labels = ids.astype(np.int64)
        labels[:p] = IGNORE_INDEX
        return {"input_ids": ids, "labels": labels, "prompt_length": p}


def read_pairs(path: str | Path, columns: Sequence[str] = PAIR_COLUMNS) -> Any:
    """Read the pairs table (a `pyarrow.Table`).

    Raises:
        ValueError: a required column is missing (the message lists what is there).
    """
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise ConfigError(f"{path}: pairs table lacks column(s) {missing} (has {schema.names}); delete it "
                         f"and rerun `graft train INDEX` to rebuild the pairs")
    return pq.read_table(path, columns=list(columns))


def read_docid_tokens(path: str | Path) -> dict[tuple[str, int], list[int]]:
    """(facet, docid_id) -> the DocID's token ids, from `docids/docids.parquet` (pyarrow)."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["facet", "docid_id", "token_ids"]).to_pydict()
    return {(f, int(d)): list(ids) for f, d, ids in zip(t["facet"], t["docid_id"], t["token_ids"])}


def encode_pairs(
    tokenizer: Any,
    facets: Sequence[str],
    sources: Sequence[str],
    docids: Sequence[str],
    *,
    target_ids: Sequence[Sequence[int] | None] | None = None,
    max_length: int = 512,
) -> EncodedPairs:
    """Tokenise examples.

    Args:
        tokenizer: the base model's tokenizer.
        facets, sources, docids: per example, the facet, the source item text and the DocID text.
        target_ids: per example, the DocID's token ids from `docids.parquet` (exactly the trie's
            sequence); None entries (or None overall) re-encode the DocID text.
        max_length: examples longer than this have their source text cut (the target never is).
    Returns:
        the encoded examples, in input order.
    Raises:
        ValueError: lengths differ, or max_length leaves no room for a prompt.
    """
    n = len(facets)
    if not (len(sources) == len(docids) == n) or (target_ids is not None and len(target_ids) != n):
        raise ConfigError(f"facets, sources, docids (and target_ids) must have one entry per pair; got "
                         f"{n}, {len(sources)}, {len(docids)}")
    # Prompts repeat (one source item feeds many edges), so encode each distinct one once.
    keys = list(dict.fromkeys(zip(facets, sources)))
    encoded = tokenizer([prompt_for(f, s) for f, s in keys])["input_ids"] if keys else []
    prompt_of = dict(zip(keys, encoded))
    targets: dict[Any, list[int]] = {}
    out_ids: list[np.ndarray] = []
    prompt_lengths = np.empty(n, dtype=np.int64)
    for i in range(n):
        given = target_ids[i] if target_ids is not None else None
        tkey = tuple(given) if given is not None else docids[i]
        tgt = targets.get(tkey)
        if tgt is None:
            tgt = targets[tkey] = encode_target(tokenizer, docids[i], given)
        prompt = prompt_of[(facets[i], sources[i])]
        if len(prompt) + len(tgt) > max_length:
            prompt = encode_prompt(tokenizer, facets[i], sources[i], max_tokens=max_length - len(tgt))
        prompt_lengths[i] = len(prompt)
        out_ids.append(np.asarray(list(prompt) + tgt, dtype=np.int32))
    return EncodedPairs(out_ids, prompt_lengths)


def encode_pairs_table(table: Any, tokenizer: Any, *, docid_tokens: dict[tuple[str, int], list[int]] | None = None,
                       max_length: int = 512) -> EncodedPairs:
    """`encode_pairs` over a pyarrow pairs table (columns `PAIR_COLUMNS`)."""
    cols = table.to_pydict() if hasattr(table, "to_pydict") else dict(table)
    targets = None
    if docid_tokens is not None:
        targets = [docid_tokens.get((f, int(d))) for f, d in zip(cols["facet"], cols["target_docid_id"])]
    return encode_pairs(tokenizer, cols["facet"], cols["source_text"], cols["target_docid"],
                        target_ids=targets, max_length=max_length)


def epoch_seed(seed: int, epoch: int) -> int:
    """Seed of one epoch's order: a pure function of (seed, epoch), so a resumed run replays it."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{epoch}".encode()).digest()[:8], "little")


def length_grouped_batches(lengths: Sequence[int] | np.ndarray, batch_size: int, *, seed: int,
                           mega_batch_mult: int = 50) -> list[list[int]]:
    """Batches of similar-length examples in a seeded random order.

    Shuffle, cut into mega-batches of `mega_batch_mult * batch_size`, sort each by length
    (longest first) and cut it into batches, then shuffle the batches; the longest batch goes
    first so an out-of-memory error shows at step one (as transformers' LengthGroupedSampler).

    Args:
        lengths: tokens per example.
        batch_size: examples per batch (the last batch may be smaller).
        seed: order seed (see `epoch_seed`).
        mega_batch_mult: mega-batch size in batches; larger groups tighter, smaller keeps more
            randomness.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.asarray(lengths)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    mega = max(1, mega_batch_mult) * batch_size
    batches: list[list[int]] = []
    for start in range(0, len(order), mega):
        chunk = order[start : start + mega]
        # stable sort on -length keeps the shuffled order among equal lengths
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size].tolist() for i in range(0, len(chunk), batch_size))
    perm = rng.permutation(len(batches))
    batches = [batches[i] for i in perm]
    if batches:
        longest = max(range(len(batches)), key=lambda b: max(lengths[batches[b]]))
        batches[0], batches[longest] = batches[longest], batches[0]
    return batches


def random_batches(n: int, batch_size: int, *, seed: int) -> list[list[int]]:
    """Plain shuffled batches (the baseline length grouping is measured against)."""
    order = np.random.default_rng(seed).permutation(n)
    return [order[i : i + batch_size].tolist() for i in range(0, n, batch_size)]


def padding_fraction(batches: Sequence[Sequence[int]], lengths: Sequence[int] | np.ndarray) -> float:
    """Share of the padded batch tensors that is padding."""
    lengths = np.asarray(lengths)
    real = padded = 0
    for b in batches:
        lb = lengths[list(b)]
        real += int(lb.sum())
        padded += int(lb.max()) * len(lb)
    return 1.0 - real / padded if padded else 0.0


class Collator:
    """Pads a list of examples into one tensor batch.

    With `target_logits_only` (the default) the batch is left-padded, so every example's target
    ends at the last position: the model then computes the LM head over the last `logits_to_keep`
    positions only (the longest target + 1) instead of every position — the same loss, with a
    fraction of the head's FLOPs and logits memory (the head is ~20% of a Llama-1B step at vocab
    128k). `position_ids` count from each example's first real token, so positions are exactly
    those of the unpadded example. Without it: right padding, full-length labels (any causal LM).

    Args:
        pad_id: the tokenizer's pad id (labels are masked by position, not by this id, so it may
            equal EOS).
        pad_to_multiple_of: round the padded length up (8 suits GPU tensor cores); None = exact.
        target_logits_only: see above; needs a model whose forward takes `logits_to_keep`
            (every causal LM in transformers >= 4.50).
    """

    def __init__(self, pad_id: int, pad_to_multiple_of: int | None = None, *, target_logits_only: bool = True) -> None:
        self.pad_id = int(pad_id)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.target_logits_only = target_logits_only

    def __call__(self, examples: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
        import torch

        width = max(len(e["input_ids"]) for e in examples)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            width = (width + m - 1) // m * m
        ids = np.full((len(examples), width), self.pad_id, dtype=np.int64)
        labels = np.full((len(examples), width), IGNORE_INDEX, dtype=np.int64)
        mask = np.zeros((len(examples), width), dtype=np.int64)
        left = self.target_logits_only
        keep = 0
        for row, e in enumerate(examples):
            k = len(e["input_ids"])
            cols = slice(width - k, width) if left else slice(0, k)
            ids[row, cols] = e["input_ids"]
            labels[row, cols] = e["labels"]
            mask[row, cols] = 1
            keep = max(keep, int((e["labels"] != IGNORE_INDEX).sum()) + 1)
        batch: dict[str, Any] = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if left:
            batch["position_ids"] = torch.from_numpy(np.maximum(mask.cumsum(1) - 1, 0))
            # the model shifts labels by one inside its loss: the first kept position (the last
            # prompt token) predicts the first target token
            keep = min(keep, width)
            batch["labels"] = torch.from_numpy(np.ascontiguousarray(labels[:, width - keep :]))
            batch["logits_to_keep"] = keep
        else:
            batch["labels"] = torch.from_numpy(labels)
        return batch


class BatchPlan:
    """The global stream of micro-batches and the part each optimizer step consumes.

    The stream is every epoch's `length_grouped_batches` (seeded by `epoch_seed(seed, epoch)`)
    one after the other; optimizer step s takes micro-batches [s·A·P, (s+1)·A·P) (A accumulation
    steps, P processes), process p every P-th of them. It is a pure function of its arguments, so
    a resumed run skips exactly the micro-batches already consumed.

    Args:
        lengths: tokens per example.
        micro: examples per micro-batch (per process).
        accumulation: micro-batches per process and optimizer step.
        processes: data-parallel processes.
        seed: order seed.
        mega_batch_mult: see `length_grouped_batches`.
        groups: prompt id per example (`training.packing.prompt_group_ids`): when given, each epoch
            is `training.packing.prompt_grouped_batches` (a prompt's pairs together, for prompt
            sharing) instead of length-grouped batches.
    """

    def __init__(self, lengths: np.ndarray, micro: int, accumulation: int = 1, processes: int = 1, *,
                 seed: int = 0, mega_batch_mult: int = 50, groups: np.ndarray | None = None) -> None:
        self.lengths = np.asarray(lengths)
        self.micro, self.acc, self.procs = micro, accumulation, processes
        self.seed, self.mega = seed, mega_batch_mult
        self.groups = None if groups is None else np.asarray(groups)
        self.per_epoch = math.ceil(len(self.lengths) / micro)
        self._epoch: tuple[int, list[list[int]]] | None = None

    def steps_for(self, epochs: float) -> int:
        """Optimizer steps that cover `epochs` passes over the data (at least 1)."""
        return max(1, math.ceil(epochs * self.per_epoch / (self.acc * self.procs)))

    def micro_batch(self, g: int) -> list[int]:
        """Example indices of global micro-batch g."""
        epoch, pos = divmod(g, self.per_epoch)
        if self._epoch is None or self._epoch[0] != epoch:
            if self.groups is not None:
                batches = prompt_grouped_batches(self.groups, self.micro, seed=epoch_seed(self.seed, epoch),
                                                 lengths=self.lengths)
            else:
                batches = length_grouped_batches(self.lengths, self.micro, seed=epoch_seed(self.seed, epoch),
                                                 mega_batch_mult=self.mega)
            self._epoch = (epoch, batches)
        return self._epoch[1][pos]

    def _globals(self, s: int) -> range:
        base = s * self.acc * self.procs
        return range(base, base + self.acc * self.procs)

    def step(self, s: int, rank: int = 0) -> list[list[int]]:
        """Process `rank`'s micro-batches of optimizer step s, in accumulation order."""
        return [self.micro_batch(g) for g in self._globals(s)[rank :: self.procs]]

    def step_tokens(self, s: int, weights: np.ndarray | None = None) -> int:
        """Tokens (or `weights` summed per example) of step s over all processes."""
        w = self.lengths if weights is None else weights
        return int(sum(int(w[self.micro_batch(g)].sum()) for g in self._globals(s)))
