"""Atomic artefact I/O for the index directory.

Every artefact is written to a temporary name in the same directory and renamed into place, so a
killed run leaves either the old file or the new one, never half a file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from graft.jsonio import loads, read_json_file

if TYPE_CHECKING:  # the trainer writes through this module on machines without polars
    import polars as pl


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: The permissions a plainly created file gets here (0o666 less the umask), read once at import
FILE_MODE = 0o666 & ~_umask()


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it onto `path`, else delete it.

    The file gets the permissions of a plainly created one (`FILE_MODE`), not the owner-only mode
    of a temporary file, so an index others may read stays readable to them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, FILE_MODE)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


#: `atomic_path`'s temporary files: ".{name}.{8 random characters}.tmp{suffix}" (`tempfile.mkstemp`)
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp[^/]*$")


def sweep_temporary_files(folder: str | os.PathLike[str], older_than_s: float = 900.0) -> int:
    """Delete `atomic_path` temporary files under `folder` left by a writer killed outright
    (SIGKILL, power loss: no cleanup ran), returning how many. Called by the holder of the folder's
    writer lock, so no other writer's file is in progress; files younger than `older_than_s` are
    kept all the same (a command writing without the lock, such as an export, may be at work)."""
    import time

    cutoff, removed = time.time() - older_than_s, 0
    for path in Path(folder).rglob(".*.tmp*"):
        try:
            if _TEMPORARY.match(path.name) and path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError:  # gone meanwhile, or not ours to remove: left as it is
            continue
    return removed


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot be used as an output folder, or None when it can.

    Checked before any work, so a command does not compute for minutes and then fail on its first
    write: `path` is a file, lies under a file, its nearest existing folder is not writable, or
    the file system refuses to make it (a name too long, a read-only or virtual file system: that
    shows only when the folder is made, so a missing `path` is made and what was made removed).
    Returns the reason as the end of a sentence that starts with the path ("is a file").
    """
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            return "is a file"
        parent = path
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    except OSError as exc:  # e.g. a name longer than the file system allows
        return f"cannot be used ({exc.strerror or exc})"
    if not parent.is_dir():
        return f"lies under {parent}, which is a file"
    if not os.access(parent, os.W_OK):
        return f"cannot be written ({parent} is not writable)"
    if parent == path:
        return None
    made = [path, *[p for p in path.parents if not p.exists()]]
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        return f"cannot be made ({exc.strerror or exc})"
    finally:
        for folder in made:  # innermost first; a name refused was never made
            try:
                folder.rmdir()
            except OSError:
                pass
    return None


#: The file in an index folder that a command writing into the index holds locked
LOCK_NAME = ".graft-lock"


def _holder_text(holder: Any) -> str:
    if not isinstance(holder, dict):
        return "another command"
    return (f"`{holder.get('command', 'another GRAFT command')}` (pid {holder.get('pid', '?')}, "
            f"started {holder.get('started', '?')})")


def lock_holder(folder: str | os.PathLike[str]) -> str | None:
    """Who holds `folder`'s writer lock (`index_lock`), as "`graft build` (pid N, started T)", or
    None when no one does (no lock file, or its lock free) or this process does. Only looks: never
    waits, never takes it for longer than the look."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = loads(os.read(fd, 4096) or b"{}", str(LOCK_NAME))
            except ValueError:
                holder = None
            if isinstance(holder, dict) and holder.get("pid") == os.getpid():
                return None  # this process writes the index: its own reads see it as it is
            return _holder_text(holder)
        return None
    finally:
        os.close(fd)


@contextmanager
def index_lock(folder: str | os.PathLike[str], command: str) -> Iterator[None]:
    """Hold `folder`'s writer lock while `command` (`graft build`, `graft train`) writes into it.

    Two writers of one index would leave it mixed (one run's pairs, the other's model), so the
    second is refused at once, naming the first. The lock is an advisory `flock` on `LOCK_NAME`,
    which the operating system releases when its holder exits, however it exits: a killed run
    never leaves a stale lock. The file itself stays (removing it would race with the next
    holder); it records the holder's command, pid and start time for the message. Where `flock`
    does not exist (Windows) nothing is locked.

    Raises:
        GraftError: another process holds the lock.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    from datetime import datetime, timezone

    from graft.errors import GraftError

    path = Path(folder) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                who = _holder_text(loads(os.read(fd, 4096) or b"{}", str(LOCK_NAME)))
            except ValueError:
                who = _holder_text(None)
            raise GraftError(f"index '{folder}' is being written by {who}; run {command} again when that "
                             f"has finished (or stop it)") from None
        stamp = {"command": command, "pid": os.getpid(),
                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(stamp).encode(), 0)
        sweep_temporary_files(folder)
        yield
    finally:
        os.close(fd)  # releases the lock


def user_cache_dir() -> Path:
    """GRAFT's user cache, for what depends on a model rather than an index (the converted SmolLM2
    folder, the encoder's ONNX export): `$GRAFT_CACHE`, else `$XDG_CACHE_HOME/graft`, else
    `~/.cache/graft`."""
    if os.environ.get("GRAFT_CACHE"):
        return Path(os.environ["GRAFT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "graft"


def json_text(obj: Any) -> str:
    """The text `write_json` writes: indented JSON (values it cannot encode as their `str`), one
    newline at the end."""
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json_text(obj), encoding="utf-8")


def write_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Write text lines (UTF-8, each ended by a newline) atomically: JSONL, TREC runs and qrels."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file of an index or a cache (a manifest, a store's record), bounded as every JSON GRAFT
    reads is (`graft.jsonio.read_json_file`).

    Raises:
        ValueError: not valid JSON, or beyond the limits (`graft.jsonio.JSONLimitError`); OSError.
    """
    return read_json_file(path)


def write_parquet(path: str | os.PathLike[str], df: pl.DataFrame) -> None:
    with atomic_path(path) as tmp:
        df.write_parquet(tmp)


def write_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        np.save(tmp, array)


def write_npz(path: str | os.PathLike[str], matrix: sp.spmatrix | sp.sparray) -> None:
    """A sparse matrix as scipy's `.npz`, uncompressed: zlib took 23.6 of the write stage's 26 s at
    10^5 papers (the citation score's 28 million entries: 17.6 s compressed, 0.6 s not) for files
    1.3-2.2 times smaller (docs/scale.md)."""
    with atomic_path(path, suffix=".npz") as tmp:
        sp.save_npz(tmp, sp.csr_matrix(matrix), compressed=False)

