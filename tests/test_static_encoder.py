"""The static encoder distilled from the packaged MiniLM (`training/static_encoder.py`): its vectors
are the mean of PCA-projected, SIF-weighted token vectors, and graft's encoder reads its folder."""

from __future__ import annotations

import numpy as np
import pytest

from graft.errors import GraftError

TEXTS = ["Graph neural networks for molecule property prediction.",
         "We propose a message passing network over molecular graphs.",
         "A parser for English sentences with a neural network.",
         "Parsing English text with dependency grammars.",
         "Stock prices fell sharply after the announcement.",
         "The central bank raised interest rates again."] * 3


def test_a_distilled_static_encoder_ranks_like_its_teacher_and_loads_in_graft(tmp_path, encoder) -> None:
    from graft.encoder import Encoder
    from training.static_encoder import SIF_A, distill, plain_tokenizer, sif_weights, token_vectors

    info = distill(None, tmp_path / "static", dims=32, sample=TEXTS, only_sample_tokens=True)
    assert info["dims"] == 32 and info["weighted"] and 30 < info["tokens"] < 100
    static = Encoder(str(tmp_path / "static"), backend="torch")
    assert static.dim == 32 and static.backend == "torch" and not static._onnx_due  # nothing to export
    v = static.encode(TEXTS[:6])
    # on the CPU it runs in NumPy by default, without sentence-transformers, to the same vectors
    fast = Encoder(str(tmp_path / "static"))
    assert fast.backend == "numpy" and fast.model is None and fast.dim == 32
    np.testing.assert_allclose(fast.encode(TEXTS[:6] + [""]), np.vstack([v, np.zeros((1, 32))]), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # neighbours agree with the transformer's: each text's nearest other text is its pair's
    nearest = lambda m: np.argsort(-(m @ m.T - 2 * np.eye(6)), axis=1)[:, 0].tolist()  # noqa: E731
    assert nearest(v) == nearest(np.asarray(encoder.encode(TEXTS[:6]))) == [1, 0, 3, 2, 5, 4]

    # a text's vector is the normalised mean of its tokens' rows of the stored table
    tok = encoder.model.tokenizer
    plain = plain_tokenizer(tok)
    ids = plain.encode(TEXTS[0], add_special_tokens=False).ids
    table = list(static.model)[0].embedding.weight.detach().numpy()
    mean = table[ids].mean(axis=0)
    np.testing.assert_allclose(v[0], mean / np.linalg.norm(mean), atol=1e-5)
    # those rows: the tokens' transformer vectors, centred, projected on 32 principal components, SIF-weighted
    keep = sorted({i for t in TEXTS for i in plain.encode(t, add_special_tokens=False).ids})
    assert tok.pad_token_id not in keep
    raw = token_vectors(encoder.model, keep)  # end, token, start: as distill reads them
    centred = raw - raw.mean(axis=0)
    top = np.linalg.svd(centred, full_matrices=False)[2][:32]
    weights = sif_weights(tok, TEXTS, table.shape[0], SIF_A)
    want = (centred @ top.T) * weights[keep][:, None]
    np.testing.assert_allclose(np.abs(table[keep]), np.abs(want), atol=1e-4)  # a component's sign is free
    assert weights[tok.convert_tokens_to_ids("the")] < weights[tok.convert_tokens_to_ids("molecule")]
    assert not table[tok.convert_tokens_to_ids("piano")].any()  # not in the sample: left out

    # texts are not read in context by a model without token states: every item keeps its own vector
    for model in (static, fast):
        docs, _, found = model.read_in_context(TEXTS[:1], [[(0, 5)]])
        assert not found.any()
        np.testing.assert_allclose(docs[0], v[0], atol=1e-6)

    with pytest.raises(GraftError, match="dims must lie in"):
        distill(None, tmp_path / "bad", dims=500, sample=TEXTS, only_sample_tokens=True)
    with pytest.raises(GraftError, match="needs sample texts"):
        distill(None, tmp_path / "bad", only_sample_tokens=True)


def test_a_build_with_a_static_encoder_and_one_changed_in_place(tmp_path) -> None:
    """`graft build --embedding-model STATIC`: items, titles and papers embedded by the static
    encoder (no item is read in context: it has no token states); distilled again into the same
    folder, the next build makes new vectors instead of reusing the stored ones."""
    import gzip
    import json

    from conftest import cs768_path

    from graft.index import Index
    from graphbuild.build import BuildConfig, build_index
    from training.static_encoder import distill

    records = [json.loads(line) for _, line in zip(range(12), gzip.open(cs768_path(), "rt"))]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({**r, "references": []}) + "\n" for r in records))
    texts = [f"{r['title']}. {r['abstract']}" for r in records]
    model = tmp_path / "static"
    distill(None, model, dims=24, sample=texts, only_sample_tokens=True)
    config = BuildConfig(embedding_model=str(model), facet_scorer="rules")
    with pytest.warns(UserWarning, match="no token states to read items in context"):
        first = build_index(corpus, tmp_path / "idx", config)
    idx = Index.open(tmp_path / "idx")
    assert idx.manifest["stages"]["build"]["config"]["item_context"] == "title"  # what was built, not asked
    assert np.load(tmp_path / "idx" / "embeddings" / "items.npy").shape[1] == 24
    assert idx.paper_embeddings.shape == (12, 24) and first.reused == []
    assert build_index(corpus, tmp_path / "idx", config).reused == ["facets", "titles", "papers"]
    distill(None, model, dims=16, sample=texts, only_sample_tokens=True)  # the same folder, other vectors
    again = build_index(corpus, tmp_path / "idx", config)
    assert again.reused == [] and Index.open(tmp_path / "idx").paper_embeddings.shape == (12, 16)
