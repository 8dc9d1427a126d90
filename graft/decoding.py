"""Trie-constrained beam search for the generative retriever, through transformers' public hooks.

`TrieLogitsProcessor` is a `transformers.LogitsProcessor`: at each step it reads, for every beam,
the tokens generated after the prompt and lets through only `DocidTrie.allowed_next(prefix)`
(the end-of-sequence token only where the prefix is a complete DocID). Each batch row may belong
to another facet, so all items of a query, across the four facets, decode in one `generate` call
(`decode_items`), left-padded, never one call per item.

Scores. transformers' beam search hands the processor log-probabilities (log-softmax of the
logits). The processor masks them to the allowed tokens and renormalises over those (a second
log-softmax), so each step is a distribution over the trie's continuations and a finished beam's
`sequences_scores` — with `length_penalty=0`, the *summed* log-probability of its tokens, EOS
included — is the log of the probability of that DocID under the constrained model. `decode_items`
returns `exp` of it. Since with `length_penalty=0` a beam's score can only fall as it grows,
`early_stopping=True` (stop once `num_beams` hypotheses are finished) loses nothing.

Prompt sharing. Beam search copies every prompt `num_beams` times before its first forward pass,
so a plain `generate` call encodes each prompt once per beam; with 20 beams and prompts three
times as long as a DocID, that prefill is most of the work. `decode_items` instead runs the
prompts (all but their last token) through the model once, repeats the resulting key/value cache
per beam (`Cache.batch_repeat_interleave`) and hands it to `generate` as its prefilled cache, the
documented way to continue from a cached prefix; `generate` then feeds only the last prompt token
and the DocID tokens. The decoded beams are the same (up to floating-point summation order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor
from transformers.generation import utils as _generation_utils

from graft.devices import attention_kernels
from graft.docids import DocidTrie
from graft.prompts import encode_prompt

#: New tokens per DocID: 12 DocID tokens (graft.docids.MAX_TOKENS) plus the end marker.
MAX_NEW_TOKENS = 13
#: Longest prompt (tokens); a longer facet item is cut by `encode_prompt`.
MAX_PROMPT_TOKENS = 256
#: `generate`'s keyword for a prefilled cache: `cache` in transformers >= 5.2x (which deprecates the
#: older `past_key_values`), `past_key_values` before.
_CACHE_KWARG = "cache" if "cache" in getattr(_generation_utils, "ALL_CACHE_NAMES", ()) else "past_key_values"
#: Scores below this are transformers' filler hypotheses (it uses -1e9), not decoded DocIDs.
_FILLER_SCORE = -1.0e8


class TrieLogitsProcessor(LogitsProcessor):
    """Mask each beam's next-token scores to its facet trie's continuations.

    Args:
        tries: per batch row (before beam expansion), the trie of that row's facet.
        prompt_len: width of the (left-padded) prompt block; generated tokens start there.
        eos_id: the end-of-sequence id, allowed only after a complete DocID.
        num_beams: beams per batch row (rows of `input_ids` are grouped `num_beams` at a time).
        renormalise: re-apply log-softmax over the allowed tokens (see the module docstring).
    """

    def __init__(self, tries: Sequence[DocidTrie], prompt_len: int, eos_id: int, num_beams: int,
                 *, renormalise: bool = True) -> None:
        self.tries = list(tries)
        self.prompt_len = int(prompt_len)
        self.eos_id = int(eos_id)
        self.num_beams = int(num_beams)
        self.renormalise = renormalise
        # (trie id, prefix) -> allowed ids; beams share prefixes heavily within and across steps.
        self._cache: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}

    def allowed(self, row: int, prefix: tuple[int, ...]) -> np.ndarray:
        """Allowed next ids of flat row `row` (batch row = row // num_beams) after `prefix`."""
        trie = self.tries[row // self.num_beams]
        key = (id(trie), prefix)
        out = self._cache.get(key)
        if out is None:
            out = np.asarray(trie.allowed_next(prefix, eos_id=self.eos_id), dtype=np.int64)
            if out.size == 0:  # not a DocID prefix (a dead beam at -inf): let it end, it is filtered later
                out = np.asarray([self.eos_id], dtype=np.int64)
            self._cache[key] = out
        return out

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_len:].tolist()
        rows, cols = [], []
        for r, prefix in enumerate(generated):
            ids = self.allowed(r, tuple(prefix))
            rows.append(np.full(ids.size, r, dtype=np.int64))
            cols.append(ids)
        mask = torch.full_like(scores, float("-inf"))
        mask[torch.from_numpy(np.concatenate(rows)).to(scores.device),
             torch.from_numpy(np.concatenate(cols)).to(scores.device)] = 0.0
        out = scores + mask
        if self.renormalise:
            out = torch.log_softmax(out.float(), dim=-1).to(scores.dtype)
        return out


@dataclass
class Beam:
    """One decoded DocID of one query item."""

    docid_id: int | None  # the facet trie's id; None only if decoding produced a non-DocID (a bug)
    prob: float  # exp(summed constrained log-probability), see the module docstring
    token_ids: list[int]


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        att[i, width - len(p):] = 1
    return ids, att


def _shared_prefix_cache(model: Any, ids: torch.Tensor, att: torch.Tensor, num_beams: int) -> Any:
    """Key/value cache of the left-padded prompts minus their last token, repeated per beam.

    Positions follow the attention mask (left padding), as `generate` computes them itself.
    """
    head, mask = ids[:, :-1], att[:, :-1]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=head, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = out.past_key_values
    cache.batch_repeat_interleave(num_beams)
    return cache


#: Bytes one `generate` call's beams may hold: their key/value cache (every layer, prompt and DocID
#: tokens) and the (rows x vocab) float32 scores `generate` keeps of every step to return the beams'
#: scores. 64 items x 20 beams of SmolLM2 with 100-token prompts held ~6 GB of cache and 3 GB of
#: scores, and the beam reordering copies the cache: a long evaluation ran out of 23 GB.
CALL_BYTES = 2 * 2**30


def items_per_call(model: Any, num_beams: int, max_new_tokens: int, prompt_tokens: int) -> int:
    """Items one `generate` call decodes at most, so that its beams fit in `CALL_BYTES` (at least
    one item)."""
    config = getattr(model, "config", None)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    width = int(getattr(config, "head_dim", None) or (getattr(config, "hidden_size", 0) or 0) // max(1, heads))
    kv = 2 * layers * kv_heads * width  # key and value floats of one token
    row = 4 * (vocab * max_new_tokens + kv * (prompt_tokens + max_new_tokens))
    if row <= 0:
        return 1 << 30
    return max(1, CALL_BYTES // (row * max(1, num_beams)))


@torch.inference_mode()
def decode_items(model: Any, tokenizer: Any, tries: Mapping[str, DocidTrie], items: Sequence[tuple[str, str]],
                 num_beams: int, max_new_tokens: int = MAX_NEW_TOKENS, *, batch_size: int = 64,
                 share_prompt: bool = True) -> list[list[Beam]]:
    """Decode DocIDs for every (facet, text) item of a query, all facets in the same `generate` calls.

    Args:
        model: a causal LM (eval mode is set here).
        tokenizer: its tokenizer (the one the tries were made with).
        tries: facet -> DocID trie.
        items: (facet, facet item text) pairs, in any facet order.
        num_beams: beams per item; also the number of DocIDs returned per item (fewer when the
            facet has fewer DocIDs).
        max_new_tokens: longest DocID plus the end marker.
        batch_size: items per `generate` call (one call when the query has fewer items).
        share_prompt: encode each prompt once and share its cache across the beams (see the
            module docstring); False = plain `generate`, which encodes it once per beam.
    Returns:
        per item, its beams best first (probability descending), at most `num_beams`.
    Raises:
        KeyError: an item names a facet without a trie.
    """
    if not items:
        return []
    missing = sorted({f for f, _ in items} - set(tries))
    if missing:
        raise KeyError(f"no DocID trie for facet(s) {missing}; facets with tries: {sorted(tries)}")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    model.eval()
    device = next(model.parameters()).device
    prompts = [encode_prompt(tokenizer, f, t, max_tokens=MAX_PROMPT_TOKENS) for f, t in items]
    batch_size = min(batch_size, items_per_call(model, num_beams, max_new_tokens, max(map(len, prompts))))
    out: list[list[Beam]] = []
    with attention_kernels():  # never cuDNN's attention: see graft.devices.SDPA_BACKENDS
        for start in range(0, len(items), batch_size):
            chunk = list(range(start, min(start + batch_size, len(items))))
            ids, att = _left_pad([prompts[i] for i in chunk], pad)
            ids, att = ids.to(device), att.to(device)
            proc = TrieLogitsProcessor([tries[items[i][0]] for i in chunk], ids.shape[1], eos, num_beams)
            extra = {_CACHE_KWARG: _shared_prefix_cache(model, ids, att, num_beams)} if share_prompt else {}
            gen = model.generate(
                input_ids=ids, attention_mask=att, logits_processor=[proc],
                num_beams=num_beams, num_return_sequences=num_beams, max_new_tokens=max_new_tokens,
                do_sample=False, length_penalty=0.0, early_stopping=True, eos_token_id=eos, pad_token_id=pad,
                output_scores=True, return_dict_in_generate=True, **extra,
            )
            seqs = gen.sequences[:, ids.shape[1]:].tolist()
            scores = (gen.sequences_scores.float().cpu().numpy() if num_beams > 1
                      else _greedy_scores(gen.scores, seqs, eos))  # one beam: greedy search, no beam scores
            for j, i in enumerate(chunk):
                trie = tries[items[i][0]]
                beams: dict[tuple[int, ...], Beam] = {}
                for b in range(j * num_beams, (j + 1) * num_beams):
                    # transformers marks filler hypotheses (fewer DocIDs than beams) with scores near -1e9
                    if not np.isfinite(scores[b]) or scores[b] < _FILLER_SCORE:
                        continue
                    toks = seqs[b]
                    toks = toks[: toks.index(eos)] if eos in toks else toks
                    prob = float(np.exp(scores[b]))
                    if tuple(toks) not in beams or beams[tuple(toks)].prob < prob:
                        beams[tuple(toks)] = Beam(trie.lookup(toks), prob, toks)
                out.append(sorted(beams.values(), key=lambda x: (-x.prob, x.token_ids)))
    return out


def _greedy_scores(scores: Sequence[torch.Tensor], seqs: list[list[int]], eos: int) -> np.ndarray:
    """Log-probability of each greedy sequence, as beam search scores a beam (length_penalty 0): the
    sum over its tokens, up to and including the end marker, of the processed scores, which the
    trie processor has made log-probabilities over the allowed tokens. `scores`: one (batch,
    vocab) tensor per step."""
    steps = torch.stack([step.float() for step in scores], dim=1).cpu()  # (batch, steps, vocab)
    out = np.zeros(len(seqs), dtype=np.float64)
    for b, toks in enumerate(seqs):
        n = min(toks.index(eos) + 1 if eos in toks else len(toks), steps.shape[1])
        out[b] = float(steps[b, torch.arange(n), torch.tensor(toks[:n], dtype=torch.long)].sum())
    return out


def facet_candidates(items: Sequence[tuple[str, str]], beams: Sequence[Sequence[Beam]], papers_of: Any,
                     exclude: set[str] | None = None) -> dict[str, dict[str, float]]:
    """Per facet, candidate paper -> the sum of its DocIDs' beam probabilities over the query's items.

    Args:
        items: the decoded (facet, text) items.
        beams: `decode_items`' output for them.
        papers_of: `(facet, docid_id) -> list of paper ids` (e.g. `DocidTable.papers_of`); a DocID
            shared by several papers credits each of them with its full probability.
        exclude: paper ids never returned (the query paper itself).
    Returns:
        facet -> paper id -> aggregated score (facets without candidates are absent).
    """
    exclude = exclude or set()
    out: dict[str, dict[str, float]] = {}
    for (facet, _), item_beams in zip(items, beams):
        for beam in item_beams:
            if beam.docid_id is None:
                continue
            per_item: set[str] = set()  # a paper counts once per beam even if listed twice
            for pid in papers_of(facet, beam.docid_id):
                if pid in exclude or pid in per_item:
                    continue
                per_item.add(pid)
                scores = out.setdefault(facet, {})
                scores[pid] = scores.get(pid, 0.0) + beam.prob
    return out
