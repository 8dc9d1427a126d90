from __future__ import annotations

import json

import numpy as np
import pytest

from graft.errors import GraftError, IndexFormatError
from graft.index import Index
from graft.manifest import FORMAT_VERSION, new_manifest, read_manifest, record_stage
from graft.store import (
    FILE_MODE,
    atomic_path,
    folder_problem,
    index_lock,
    write_json,
    write_npy,
    write_parquet,
)


def test_atomic_write_keeps_old_file_on_failure(tmp_path) -> None:
    target = tmp_path / "a.npy"
    write_npy(target, np.arange(3))
    with pytest.raises(RuntimeError):
        with atomic_path(target, suffix=".npy") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed")
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]  # no temp file left behind


def test_artefacts_get_a_plain_files_permissions(tmp_path) -> None:
    """Written through a temporary file (owner-only), an artefact still gets the mode a plainly
    created file gets, so an index shared on a server is readable to whoever may read its folder."""
    import os
    import stat

    import polars as pl

    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert FILE_MODE == stat.S_IMODE(plain.stat().st_mode)
    write_json(tmp_path / "m.json", {"a": 1})
    write_npy(tmp_path / "v.npy", np.arange(3))
    write_parquet(tmp_path / "t.parquet", pl.DataFrame({"a": [1]}))
    for name in ("m.json", "v.npy", "t.parquet"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == FILE_MODE, name


def test_folder_problem_names_what_stops_an_output_folder(tmp_path, monkeypatch) -> None:
    import os

    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    assert folder_problem(tmp_path) is None
    assert folder_problem(tmp_path / "new" / "deeper") is None  # made on the first write
    assert not (tmp_path / "new").exists()  # made to try the name, then removed
    assert folder_problem(tmp_path / "new" / ("a" * 300)) == "cannot be made (File name too long)"
    assert not (tmp_path / "new").exists()
    assert folder_problem(afile) == "is a file"
    assert folder_problem(afile / "out" / "deeper") == f"lies under {afile}, which is a file"
    # a folder the user may not write into (faked: the tests may run as root, who may write anywhere)
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: os.fspath(path) != os.fspath(locked))
    assert folder_problem(locked / "out") == f"cannot be written ({locked} is not writable)"
    assert folder_problem(tmp_path / "other") is None


def test_index_lock_refuses_a_second_writer_and_is_released_on_exit(tmp_path) -> None:
    import os
    import subprocess
    import sys

    with index_lock(tmp_path, "graft train"):
        stamp = json.loads((tmp_path / ".graft-lock").read_text())
        assert stamp["command"] == "graft train" and stamp["pid"] == os.getpid()
        with pytest.raises(GraftError, match=rf"'{tmp_path}' is being written by `graft train` \(pid {os.getpid()}, "
                                             r"started 20.*run graft build again"):
            with index_lock(tmp_path, "graft build"):
                pass
        # another process is refused too (the lock is the operating system's, not this process's)
        code = ("import sys; from graft.store import index_lock; from graft.errors import GraftError\n"
                "try:\n    index_lock(sys.argv[1], 'graft build').__enter__()\nexcept GraftError as e:\n"
                "    print(e); sys.exit(3)")
        res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert res.returncode == 3 and "graft train" in res.stdout, res.stderr
    with index_lock(tmp_path, "graft build"):  # released when its holder is done
        assert json.loads((tmp_path / ".graft-lock").read_text())["command"] == "graft build"
    # a holder killed without cleaning up leaves the file but not the lock
    code = "import os, sys; from graft.store import index_lock; index_lock(sys.argv[1], 'graft train').__enter__(); os._exit(9)"
    assert subprocess.run([sys.executable, "-c", code, str(tmp_path)]).returncode == 9
    with index_lock(tmp_path, "graft train"):
        pass


def test_the_lock_holder_sweeps_temporary_files_a_killed_writer_left(tmp_path) -> None:
    """atomic_path's temporary files older than 15 minutes are leftovers of a writer killed outright:
    whoever takes the index's writer lock deletes them; younger ones and other files stay."""
    import os
    import subprocess
    import sys
    import time

    from graft.store import atomic_path

    code = ("import os, sys; from graft.store import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_bytes(b'half a shard'); os._exit(9)")
    shard = tmp_path / "cache" / "build" / "facets" / "shard-0001.parquet"
    shard.parent.mkdir(parents=True)
    assert subprocess.run([sys.executable, "-c", code, str(shard)]).returncode == 9
    (left,) = shard.parent.iterdir()  # SIGKILL: no cleanup ran
    assert left.name.startswith(".shard-0001.parquet.") and ".tmp" in left.name
    young = tmp_path / ".papers.parquet.abcd1234.tmp"
    young.write_text("an export in progress")
    (tmp_path / ".hidden.tmp").write_text("not atomic_path's")
    hour_ago = time.time() - 3600
    for p in (left, tmp_path / ".hidden.tmp"):
        os.utime(p, (hour_ago, hour_ago))
    with atomic_path(tmp_path / "manifest.json") as tmp:
        tmp.write_text("{}")
    with index_lock(tmp_path, "graft build"):
        assert not left.exists() and young.exists() and (tmp_path / ".hidden.tmp").exists()
    assert (tmp_path / "manifest.json").read_text() == "{}"


def test_reading_an_index_that_another_process_writes_says_so(tmp_path) -> None:
    """`graft info` (or a query) on a folder a build is writing names the build instead of
    advising a build that the lock would refuse; this process's own lock is not reported."""
    import subprocess
    import sys

    from graft.store import lock_holder

    ready = tmp_path / "ready"
    code = ("import sys, time, pathlib; from graft.store import index_lock\n"
            "with index_lock(sys.argv[1], 'graft build'):\n"
            "    pathlib.Path(sys.argv[2]).write_text('1'); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(ready)])
    try:
        for _ in range(200):
            if ready.exists():
                break
            proc.wait(timeout=0.1) if proc.poll() is not None else __import__("time").sleep(0.05)
        assert lock_holder(tmp_path) == lock_holder(tmp_path) and f"pid {proc.pid}" in lock_holder(tmp_path)
        with pytest.raises(IndexFormatError, match=rf"not an index yet: `graft build` \(pid {proc.pid}.* is building "
                                                   "it; wait for it to finish"):
            read_manifest(tmp_path)
        record_stage(tmp_path, new_manifest("abc"), "build", config={}, counts={"papers": 1}, timings={})
        with pytest.raises(IndexFormatError, match=r"no 'docids' stage yet: `graft build` .* is writing it"):
            read_manifest(tmp_path, require=("docids",))
    finally:
        proc.kill()
        proc.wait()
    assert lock_holder(tmp_path) is None
    with pytest.raises(IndexFormatError, match=r"no 'docids' stage yet; run `graft train"):
        read_manifest(tmp_path, require=("docids",))
    with index_lock(tmp_path, "graft train"):
        assert lock_holder(tmp_path) is None  # its own


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
    m["format_version"] = str(FORMAT_VERSION)  # a string is not the version it spells
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IndexFormatError, match=f"version '{FORMAT_VERSION}' is not supported"):
        Index.open(tmp_path)


def test_a_manifest_with_damaged_stage_records_is_refused(tmp_path) -> None:
    """A manifest that parses but whose records are not as GRAFT writes them is refused on open,
    naming the field (before, `graft info` and `query` failed with a TypeError or AttributeError
    traceback, or printed None for every count)."""
    good = {"config": {"top_k": 20}, "counts": {"papers": 3, "citations": 1, "facet_items": {"method": 4}},
            "timings_s": {"load": 0.5}}
    record_stage(tmp_path, new_manifest("h"), "build", config=good["config"], counts=good["counts"],
                 timings=good["timings_s"])
    assert read_manifest(tmp_path)["stages"]["build"]["counts"]["papers"] == 3
    for change, message in (
        (lambda b: b.update(config=None), "stages.build.config is NoneType, not an object"),
        (lambda b: b["counts"].update(facet_items=5), "stages.build.counts.facet_items is 5, not an object"),
        (lambda b: b["counts"].update(papers="many"), "stages.build.counts.papers is 'many', not a number"),
        (lambda b: b.pop("counts"), "stages.build has no counts"),
        (lambda b: b.update(timings_s=[1]), "stages.build.timings_s is list"),
    ):
        m = new_manifest("h")
        record = json.loads(json.dumps(good))
        change(record)
        m["stages"]["build"] = record
        (tmp_path / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(IndexFormatError, match=message + ".*rebuild with `graft build"):
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
