"""Trie-constrained decoding: the property that every output is a DocID of the item's facet, with
random tries, random prompts and a random untrained tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graft.decoding import TrieLogitsProcessor, decode_items, facet_candidates
from graft.docids import DocidTrie
from training.base_models import load_tokenizer, random_model, tiny_config


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny")


pytestmark = pytest.mark.usefixtures("torch_one_thread")


FACETS = ("problem", "method", "result", "contribution")


def _random_facet_docids(rng: np.random.Generator, vocab: list[int]) -> list[list[int]]:
    """Random token sequences of 1-12 ids, including DocIDs that are prefixes of others."""
    seqs: set[tuple[int, ...]] = set()
    while len(seqs) < int(rng.integers(3, 30)):
        seq = tuple(int(t) for t in rng.choice(vocab, int(rng.integers(1, 13))))
        seqs.add(seq)
        if len(seq) > 2 and rng.random() < 0.3:
            seqs.add(seq[: int(rng.integers(1, len(seq)))])
    return [list(s) for s in sorted(seqs)]


def _model_tries_items(tokenizer, seed: int, *, n_items: int, growth: int):
    """A random tiny model, one random trie per facet (disjoint token pools) and `n_items` items,
    one facet after another, the i-th of 1 + growth * i words (prompts of different lengths)."""
    rng = np.random.default_rng(seed)
    model = random_model(tiny_config(tokenizer), seed=seed)
    pool = rng.permutation(np.arange(100, 40_000))
    tries = {f: DocidTrie.build(_random_facet_docids(rng, pool[i * 40:(i + 1) * 40].tolist()))
             for i, f in enumerate(FACETS)}
    words = "graph neural citation retrieval sparse dense model survey attention benchmark".split()
    items = [(FACETS[i % 4], " ".join(rng.choice(words, 1 + growth * i))) for i in range(n_items)]
    return model, tries, items


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_decoded_output_is_a_docid_of_its_facet(tokenizer, seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = random_model(tiny_config(tokenizer), seed=seed)
    # disjoint token pools per facet, so a DocID of the wrong facet cannot pass by coincidence
    pool = rng.permutation(np.arange(100, 40_000))
    sets = {f: _random_facet_docids(rng, pool[i * 50:(i + 1) * 50].tolist()) for i, f in enumerate(FACETS)}
    tries = {f: DocidTrie.build(s) for f, s in sets.items()}
    words = "graph neural citation retrieval sparse dense model survey attention benchmark".split()
    items = [(str(rng.choice(FACETS)), " ".join(rng.choice(words, int(rng.integers(1, 12)))))
             for _ in range(int(rng.integers(4, 9)))]
    beams = int(rng.integers(2, 7))
    out = decode_items(model, tokenizer, tries, items, num_beams=beams)
    assert len(out) == len(items)
    for (facet, _), item_beams in zip(items, out):
        assert 1 <= len(item_beams) <= beams
        for b in item_beams:
            assert tries[facet].lookup(b.token_ids) is not None, (facet, b)
            assert b.docid_id == tries[facet].lookup(b.token_ids)
            assert b.token_ids in sets[facet]
            assert 0.0 < b.prob <= 1.0 + 1e-6
        # constrained, renormalised: beams of one item are distinct DocIDs whose probabilities sum to <= 1
        assert len({tuple(b.token_ids) for b in item_beams}) == len(item_beams)
        assert sum(b.prob for b in item_beams) <= 1.0 + 1e-4
        assert [b.prob for b in item_beams] == sorted((b.prob for b in item_beams), reverse=True)


def test_processor_allows_eos_only_after_a_complete_docid() -> None:
    trie = DocidTrie.build([[5, 6], [5, 6, 7], [8]])
    proc = TrieLogitsProcessor([trie], prompt_len=2, eos_id=0, num_beams=2, renormalise=False)
    ids = torch.tensor([[9, 9, 5, 6], [9, 9, 8, 0]])  # row 0: "5 6" (complete, extends); row 1: dead
    out = proc(ids, torch.zeros(2, 10))
    assert torch.isfinite(out[0]).nonzero().ravel().tolist() == [0, 7]
    assert torch.isfinite(out[1]).nonzero().ravel().tolist() == [0]
    start = proc(torch.tensor([[9, 9], [9, 9]]), torch.zeros(2, 10))
    assert torch.isfinite(start[0]).nonzero().ravel().tolist() == [5, 8]  # no EOS at the empty prefix


def test_facet_scores_sum_beam_probabilities_over_items() -> None:
    from graft.decoding import Beam

    items = [("method", "a"), ("method", "b"), ("problem", "c")]
    beams = [[Beam(0, 0.5, [1]), Beam(1, 0.25, [2])], [Beam(0, 0.125, [1])], [Beam(3, 0.5, [4])]]
    papers = {("method", 0): ["p1", "p2"], ("method", 1): ["q"], ("problem", 3): ["p1", "q"]}
    out = facet_candidates(items, beams, lambda f, d: papers[(f, d)], exclude={"q"})
    assert out == {"method": {"p1": 0.625, "p2": 0.625}, "problem": {"p1": 0.5}}


@pytest.mark.parametrize("seed", [3, 4])
def test_shared_prompt_cache_decodes_the_same_beams_as_plain_generate(tokenizer, seed: int) -> None:
    """Prompts of different lengths (left padding) across facets: sharing the prompt cache across
    beams changes the cost, not the DocIDs or their probabilities."""
    model, tries, items = _model_tries_items(tokenizer, seed, n_items=6, growth=3)
    shared = decode_items(model, tokenizer, tries, items, num_beams=5)
    plain = decode_items(model, tokenizer, tries, items, num_beams=5, share_prompt=False)
    assert [[b.token_ids for b in x] for x in shared] == [[b.token_ids for b in x] for x in plain]
    for xs, ys in zip(shared, plain):
        np.testing.assert_allclose([b.prob for b in xs], [b.prob for b in ys], rtol=1e-4)


@pytest.mark.slow
def test_one_beam_decodes_greedily_with_the_probability_beam_search_gives_it(tokenizer) -> None:
    """num_beams=1 is greedy search, whose output has no beam scores: each item gets its one DocID
    with the probability beam search gives the same DocID (the sum of the renormalised steps)."""
    model, tries, items = _model_tries_items(tokenizer, 3, n_items=8, growth=2)
    greedy = decode_items(model, tokenizer, tries, items, num_beams=1)
    wide = decode_items(model, tokenizer, tries, items, num_beams=40)
    matched = 0
    for (facet, _), (one,), many in zip(items, greedy, wide):
        assert tries[facet].lookup(one.token_ids) is not None and 0.0 < one.prob <= 1.0 + 1e-6
        assert many[0].prob >= one.prob - 1e-6
        same = [b for b in many if b.token_ids == one.token_ids]
        if same:
            matched += 1
            assert same[0].prob == pytest.approx(one.prob, rel=1e-4)
    assert matched >= 6


def test_generate_calls_are_capped_by_the_memory_their_beams_hold(tokenizer, monkeypatch) -> None:
    """A call's items are capped so that its beams' key/value cache and kept step scores fit in
    `CALL_BYTES` (SmolLM2's shape: 13 items of 100-token prompts at 20 beams, not 64); decoding in
    capped calls returns the same beams as one call."""
    from types import SimpleNamespace

    import graft.decoding as decoding

    smollm2 = SimpleNamespace(config=SimpleNamespace(vocab_size=49152, num_hidden_layers=30, num_attention_heads=9,
                                                     num_key_value_heads=3, hidden_size=576, head_dim=None))
    assert decoding.items_per_call(smollm2, 20, 13, 100) == 13
    assert decoding.items_per_call(smollm2, 20, 13, 256) < decoding.items_per_call(smollm2, 10, 13, 256)
    assert decoding.items_per_call(smollm2, 2000, 13, 256) == 1
    model, tries, items = _model_tries_items(tokenizer, 4, n_items=7, growth=2)
    whole = decode_items(model, tokenizer, tries, items, num_beams=4)
    monkeypatch.setattr(decoding, "CALL_BYTES", 1)  # one item a call
    calls = []
    real_generate = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(kw["input_ids"].shape[0]) or real_generate(**kw))
    capped = decode_items(model, tokenizer, tries, items, num_beams=4)
    assert calls == [1] * len(items)
    assert [[b.token_ids for b in x] for x in capped] == [[b.token_ids for b in x] for x in whole]
    for xs, ys in zip(capped, whole):
        np.testing.assert_allclose([b.prob for b in xs], [b.prob for b in ys], rtol=1e-4)
