"""The encoder's stored ONNX export (`graft.encoder_store`): same vectors as
sentence-transformers, no torch, and a fresh export whenever the stored one does not fit."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from graft import encoder_store
from graft.encoder import AUTO_ONNX_TEXTS, Encoder, default_model_path


def real_texts() -> list[str]:
    """Demo-corpus titles + abstracts and their sentences, with the awkward cases: an empty text,
    padding whitespace, accents and CJK, and a text past MiniLM's 256 tokens (truncated)."""
    from graft.text import paper_text, split_sentences
    from graphbuild.corpus import load_corpus

    papers = load_corpus(None, limit=12).papers
    whole = [paper_text(t, a) for t, a in zip(papers["title"].to_list(), papers["abstract"].to_list())]
    sentences = [s for a in papers["abstract"].to_list() for s in split_sentences(a)]
    return [*whole, *sentences, "", "   padded  text ", "Ünïcode café — naïve 東京大学", " ".join(whole) * 2]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A store holding the packaged model's export, written by an encoder on ONNX Runtime."""
    store = tmp_path_factory.mktemp("cache") / encoder_store.STORE
    writer = Encoder(backend="onnx", store=store)
    assert writer.stored is not None and writer.stored.is_file()
    return store, writer


def test_packaged_model_is_reproduced() -> None:
    spec = encoder_store.light_spec(default_model_path())
    assert spec == encoder_store.Spec(max_length=256, lowercase=False, pooling="mean", dim=384,
                                      pad_token="[PAD]", padding_left=False)


def test_stored_export_gives_sentence_transformers_vectors_without_it(stored, encoder) -> None:
    """Loaded from the store, the encoder runs tokenizers + ONNX Runtime + NumPy pooling (no
    sentence-transformers model at all) and gives PyTorch's vectors and the ONNX backend's, batched
    by any size."""
    store, writer = stored
    texts = real_texts()
    reader = Encoder(store=store)
    assert reader.model is None and reader.backend == "onnx" and reader.dim == encoder.dim
    assert isinstance(reader._onnx, encoder_store.StoredEncoder)
    writer._memo.clear()
    onnx_vecs = writer.encode(texts)
    torch_vecs = encoder.encode(texts)
    for size in (1, 5, 16):
        reader.batch_size = size
        reader._memo.clear()
        got = reader.encode(texts)
        assert got.dtype == np.float32 and got.shape == (len(texts), 384)
        np.testing.assert_allclose(got, onnx_vecs, atol=1e-6)
        np.testing.assert_allclose(got, torch_vecs, atol=2e-6)


def test_a_stale_or_broken_export_is_not_read(stored, tmp_path) -> None:
    """Another sidecar version, a truncated ONNX file, or a model folder that changed on disk:
    the encoder loads sentence-transformers instead, and exports again when it is due."""
    store, _ = stored
    onnx_path = next(store.glob("*.onnx"))
    meta_path = onnx_path.with_suffix(".json")
    assert encoder_store.load(store, default_model_path()) is not None

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    meta = json.loads((copy / meta_path.name).read_text())
    (copy / meta_path.name).write_text(json.dumps({**meta, "version": encoder_store.VERSION + 1}))
    assert encoder_store.load(copy, default_model_path()) is None
    (copy / meta_path.name).write_text(json.dumps(meta))
    (copy / onnx_path.name).write_bytes(onnx_path.read_bytes()[:1000])
    assert encoder_store.load(copy, default_model_path()) is None
    enc = Encoder(store=copy)
    assert enc.model is not None and enc.backend == "torch"
    enc.encode(["One query sentence."])  # a writable store: the export is due with the first call
    assert enc.backend == "onnx" and enc.stored == copy / onnx_path.name
    assert encoder_store.load(copy, default_model_path()) is not None

    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    before = encoder_store.fingerprint(model)
    (model / "config_sentence_transformers.json").write_text((model / "config_sentence_transformers.json")
                                                              .read_text() + "\n")
    assert encoder_store.fingerprint(model) != before


def test_a_build_encoder_runs_the_stored_file_instead_of_exporting(stored, tmp_path, monkeypatch) -> None:
    """An encoder that only writes the store (the build's, `from_store=False`) still loads
    sentence-transformers, but runs the stored file in ONNX Runtime instead of exporting again; a
    stored file that will not load (same size, bytes garbled) is exported and written anew."""
    import torch

    store, writer = stored
    texts = real_texts()[:40]
    writer._memo.clear()
    want = writer.encode(texts)
    copy = tmp_path / "store"
    shutil.copytree(store, copy)

    def no_export(*args, **kwargs):
        raise AssertionError("exported although the store holds the model's export")

    with monkeypatch.context() as m:
        m.setattr(torch.onnx, "export", no_export)
        enc = Encoder(backend="onnx", store=copy, from_store=False)
    assert enc.model is not None and enc._onnx.from_stored and enc.stored is None
    np.testing.assert_allclose(enc.encode(texts), want, atol=1e-6)

    onnx_path = next(copy.glob("*.onnx"))
    onnx_path.write_bytes(b"\0" * onnx_path.stat().st_size)
    enc = Encoder(backend="onnx", store=copy, from_store=False)
    assert not enc._onnx.from_stored and enc.stored == onnx_path
    assert encoder_store.load(copy, default_model_path()) is not None
    np.testing.assert_allclose(enc.encode(texts), want, atol=1e-6)


def test_an_unwritable_store_keeps_the_auto_threshold(tmp_path) -> None:
    """Where the export cannot be stored (here a file stands where the folder would go), a query's
    few sentences stay on PyTorch, as without a store."""
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    enc = Encoder(store=blocker / "encoder")
    enc.encode(["A query sentence.", "Another one."])
    assert enc.backend == "torch" and enc.stored is None
    assert enc._onnx_at == AUTO_ONNX_TEXTS


def test_models_outside_the_reproduced_pipeline_are_refused(tmp_path) -> None:
    """A Dense layer, weighted pooling, a default prompt or extra tokenizer arguments are not
    reproduced: such a model is never stored, so sentence-transformers keeps encoding it."""
    base = default_model_path()

    def variant(name: str, edit) -> str:
        folder = tmp_path / name
        shutil.copytree(base, folder, ignore=shutil.ignore_patterns("*.safetensors"))
        edit(folder)
        return str(folder)

    def with_dense(folder) -> None:
        modules = json.loads((folder / "modules.json").read_text())
        modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "modules.json").write_text(json.dumps(modules))

    def weighted(folder) -> None:
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_weightedmean_tokens": True}))

    def extra_args(folder) -> None:
        (folder / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": 256, "do_lower_case": False, "tokenizer_args": {"add_prefix_space": True}}))

    def prompted(folder) -> None:
        config = json.loads((folder / "config_sentence_transformers.json").read_text())
        (folder / "config_sentence_transformers.json").write_text(
            json.dumps({**config, "prompts": {"query": "query: "}, "default_prompt_name": "query"}))

    assert "Dense" in encoder_store.light_spec(variant("dense", with_dense))
    assert "prompt" in encoder_store.light_spec(variant("prompted", prompted))
    assert "pooling" in encoder_store.light_spec(variant("weighted", weighted))
    extra = variant("extra", extra_args)
    assert "tokenizer_args" in encoder_store.light_spec(extra)
    assert encoder_store.save(tmp_path / "store", extra, b"not stored", ["input_ids"]) is None
    assert not (tmp_path / "store").exists()
