"""Prompt sharing: each prompt of a micro-batch is computed once for all of its targets.

One source item feeds up to N = 10 (and with reverse-neighbour pairs more) distillation pairs, all
with the same prompt (~41 tokens) and each with its own short target (~13 tokens). The plain
layout (`training.data.Collator`) runs the prompt once per pair. Here the pairs of a micro-batch
that share a prompt become one *segment*: the prompt once, then every target, with position ids
and an attention mask that give each target token exactly the context it has in its own pair:

- a prompt token sees the earlier tokens of its prompt;
- target token i of target t sees its whole prompt and tokens 0..i of t, never another target;
- positions continue from the prompt's end for each target (each starts at the prompt length).

So every hidden state the loss reads equals the plain layout's (up to float summation order), and
the loss, the mean cross-entropy over all target tokens of the micro-batch, is the plain loss of the
same pairs (`tests/test_training.py` checks loss and gradients against the plain path).

Layout of a row (token order is free: the mask and position ids say what each token sees):
``[pad][every segment's prompt but its last token][every segment's last prompt token][every target
but its EOS]``. The LM head runs over the row's suffix only (the last prompt tokens predict each
target's first token, a target's token i predicts its token i + 1). A target's last input (EOS) is
dropped: no token attends to it and it predicts nothing. Segments fill rows of at most
`row_tokens` tokens (first fit, longest first); rows are left-padded to the longest.

`prompt_grouped_batches` keeps a prompt's pairs together in the batch order so that micro-batches
share prompts: each epoch visits every pair once, in a seeded order of prompts (and of targets
within a prompt), cut into micro-batches of the same size as the plain order's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graft.errors import ConfigError

#: Attention implementations whose forward takes a custom 4D mask (a boolean one for sdpa, an
#: additive float one for eager); flash-attention kernels take none.
PACKED_ATTENTION = ("sdpa", "eager")


def prompt_group_ids(input_ids: Sequence[np.ndarray], prompt_lengths: np.ndarray) -> np.ndarray:
    """Per example, the id of its prompt (examples whose prompt tokens are equal share one), numbered
    in order of first appearance."""
    ids: dict[bytes, int] = {}
    out = np.empty(len(input_ids), dtype=np.int64)
    for i, (x, p) in enumerate(zip(input_ids, prompt_lengths)):
        out[i] = ids.setdefault(np.asarray(x[: int(p)], dtype=np.int32).tobytes(), len(ids))
    return out


def prompt_grouped_batches(groups: np.ndarray, batch_size: int, *, seed: int,
                           lengths: np.ndarray | None = None) -> list[list[int]]:
    """Micro-batches that keep the pairs of a prompt together.

    Prompts are shuffled, the pairs of each prompt are shuffled and kept adjacent, and the stream is
    cut into batches of `batch_size` pairs (the last may be smaller): as many batches as the plain
    order makes, each pair once. A prompt with more pairs than a batch spans two or more batches.

    Args:
        groups: prompt id per example (`prompt_group_ids`).
        batch_size: pairs per micro-batch.
        seed: order seed (`training.data.epoch_seed`).
        lengths: tokens per example; when given, the batch with the most tokens goes first (an
            out-of-memory error shows at step one).
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    groups = np.asarray(groups)
    rng = np.random.default_rng(seed)
    members = np.argsort(groups, kind="stable")
    starts = np.flatnonzero(np.r_[True, groups[members][1:] != groups[members][:-1]]) if len(groups) else []
    bounds = list(zip(starts, [*starts[1:], len(groups)]))
    stream: list[int] = []
    for g in rng.permutation(len(bounds)):
        a, b = bounds[g]
        stream.extend(members[a:b][rng.permutation(b - a)].tolist())
    batches = [stream[i : i + batch_size] for i in range(0, len(stream), batch_size)]
    if lengths is not None and batches:
        lengths = np.asarray(lengths)
        heaviest = max(range(len(batches)), key=lambda b: int(lengths[batches[b]].sum()))
        batches[0], batches[heaviest] = batches[heaviest], batches[0]
    return batches


class PackedCollator:
    """Packs a micro-batch's examples into rows where each distinct prompt appears once.

    Args:
        pad_id: the tokenizer's pad id.
        row_tokens: most tokens per row (a segment longer than this alone gets its own row, its
            targets split over several rows if need be); bounds the attention's quadratic part.
        attention: the model's attention implementation: "sdpa" (boolean mask, True = attend) or
            "eager" (additive float mask: 0 or the float32 minimum).
        pad_to_multiple_of: round the row width up (8 suits GPU tensor cores); None = exact.
    Returns (when called on examples, each {"input_ids", "prompt_length"}):
        input_ids, position_ids [rows, width]; attention_mask [rows, 1, width, width];
        logits_to_keep (int: the suffix of each row the LM head runs over); logit_index [targets
        tokens] (flat index into the [rows, logits_to_keep] logits of the position predicting each
        label); labels [target tokens]; and `tokens` (real tokens packed, for throughput).
    """

    def __init__(self, pad_id: int, row_tokens: int = 512, *, attention: str = "sdpa",
                 pad_to_multiple_of: int | None = None) -> None:
        if attention not in PACKED_ATTENTION:
            raise ConfigError(f"prompt packing needs a model whose attention takes a 4D mask ({', '.join(PACKED_ATTENTION)}); "
                              f"this one uses {attention!r}: load it with attn_implementation='sdpa' or train "
                              f"with pack_prompts=False (--no-pack)")
        if row_tokens < 2:
            raise ConfigError(f"row_tokens must be >= 2, got {row_tokens}")
        self.pad_id, self.row_tokens, self.attention = int(pad_id), row_tokens, attention
        self.pad_to_multiple_of = pad_to_multiple_of

    def segments(self, examples: Sequence[dict[str, Any]]) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """(prompt, its targets) of each distinct prompt, in order of first appearance; a prompt whose
        targets do not fit one row is split into several segments."""
        by_prompt: dict[bytes, tuple[np.ndarray, list[np.ndarray]]] = {}
        for e in examples:
            ids, p = np.asarray(e["input_ids"], dtype=np.int64), int(e["prompt_length"])
            if not 1 <= p < len(ids):
                raise ConfigError(f"an example needs a prompt and a target; got prompt length {p} of {len(ids)}")
            by_prompt.setdefault(ids[:p].tobytes(), (ids[:p], []))[1].append(ids[p:])
        out = []
        for prompt, targets in by_prompt.values():
            chunk: list[np.ndarray] = []
            size = len(prompt)
            for t in targets:
                if chunk and size + len(t) - 1 > self.row_tokens:
                    out.append((prompt, chunk))
                    chunk, size = [], len(prompt)
                chunk.append(t)
                size += len(t) - 1  # the EOS is not an input
            out.append((prompt, chunk))
        return out

    def layout(self, examples: Sequence[dict[str, Any]]) -> tuple[list[tuple[np.ndarray, list[np.ndarray]]],
                                                                 list[list[int]], list[int], int]:
        """(segments, the segments of each row, tokens of each segment, row width): the packing
        without the tensors (`__call__` builds them; counting tokens needs only this)."""
        segs = self.segments(examples)
        size = [len(p) + sum(len(t) - 1 for t in ts) for p, ts in segs]
        rows: list[list[int]] = []
        room: list[int] = []
        for s in sorted(range(len(segs)), key=lambda s: -size[s]):  # first fit, longest first
            r = next((r for r in range(len(rows)) if room[r] >= size[s]), None)
            if r is None:
                rows.append([])
                room.append(self.row_tokens)
                r = len(rows) - 1
            rows[r].append(s)
            room[r] -= size[s]
        width = max(sum(size[s] for s in row) for row in rows)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            width = (width + m - 1) // m * m
        return segs, rows, size, width

    def __call__(self, examples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        import torch

        segs, rows, size, width = self.layout(examples)
        n_rows = len(rows)
        ids = np.full((n_rows, width), self.pad_id, dtype=np.int64)
        pos = np.zeros((n_rows, width), dtype=np.int64)
        seg = np.full((n_rows, width), -1, dtype=np.int64)  # segment of each token; -1 = padding
        tgt = np.full((n_rows, width), -1, dtype=np.int64)  # target within its segment; -1 = prompt
        suffix = [len(row) + sum(sum(len(t) - 1 for t in segs[s][1]) for s in row) for row in rows]
        keep = max(suffix)
        index: list[int] = []
        labels: list[int] = []
        for r, row in enumerate(rows):
            col = width - sum(size[s] for s in row)
            for s in row:  # every prompt but its last token
                p = segs[s][0]
                ids[r, col : col + len(p) - 1] = p[:-1]
                pos[r, col : col + len(p) - 1] = np.arange(len(p) - 1)
                seg[r, col : col + len(p) - 1] = s
                col += len(p) - 1
            last = {}
            for s in row:  # the last prompt tokens: they predict each target's first token
                p = segs[s][0]
                ids[r, col], pos[r, col], seg[r, col] = p[-1], len(p) - 1, s
                last[s] = col
                col += 1
            for s in row:
                p, targets = segs[s]
                for k, t in enumerate(targets):
                    n = len(t) - 1
                    ids[r, col : col + n] = t[:-1]
                    pos[r, col : col + n] = len(p) + np.arange(n)
                    seg[r, col : col + n], tgt[r, col : col + n] = s, k
                    # label t[0] is read at the last prompt token, t[i] at the input t[i - 1]
                    for c, label in zip([last[s], *range(col, col + n)], t):
                        index.append(r * keep + c - (width - keep))
                        labels.append(int(label))
                    col += n
        # query q sees key k: same segment, not later, and k is a prompt token or of q's own target
        allowed = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
                   & (pos[:, None, :] <= pos[:, :, None])
                   & ((tgt[:, None, :] == -1) | (tgt[:, None, :] == tgt[:, :, None])))
        allowed |= np.eye(width, dtype=bool)[None]  # padding sees itself: no row of the softmax is empty
        mask = torch.from_numpy(allowed[:, None])
        if self.attention == "eager":
            mask = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, torch.finfo(torch.float32).min)
        return {"input_ids": torch.from_numpy(ids), "position_ids": torch.from_numpy(pos), "attention_mask": mask,
                "logits_to_keep": keep, "logit_index": torch.tensor(index, dtype=torch.int64),
                "labels": torch.tensor(labels, dtype=torch.int64), "tokens": int((seg >= 0).sum())}


def packed_loss(model: Any, batch: dict[str, Any]) -> Any:
    """Mean cross-entropy over the target tokens of a packed batch (the plain path's loss: transformers'
    causal-LM loss of the same pairs, float32 logits, mean over the labelled tokens)."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], logits_to_keep=batch["logits_to_keep"], use_cache=False)
    # log-probabilities of every kept position, then the label's at the position predicting it (a last
    # prompt token predicts several labels): gathering scalars, not rows of vocabulary-wide logits
    # (index_select of those rows took most of a step's forward time on the CPU)
    logp = out.logits.float().flatten(0, 1).log_softmax(-1)
    return -logp[batch["logit_index"], batch["labels"]].mean()
