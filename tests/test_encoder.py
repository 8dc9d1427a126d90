from __future__ import annotations

import numpy as np
import pytest

from graft.encoder import (
    AUTO_ONNX_TEXTS,
    BATCH_SIZE,
    DEFAULT_MODEL,
    Encoder,
    default_model_path,
    embed_items,
    resolve_model_path,
)
from graft.errors import GraftError


def test_memo_returns_the_same_vectors_as_a_fresh_encode(encoder) -> None:
    texts = ["Graph neural networks for molecules.", "We propose a new parser.",
             "Graph neural networks for molecules."]
    first = encoder.encode(texts)
    assert first.shape == (3, encoder.dim) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(first[0], first[2])
    fresh = Encoder(batch_size=2).encode(texts[:2])
    np.testing.assert_allclose(first[:2], fresh, atol=1e-5)
    done = []
    again = encoder.encode(texts, progress=done.append)
    np.testing.assert_array_equal(again, first)
    assert sum(done) == 3
    # semantically close sentences are closer than unrelated ones
    v = encoder.encode(["A parser for English sentences.", "Parsing English text.", "Stock prices fell."])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_remembered_vectors_are_served_and_never_replace_computed_ones(encoder) -> None:
    seen = "A sentence this encoder has embedded before."
    before = encoder.encode([seen])[0]
    loaded = np.eye(encoder.dim, dtype=np.float32)[:2]  # stand-ins for vectors read from a checkpoint
    encoder.remember(["A checkpointed item nobody embedded in this process.", seen], loaded)
    got = encoder.encode(["A checkpointed item nobody embedded in this process.", seen])
    np.testing.assert_array_equal(got[0], loaded[0])
    np.testing.assert_array_equal(got[1], before)


def test_device_names_resolve_or_fail_clearly() -> None:
    import torch

    from graft.devices import resolve_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(GraftError, match="'gpu0' is unknown"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(GraftError, match="sees no CUDA GPU.*--device cpu"):
            resolve_device("cuda:0")


def test_model_resolution(tmp_path) -> None:
    assert resolve_model_path(None) == default_model_path() == resolve_model_path(DEFAULT_MODEL)
    assert resolve_model_path(default_model_path()) == default_model_path()  # any local folder
    with pytest.raises(GraftError, match="never downloads"):
        resolve_model_path("sentence-transformers/all-mpnet-base-v2")
    with pytest.raises(GraftError, match="local folder"):
        resolve_model_path(str(tmp_path / "missing"))


def test_items_take_their_papers_title_vector_at_the_given_weight(encoder) -> None:
    items = ["Our model beats the baseline.", "We study parsing.", "A third item."]
    titles = ["Deep Parsing", "What  Is Parsing?", "  "]
    got = embed_items(encoder, items, titles, 0.7)
    e_items = encoder.encode(items)
    e_titles = encoder.encode(["Deep Parsing", "What Is Parsing?"])  # whitespace folded
    for k in range(2):
        mixed = e_items[k] + 0.7 * e_titles[k]
        np.testing.assert_allclose(got[k], mixed / np.linalg.norm(mixed), atol=1e-5)
    np.testing.assert_allclose(got[2], e_items[2], atol=1e-6)  # no title: the item alone
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # the title pulls an item towards its paper: closer to the title than the item alone is
    assert got[0] @ e_titles[0] > e_items[0] @ e_titles[0] + 0.1
    np.testing.assert_allclose(embed_items(encoder, items, titles, 0.0), e_items, atol=1e-6)
    assert embed_items(encoder, [], [], 0.7).shape == (0, encoder.dim)
    with pytest.raises(ValueError, match="3 items but 2 titles"):
        embed_items(encoder, items, titles[:2], 0.7)
    with pytest.raises(ValueError, match="title_weight must be >= 0"):
        embed_items(encoder, items, titles, -1.0)


def test_batch_size_defaults_by_device_and_is_checked(encoder) -> None:
    from graft.encoder import BATCH_SIZE, default_batch_size
    from graphbuild.build import BuildConfig

    assert encoder.device == "cpu" and encoder.batch_size == BATCH_SIZE["cpu"] == 16
    assert default_batch_size("cuda:1") == default_batch_size("mps") == BATCH_SIZE["gpu"]
    with pytest.raises(GraftError, match="batch_size"):
        Encoder(batch_size=0)
    with pytest.raises(ValueError, match="embedding_batch_size"):
        BuildConfig(embedding_batch_size=0)
    assert BuildConfig().embedding_batch_size is None
    assert BuildConfig.from_dict({"embedding_batch_size": 64}).embedding_batch_size == 64  # as an index recorded it


@pytest.mark.slow
def test_encoder_batch_benchmark_smoke(tmp_path) -> None:
    """experiments/encoder_batch.py: every batch size and the batch-64 baseline on the same texts."""
    import json

    from conftest import cs768_path

    from experiments.encoder_batch import main

    assert main(["--corpus", str(cs768_path()), "--papers", "4", "--abstracts", "2", "--sizes", "8", "--rounds", "1",
                 "--results", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "encoder_batch.json").read_text())
    rows = saved["rows"]
    assert saved["meta"]["backend"] == "torch"  # one backend for every round
    assert [(r["texts"], r["batch"]) for r in rows] == [(t, b) for t in ("abstract sentences", "titles + abstracts")
                                                      for b in (8, 64)]
    assert all(r["texts_per_s"] > 0 and r["max_abs_diff_to_64"] < 1e-5 for r in rows)
    assert [r["ratio_to_64"] for r in rows if r["batch"] == 64] == [1.0, 1.0]


@pytest.fixture(scope="module")
def onnx_encoder():
    """The packaged MiniLM with its transformer exported to ONNX Runtime."""
    return Encoder(backend="onnx")


def test_onnx_backend_gives_torchs_vectors_at_every_shape(encoder, onnx_encoder) -> None:
    """The export is traced on one shape; batches of other sizes and lengths (one word, an empty
    text, real abstracts, a text past MiniLM's 256 tokens, which sentence-transformers truncates)
    give the same vectors as PyTorch, alone and padded together."""
    from graft.text import paper_text
    from graphbuild.corpus import load_corpus

    papers = load_corpus(None, limit=6).papers
    abstracts = [paper_text(t, a) for t, a in zip(papers["title"].to_list(), papers["abstract"].to_list())]
    long_text = " ".join(abstracts) * 2
    texts = ["Parsing.", "", "We propose a graph neural network for parsing.", *abstracts, long_text]
    assert len(encoder.model.tokenizer(long_text)["input_ids"]) > 256
    assert onnx_encoder.backend == "onnx" and onnx_encoder.dim == encoder.dim
    torch_vecs = Encoder(batch_size=4, backend="torch").encode(texts)
    for size in (1, 3, 16):
        onnx_encoder.batch_size = size
        onnx_encoder._memo.clear()
        got = onnx_encoder.encode(texts)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, torch_vecs, atol=2e-6)
    onnx_encoder.batch_size = BATCH_SIZE["cpu"]


def test_onnx_backend_leaves_torchs_thread_count_as_it_was(onnx_encoder) -> None:
    import torch

    before = torch.get_num_threads()
    onnx_encoder._memo.clear()
    onnx_encoder.encode(["One sentence.", "Another sentence, a little longer."])
    assert torch.get_num_threads() == before


def test_backend_names_resolve_or_fail_clearly(monkeypatch) -> None:
    from graft import encoder_onnx
    from graft.encoder import resolve_backend
    from graphbuild.build import BuildConfig

    assert resolve_backend("auto", "cpu") == "onnx"
    assert resolve_backend("auto", "cuda") == resolve_backend("torch", "cpu") == "torch"
    assert resolve_backend("onnx", "cpu") == "onnx"
    with pytest.raises(GraftError, match="'tensorrt' is unknown; allowed: auto, torch, onnx"):
        resolve_backend("tensorrt", "cpu")
    with pytest.raises(GraftError, match="CPU only, not on 'cuda:0'"):
        resolve_backend("onnx", "cuda:0")
    with pytest.raises(ValueError, match=r"embedding_backend \(--encoder-backend\) 'gpu' is unknown; allowed: auto, torch, onnx"):
        BuildConfig(embedding_backend="gpu")
    assert BuildConfig().embedding_backend == "auto"
    monkeypatch.setattr(encoder_onnx, "available", lambda: False)  # an install without onnxruntime
    assert resolve_backend("auto", "cpu") == "torch"
    with pytest.raises(GraftError, match="pip install onnxruntime onnx"):
        resolve_backend("onnx", "cpu")


@pytest.mark.slow
def test_auto_backend_falls_back_to_torch_when_the_export_fails(monkeypatch) -> None:
    from graft import encoder_onnx

    def broken(self, model, **kwargs):
        raise GraftError("exporting BertModel to ONNX failed (stand-in)")

    monkeypatch.setattr(encoder_onnx.OnnxBackbone, "__init__", broken)
    enc = Encoder(backend="auto")
    texts = [f"Sentence number {i} of a bulk call." for i in range(AUTO_ONNX_TEXTS)]
    with pytest.warns(UserWarning, match="stand-in.*runs on torch instead"):
        vecs = enc.encode(texts)
    assert enc.backend == "torch" and vecs.shape == (len(texts), enc.dim)
    assert enc.encode(["Still embeds."]).shape == (1, enc.dim)  # no second try, no second warning
    with pytest.raises(GraftError, match="stand-in"):
        Encoder(backend="onnx")


def test_auto_backend_moves_to_onnx_with_its_first_bulk_call(encoder) -> None:
    """An "auto" encoder embeds a query's few sentences on torch; the first call of AUTO_ONNX_TEXTS
    new texts (here lowered to 24, to keep the test short) exports the model, runs in ONNX Runtime
    (same vectors), and releases the PyTorch weights."""
    from graft.text import paper_text
    from graphbuild.corpus import load_corpus

    enc = Encoder()
    assert enc._onnx_at == AUTO_ONNX_TEXTS
    enc._onnx_at = 24
    papers = load_corpus(None).papers  # the demo corpus's titles + abstracts
    texts = list(dict.fromkeys(paper_text(t, a) for t, a in zip(papers["title"].to_list(),
                                                                  papers["abstract"].to_list())))[:24]
    assert len(texts) == 24 and encoder.backend == "torch"
    few = enc.encode(texts[:3] + ["A query sentence."])
    assert enc.backend == "torch"
    np.testing.assert_allclose(enc.encode(texts[3:]), encoder.encode(texts[3:]), atol=2e-6)
    assert enc.backend == "torch", "fewer than AUTO_ONNX_TEXTS new texts (3 were memoised): no export"
    enc._memo.clear()
    bulk = enc.encode(texts)
    assert enc.backend == "onnx"
    np.testing.assert_allclose(bulk[:3], few[:3], atol=2e-6)
    np.testing.assert_allclose(bulk, encoder.encode(texts), atol=2e-6)
    assert next(list(enc.model)[0].auto_model.parameters()).is_meta
    np.testing.assert_allclose(enc.encode(["A query sentence."]), few[3:], atol=2e-6)


@pytest.mark.slow
def test_encoder_backend_benchmark_smoke(tmp_path) -> None:
    """experiments/encoder_backend.py: both backends at each batch size, against torch at the
    CPU default, on the same texts."""
    import json

    from conftest import cs768_path

    from experiments.encoder_backend import main

    assert main(["--corpus", str(cs768_path()), "--papers", "4", "--abstracts", "2", "--sizes", "8", "--rounds", "1",
                 "--results", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "encoder_backend.json").read_text())["rows"]
    assert [(r["texts"], r["backend"], r["batch"]) for r in rows] == [
        (t, b, s) for t in ("abstract sentences", "titles + abstracts") for b in ("torch", "onnx") for s in (8, 16)]
    assert all(r["texts_per_s"] > 0 and r["max_abs_diff_to_baseline"] < 1e-5 for r in rows)
    assert [r["ratio_to_baseline"] for r in rows if (r["backend"], r["batch"]) == ("torch", 16)] == [1.0, 1.0]


def test_an_encoder_shared_by_threads_moves_to_onnx_once_and_keeps_the_thread_count(encoder, monkeypatch) -> None:
    """The survey's writers and verifiers share one encoder across threads: batches run one at a
    time, so the move to ONNX Runtime (which releases the PyTorch weights) never lands inside
    another thread's PyTorch batch, and the per-batch torch thread count is restored as it was."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from graft import encoder as embeddings
    from graft.text import paper_text
    from graphbuild.corpus import load_corpus

    papers = load_corpus(None, limit=48).papers
    texts = [paper_text(t, a) for t, a in zip(papers["title"].to_list(), papers["abstract"].to_list())]
    chunks = [texts[i::6] for i in range(6)]  # 8 texts each
    want = encoder.encode(texts)
    monkeypatch.setattr(embeddings, "AUTO_ONNX_TEXTS", 8)  # every chunk is a "bulk" call
    shared, before = Encoder(batch_size=2), torch.get_num_threads()
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(shared.encode, chunks))
    assert shared.backend == "onnx" and torch.get_num_threads() == before
    for i, vecs in enumerate(got):
        np.testing.assert_allclose(vecs, want[i::6], atol=2e-6)


LATE_TEXT = ("Meta-learning for few-shot classification. In this paper, we propose a simple method that "
             "learns an initialisation. The proposed method adapts to a new task in a few gradient steps. "
             "It outperforms prior work on Omniglot.")


def test_spans_are_found_whatever_case_and_spacing_the_item_has() -> None:
    from graft.encoder import find_spans

    got = find_spans(LATE_TEXT, ["We propose a simple method that learns an initialisation.",
                                 "The proposed   method adapts to a new task in a few gradient steps.",
                                 "A sentence the text does not hold.", ""])
    assert LATE_TEXT[got[0][0] : got[0][1]] == "we propose a simple method that learns an initialisation."
    assert LATE_TEXT[got[1][0] : got[1][1]].startswith("The proposed method adapts")
    assert got[2] is None and got[3] is None


def test_items_read_in_context_are_their_tokens_states_averaged(encoder) -> None:
    """Late chunking against a by-hand pass of the transformer: the text's vector is `encode`'s,
    a span's vector the mean of the contextual states of exactly its tokens; a span past the token
    window or not given is not read."""
    import torch

    from graft.encoder import ContextReader, context_key, find_spans

    items = ["We propose a simple method that learns an initialisation.",
             "The proposed method adapts to a new task in a few gradient steps."]
    spans = find_spans(LATE_TEXT, items) + [None]
    long_text = "Padding words. " * 300 + "The last sentence is far away."
    docs, vecs, found = encoder.read_in_context([LATE_TEXT, long_text], [spans, find_spans(long_text, [
        "Padding words.", "The last sentence is far away."])])
    np.testing.assert_allclose(docs, Encoder(backend="torch", memo_size=0).encode([LATE_TEXT, long_text]), atol=1e-5)
    assert found.tolist() == [True, True, False, True, False]  # the far sentence lies past the 256 tokens
    assert not vecs[2].any() and not vecs[4].any()

    tok, model = encoder.model.tokenizer, list(encoder.model)[0].auto_model
    enc = tok([LATE_TEXT], return_tensors="pt", return_offsets_mapping=True)
    offsets = enc.pop("offset_mapping")[0].numpy()
    with torch.inference_mode():
        hidden = model(**enc).last_hidden_state[0].numpy()
    for j, (lo, hi) in enumerate(spans[:2]):
        inside = (offsets[:, 0] >= lo) & (offsets[:, 1] <= hi) & (offsets[:, 1] > offsets[:, 0])
        assert 8 < inside.sum() < 20
        expect = hidden[inside].mean(axis=0)
        np.testing.assert_allclose(vecs[j], expect / np.linalg.norm(expect), atol=1e-5)
    # read in context, "The proposed method" is nearer its paper's subject than read alone
    alone = encoder.encode([items[1]])[0]
    topic = encoder.encode(["Meta-learning for few-shot classification."])[0]
    assert vecs[1] @ topic > alone @ topic + 0.05
    # the reader's keys give the same vectors, zero rows where an item is not found
    read = ContextReader(encoder).encode([context_key(LATE_TEXT, t) for t in [*items, "Not in the text."]])
    np.testing.assert_allclose(read[:2], vecs[:2], atol=1e-6)
    assert not read[2].any()
    with pytest.raises(GraftError, match="not a context key"):
        ContextReader(encoder).encode(["no separator"])
    # embed_items with the texts: read where found, the item alone elsewhere, then the title mixed in
    got = embed_items(encoder, [*items, "Not in the text."], ["T"] * 3, 0.0, texts=[LATE_TEXT] * 3)
    np.testing.assert_allclose(got[:2], vecs[:2], atol=1e-6)
    np.testing.assert_allclose(got[2], encoder.encode(["Not in the text."])[0], atol=1e-6)


def test_onnx_and_stored_backends_read_in_context_as_torch_does(encoder, tmp_path) -> None:
    from graft.encoder import find_spans

    texts = [LATE_TEXT, "A short paper. We study parsing with graphs."]
    spans = [find_spans(LATE_TEXT, ["It outperforms prior work on Omniglot."]),
             find_spans(texts[1], ["We study parsing with graphs."])]
    want = encoder.read_in_context(texts, spans)
    Encoder(backend="auto", store=tmp_path).encode(texts[:1])  # writes the export to the store
    for other in (Encoder(backend="onnx"), Encoder(backend="auto", store=tmp_path)):
        got = other.read_in_context(texts, spans)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert type(Encoder(backend="auto", store=tmp_path)._onnx).__name__ == "StoredEncoder"
