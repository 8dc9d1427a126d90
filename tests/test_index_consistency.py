"""An index is one consistent version: a handle whose folder was rebuilt refuses to read the new
files, artefacts of another shape are refused on open and on lazy load, and symbolic links in an
index are never followed out of it nor deleted through."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from graft.errors import GraftError, IndexFormatError
from graft.index import Index
from graphbuild.build import BuildConfig, build_index


def write_corpus(folder: Path, n: int) -> Path:
    from graphbuild.corpus import load_corpus

    papers = load_corpus(None, limit=n).papers
    path = folder / f"corpus{n}.jsonl"
    path.write_text("".join(json.dumps({"id": r["paper_id"], "title": r["title"], "abstract": r["abstract"]}) + "\n"
                            for r in papers.iter_rows(named=True)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("corpora")
    return write_corpus(folder, 10), write_corpus(folder, 6)


@pytest.fixture(scope="module")
def other_index(corpora, tmp_path_factory, encoder) -> Path:
    out = tmp_path_factory.mktemp("other") / "idx"
    build_index(corpora[1], out, BuildConfig(), encoder=encoder)
    return out


@pytest.fixture
def index(corpora, tmp_path, encoder) -> Path:
    out = tmp_path / "idx"
    build_index(corpora[0], out, BuildConfig(), encoder=encoder)
    return out


def test_a_handle_never_mixes_a_rebuilt_folders_files_with_its_own(index, corpora, encoder) -> None:
    early = Index.open(index)
    paper = early.paper_ids[0]
    assert early.papers.height == 10  # read before the rebuild
    build_index(corpora[1], index, BuildConfig(top_k=3), encoder=encoder)  # another corpus, same folder
    with pytest.raises(IndexFormatError, match="was rebuilt, or is being rebuilt, since this handle opened it"):
        early.graphs  # noqa: B018 - the lazy load under test
    with pytest.raises(IndexFormatError, match="open it again"):
        early.query_paper(paper, k=5)
    fresh = Index.open(index)
    assert fresh.n == 6 and fresh.query_paper(fresh.paper_ids[0], k=3).hits
    # a rebuild of the same corpus with the same settings is another build too
    build_index(corpora[1], index, BuildConfig(top_k=3), encoder=encoder)
    with pytest.raises(IndexFormatError, match="since this handle opened it"):
        fresh.citation_score  # noqa: B018
    # and a folder marked as being rebuilt is not read
    again = Index.open(index)
    manifest = json.loads((index / "manifest.json").read_text())
    (index / "manifest.json").write_text(json.dumps({**manifest, "in_progress": "build"}))
    with pytest.raises(IndexFormatError, match="being rebuilt"):
        again.item_embeddings  # noqa: B018


@pytest.mark.parametrize("rel", ["graph/method.npz", "graph/citation.npz", "embeddings/papers.npy",
                                 "embeddings/items.npy", "papers.parquet", "facets.parquet"])
def test_an_artefact_of_another_index_is_refused_on_open_and_on_lazy_load(index, other_index, rel) -> None:
    handle = Index.open(index)  # opened while the files agree
    if rel.startswith("graph/") and rel != "graph/citation.npz":
        # the graphs are read from the build's own query files (cache/query/graphs) where those are
        # there, which hold this build's graphs whatever is copied over the npz: an index without
        # them reads the npz itself
        mapped = handle.graphs["method"].copy()
        shutil.copy(other_index / rel, index / rel)
        handle.__dict__.pop("graphs")
        assert (handle.graphs["method"] != mapped).nnz == 0
        handle.__dict__.pop("graphs")
        shutil.rmtree(index / "cache" / "query" / "graphs")
    else:
        shutil.copy(other_index / rel, index / rel)
    with pytest.raises(IndexFormatError, match=f"{rel} has (rows|shape) .* belongs to another index or build"):
        Index.open(index)
    attribute = {"graph/method.npz": "graphs", "graph/citation.npz": "citation_score",
                 "embeddings/papers.npy": "paper_embeddings", "embeddings/items.npy": "item_embeddings",
                 "papers.parquet": "papers", "facets.parquet": "facets"}[rel]
    with pytest.raises(IndexFormatError, match="belongs to another index or build"):
        getattr(handle, attribute)


def test_symlinks_in_an_index_are_never_followed_out_nor_deleted_through(index, corpora, encoder, tmp_path) -> None:
    elsewhere = tmp_path / "my-model"
    elsewhere.mkdir()
    (elsewhere / "weights.bin").write_bytes(b"precious")
    (index / "model").symlink_to(elsewhere, target_is_directory=True)
    before = (index / "manifest.json").read_bytes()
    with pytest.raises(GraftError, match=r"symbolic links \(model -> .*my-model\).*the index was not touched"):
        build_index(corpora[0], index, BuildConfig(top_k=4), encoder=encoder)
    assert (index / "manifest.json").read_bytes() == before  # not marked as being rebuilt
    assert (elsewhere / "weights.bin").read_bytes() == b"precious"
    assert Index.open(index).query_paper(Index.open(index).paper_ids[0], k=3).hits
    (index / "model").unlink()
    # an artefact that is a link out of the index is not read
    outside = tmp_path / "papers.parquet"
    shutil.move(index / "papers.parquet", outside)
    (index / "papers.parquet").symlink_to(outside)
    with pytest.raises(IndexFormatError, match="papers.parquet leads out of the index folder"):
        Index.open(index)
