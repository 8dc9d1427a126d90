"""The generative retriever's prompt and target format, shared by training and query time.

One example is `prompt_for(facet, source_text)` followed by the target DocID's token ids and the
tokenizer's end-of-sequence token:

    Facet: method
    Query: we train a graph neural network on citation edges
    DocID:
    graph neural networks over citation graphs<eos>

Plain text, not the base model's chat template: after full fine-tuning the model sees only this
format, so the template's role markers and default system prompt (about 30 tokens per example for
SmolLM2, a dated system block for Llama-3.2) would cost throughput and buy nothing; the `tiny`
random model has no chat tuning at all; and one format works for every base model. The prompt
ends in a newline because DocIDs are tokenised on their own (`graft.docids`: the normalised item,
first 12 token ids, no leading space) and a word after a newline is tokenised the same way, so the
trie's token sequences are exactly what the model learns to emit after the prompt.

This module imports nothing beyond the standard library: query-time code imports it too. The
tokenizer is duck-typed (a Hugging Face tokenizer: callable, `encode`, `decode`, `eos_token_id`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graft.errors import ConfigError

#: Bumped whenever the prompt or target layout changes; a model trained on another version must
#: not be queried with this one (recorded in the model's training config).
PROMPT_VERSION = 1

PROMPT_TEMPLATE = "Facet: {facet}\nQuery: {query}\nDocID:\n"


def prompt_for(facet: str, source_text: str) -> str:
    """The prompt that asks for a DocID of `facet` related to `source_text` (a facet item)."""
    return PROMPT_TEMPLATE.format(facet=facet, query=" ".join(source_text.split()))


def target_for(docid: str, eos_token: str) -> str:
    """The target as text (for display and debugging; training uses `encode_target`)."""
    return f"{docid}{eos_token}"


def encode_target(tokenizer: Any, docid: str, token_ids: Sequence[int] | None = None) -> list[int]:
    """Target token ids: the DocID's ids, then the end-of-sequence id.

    Args:
        tokenizer: the base model's tokenizer.
        docid: the DocID text (used only when `token_ids` is None).
        token_ids: the DocID's ids as stored in `docids/docids.parquet`; pass them when known,
            since they are exactly the trie's sequence (re-encoding the decoded text may differ).
    """
    if token_ids is None:
        token_ids = tokenizer.encode(docid, add_special_tokens=False)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("the tokenizer has no eos_token_id; the target needs an end marker")
    return [int(t) for t in token_ids] + [int(eos)]


def encode_prompt(tokenizer: Any, facet: str, source_text: str, max_tokens: int | None = None) -> list[int]:
    """Prompt token ids (with the tokenizer's own special tokens, e.g. Llama's BOS).

    Args:
        tokenizer: the base model's tokenizer.
        facet: facet name.
        source_text: the query facet item.
        max_tokens: if given and the prompt is longer, the source text is cut (by tokens) so the
            whole prompt fits; the facet line and the final "DocID:" line are always kept.
    Raises:
        ValueError: `max_tokens` leaves no room for the source text at all.
    """
    ids = list(tokenizer(prompt_for(facet, source_text))["input_ids"])
    if max_tokens is None or len(ids) <= max_tokens:
        return ids
    # Rare (facet items are a sentence or two): cut the source by tokens and re-encode the whole
    # prompt, shrinking until it fits, so the prompt text stays well formed.
    frame = len(tokenizer(prompt_for(facet, ""))["input_ids"])
    budget = max_tokens - frame
    if budget <= 0:
        raise ConfigError(f"max_tokens={max_tokens} leaves no room for the query text (the prompt frame "
                         f"alone takes {frame} tokens); raise max_length")
    src = tokenizer.encode(source_text, add_special_tokens=False)
    while budget > 0:
        ids = list(tokenizer(prompt_for(facet, tokenizer.decode(src[:budget])))["input_ids"])
        if len(ids) <= max_tokens:
            return ids
        budget -= max(1, len(ids) - max_tokens)
    return list(tokenizer(prompt_for(facet, ""))["input_ids"])
