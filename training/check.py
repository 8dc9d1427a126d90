"""Whether a trained model reads its prompts: some of its own training pairs decoded back.

A generative retriever that has not trained long enough decodes the same few DocIDs whatever the
query (its constrained beams follow the DocIDs that are likeliest a priori), so every query gets
nearly the same papers. That is invisible in the loss alone, and the evaluation tables show it only
after a whole run. The check takes a seeded sample of training pairs with distinct source items
(facet, text), decodes each source item under the facet's trie, and counts:

- `distinct_top_beams`: how many different DocIDs the top beams are. A model that reads its prompts
  gives nearly one per source item (their targets differ); one that does not gives a handful.
- `target_is_top_beam` / `target_in_beams`: the share whose taught target is the top beam / among
  the beams. A source item is taught up to N targets (its paper's sampled edges), so the top beam
  can match at most one of them: these shares stay well below 1 even for a good model.

The verdict (`reads_prompts`) is on the first count: at least `MIN_DISTINCT_SHARE` of the sample.
`graft train` runs the check after training (`--check-pairs`, 0 = off) and records it in the
manifest; `eval/benchmarks/gpu_eval.py` and `eval/benchmarks/learn_pairs.py` use the same counts.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

#: Training pairs decoded by `graft train`'s check: SmolLM2-135M decodes 32 (5 beams) in 10 s on 2 CPU
#: cores (`decode_s` in eval/results/learn_pairs_cs768.json).
CHECK_PAIRS = 32
#: Beams per source item in the check.
CHECK_BEAMS = 5
#: A model reads its prompts when its top beams are at least this share of distinct DocIDs.
MIN_DISTINCT_SHARE = 0.25


def sample_pairs(table: Any, n: int, seed: int) -> Any:
    """`n` pairs with distinct source items (facet, text), drawn in a seeded order, in table order.

    Args:
        table: the pairs as a `pyarrow.Table` (`training.data.read_pairs`).
        n: pairs wanted (fewer when the table has fewer distinct source items).
        seed: the draw's seed.
    """
    import numpy as np

    keys = list(zip(table.column("facet").to_pylist(), table.column("source_text").to_pylist()))
    seen: set[tuple[str, str]] = set()
    pick: list[int] = []
    for i in np.random.default_rng(seed).permutation(table.num_rows):
        if keys[i] not in seen:
            seen.add(keys[i])
            pick.append(int(i))
            if len(pick) == n:
                break
    return table.take(sorted(pick))


@dataclass
class PromptCheck:
    """The counts of one check (see the module docstring)."""

    pairs: int
    beams: int
    target_is_top_beam: float
    target_in_beams: float
    distinct_top_beams: int
    seconds: float

    @property
    def reads_prompts(self) -> bool:
        return self.distinct_top_beams >= max(2, math.ceil(MIN_DISTINCT_SHARE * self.pairs)) or self.pairs < 2

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reads_prompts": self.reads_prompts}

    @classmethod
    def from_dict(cls, data: Any) -> PromptCheck | None:
        """The check as `to_dict` wrote it (e.g. in the manifest's train stage); None for anything
        else (no check recorded, or a damaged record)."""
        if not isinstance(data, dict):
            return None
        try:
            check = cls(**{f.name: data[f.name] for f in fields(cls)})
            check.summary()  # the counts are numbers
        except (KeyError, TypeError, ValueError):
            return None
        return check

    def summary(self) -> str:
        """One line: the counts in words."""
        return (f"{self.pairs} training prompts decoded ({self.beams} beams): {self.distinct_top_beams} distinct "
                f"top DocIDs; the taught target is the top beam for {self.target_is_top_beam:.0%}, among the "
                f"beams for {self.target_in_beams:.0%}")

    def warning(self) -> str | None:
        """What to do when the model does not read its prompts yet; None when it does."""
        if self.reads_prompts:
            return None
        return (f"the model decodes the same few DocIDs for most prompts ({self.distinct_top_beams} distinct of "
                f"{self.pairs}): it has not learned to read its prompts yet, so its results will barely depend on "
                "the query. Train longer (--epochs, --max-steps) or with a higher --lr")


def prompt_check(model: Any, tokenizer: Any, tries: Any, table: Any, *, pairs: int = CHECK_PAIRS,
                 beams: int = CHECK_BEAMS, seed: int = 0, batch_size: int = 64) -> PromptCheck:
    """Decode a seeded sample of training pairs' source items and count what came back.

    Args:
        model: the trained causal LM (on any device).
        tokenizer: its tokenizer.
        tries: facet -> DocID trie (`graft.docids.load_tries`).
        table: the training pairs (`pyarrow.Table` with facet, source_text, target_docid_id).
        pairs: how many to decode (distinct source items).
        beams: beams per item.
        seed: the sample's seed.
        batch_size: items per `generate` call.
    """
    from graft.decoding import decode_items

    rows = sample_pairs(table, pairs, seed).to_pydict()
    t0 = time.perf_counter()
    decoded = decode_items(model, tokenizer, tries, list(zip(rows["facet"], rows["source_text"])), beams,
                           batch_size=batch_size)
    seconds = time.perf_counter() - t0
    targets = [int(d) for d in rows["target_docid_id"]]
    n = len(targets)
    top = sum(bool(b) and b[0].docid_id == d for d, b in zip(targets, decoded))
    among = sum(d in {x.docid_id for x in b} for d, b in zip(targets, decoded))
    distinct = len({(f, b[0].docid_id) for f, b in zip(rows["facet"], decoded) if b})
    return PromptCheck(pairs=n, beams=beams, target_is_top_beam=top / max(1, n), target_in_beams=among / max(1, n),
                       distinct_top_beams=distinct, seconds=round(seconds, 2))
