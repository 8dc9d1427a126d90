from __future__ import annotations

import json

import numpy as np
import pytest

from graft.errors import IndexFormatError
from graft.index import Index
from graft.manifest import FORMAT_VERSION, new_manifest, read_manifest, record_stage
from graft.store import atomic_path, write_npy


def test_atomic_write_keeps_old_file_on_failure(tmp_path) -> None:
    target = tmp_path / "a.npy"
    write_npy(target, np.arange(3))
    with pytest.raises(RuntimeError):
        with atomic_path(target, suffix=".npy") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed")
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]  # no temp file left behind


def test_open_refuses_missing_and_incompatible_indexes(tmp_path) -> None:
    with pytest.raises(IndexFormatError, match="graft build"):
        Index.open(tmp_path / "nope")
    with pytest.raises(IndexFormatError, match="no manifest.json.*graft build"):
        Index.open(tmp_path)
    m = new_manifest("abc")
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IndexFormatError, match="no 'build' stage.*graft build"):
        Index.open(tmp_path)
    with pytest.raises(IndexFormatError, match="no 'train' stage.*graft train"):
        read_manifest(tmp_path, require=("train",))
    m["format_version"] = FORMAT_VERSION + 1
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IndexFormatError, match="version"):
        Index.open(tmp_path)


def test_record_stage_writes_config_counts_timings_versions(tmp_path) -> None:
    m = new_manifest("h")
    record_stage(tmp_path, m, "build", config={"top_k": 20}, counts={"papers": 3}, timings={"load": 0.5})
    got = read_manifest(tmp_path)
    stage = got["stages"]["build"]
    assert stage["config"] == {"top_k": 20}
    assert stage["counts"] == {"papers": 3}
    assert stage["timings_s"] == {"load": 0.5}
    assert "numpy" in stage["versions"] and "python" in stage["versions"]
    # a manifest alone is not enough: the artefacts must be there too
    with pytest.raises(IndexFormatError, match="lacks papers.parquet"):
        Index.open(tmp_path)
