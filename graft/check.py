"""Whether a trained model has learned its pairs: some of its own training pairs decoded back.

A generative retriever that has not trained long enough fails in one of two ways, both invisible
in the loss alone and shown by the evaluation tables only after a whole run:

- it decodes the same few DocIDs whatever the query (its constrained beams follow the DocIDs that
  are likeliest a priori), so every query gets nearly the same papers — the first GPU run's model
  after 0.5 epochs (`docs/results/gpu_eval_cs768.md`);
- it decodes DocIDs that differ with the query but are not the ones it was taught (a model close
  to its base continues the query's own words), so its results fall far below the teacher's —
  SmolLM2 after 0.5 epochs of a slice's pairs (`docs/results/slice_check_cs768_slice20_e05.md`:
  20 distinct top DocIDs of 32, the taught target among the beams for 1 of 32).

The check takes a seeded sample of training pairs with distinct source items (facet, text), decodes
each source item under the facet's trie, and counts:

- `distinct_top_beams`: how many different DocIDs the top beams are. A model that reads its prompts
  gives nearly one per source item (their targets differ); a collapsed one gives a handful.
- `target_is_top_beam` / `target_in_beams`: the share whose taught target is the top beam / among
  the beams. A source item is taught up to N targets (its paper's sampled edges), so the top beam
  can match at most one of them: these shares stay below 1 even for a good model; by chance the
  target would be among the beams about once in thousands (a facet has thousands of DocIDs).

The verdict (`learned`): at least `MIN_DISTINCT_SHARE` of the top beams distinct, and the taught
target among the beams for at least `MIN_TARGET_SHARE` of the sample. `graft train` runs the check
after training (`--check-pairs`, 0 = off) and records it in the manifest; the evaluation tables name
it beside the model; `experiments/gpu/gpu_eval.py` and `learn_pairs.py` use the same counts.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

#: Training pairs decoded by `graft train`'s check: SmolLM2-135M decodes 32 (5 beams) in 10 s on 2 CPU
#: cores (`decode_s` in docs/results/learn_pairs_cs768.json).
CHECK_PAIRS = 32
#: Beams per source item in the check.
CHECK_BEAMS = 5
#: Below this share of distinct DocIDs among the top beams, the model has collapsed onto a few.
MIN_DISTINCT_SHARE = 0.25
#: Below this share of taught targets among the beams, the model has not learned its pairs.
MIN_TARGET_SHARE = 0.10


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
    def collapsed(self) -> bool:
        """The top beams are a few DocIDs for most prompts."""
        return self.pairs >= 2 and self.distinct_top_beams < max(2, math.ceil(MIN_DISTINCT_SHARE * self.pairs))

    @property
    def misses(self) -> bool:
        """The taught targets are rarely among the beams."""
        return self.pairs >= 1 and self.target_in_beams < MIN_TARGET_SHARE

    @property
    def learned(self) -> bool:
        return not (self.collapsed or self.misses)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "learned": self.learned}

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

    def verdict(self) -> str:
        """A few words for tables: learned, or which way it has not."""
        if self.collapsed:
            return "NOT learned: collapsed onto a few DocIDs (under-trained)"
        if self.misses:
            return "NOT learned: rarely decodes its taught targets (under-trained)"
        return "learned its pairs"

    def warning(self) -> str | None:
        """What is wrong and what to do when the model has not learned its pairs; None when it has."""
        if self.collapsed:
            what = (f"the model decodes the same few DocIDs for most prompts ({self.distinct_top_beams} distinct of "
                    f"{self.pairs}): it has not learned to read its prompts yet, so its results will barely depend "
                    "on the query")
        elif self.misses:
            hits = round(self.target_in_beams * self.pairs)
            what = (f"the model rarely decodes the DocIDs it was taught (the taught target is among its {self.beams} "
                    f"beams for {hits} of {self.pairs} training prompts): it has not learned its pairs yet, so its "
                    "results will fall far below the graph teacher's")
        else:
            return None
        return f"{what}. Train longer (--epochs, --max-steps) or with a higher --lr"


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


@dataclass
class Memorisation:
    """How much of a set of training pairs a model reproduces (`memorisation`)."""

    pairs: int
    prompts: int
    beams: int
    target_in_beams: float  # share of pairs whose taught target is among the prompt's beams
    top_beam_taught: float  # share of prompts whose top beam is one of their taught targets
    distinct_top_beams: float  # distinct top-beam DocIDs per prompt (1.0: every prompt its own)
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def memorisation(model: Any, tokenizer: Any, tries: Any, table: Any, *, beams: int = 10,
                 batch_size: int = 64) -> Memorisation:
    """Decode every distinct source item of `table` (training pairs: facet, source_text,
    target_docid_id) once and score its taught targets against its beams.

    A source item is taught up to N targets, so a perfect memoriser's beams hold all of them (with
    `beams` >= N) but its top beam only one: `target_in_beams` is the measure to follow, the other
    two show collapse (the same few DocIDs whatever the prompt).
    """
    from graft.decoding import decode_items

    rows = table.select(["facet", "source_text", "target_docid_id"]).to_pydict()
    taught: dict[tuple[str, str], set[int]] = {}
    for f, s, d in zip(rows["facet"], rows["source_text"], rows["target_docid_id"]):
        taught.setdefault((f, s), set()).add(int(d))
    prompts = list(taught)
    t0 = time.perf_counter()
    decoded = decode_items(model, tokenizer, tries, prompts, beams, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    n_pairs = sum(len(t) for t in taught.values())
    among = sum(len(taught[p] & {x.docid_id for x in b}) for p, b in zip(prompts, decoded))
    top = sum(bool(b) and b[0].docid_id in taught[p] for p, b in zip(prompts, decoded))
    distinct = len({(p[0], b[0].docid_id) for p, b in zip(prompts, decoded) if b})
    n = max(1, len(prompts))
    return Memorisation(pairs=n_pairs, prompts=len(prompts), beams=beams, target_in_beams=among / max(1, n_pairs),
                        top_beam_taught=top / n, distinct_top_beams=distinct / n, seconds=round(seconds, 2))
