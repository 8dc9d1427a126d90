"""`manifest.json`: format version, per-stage config, corpus hash, counts, timings, versions."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import shlex
from pathlib import Path
from typing import Any

from graft.errors import IndexFormatError
from graft.store import lock_holder, read_json, write_json

FORMAT_NAME = "graft-index"
#: Bumped whenever an artefact's layout changes incompatibly.
FORMAT_VERSION = 1

#: Written last into INDEX/model by `graft train` (`training.checkpoints.save_final_model`): a model
#: folder without it is one whose final save did not finish.
MODEL_DONE = "training_config.json"

#: The command that produces each stage, for error messages.
STAGE_COMMANDS = {
    "build": "graft build CORPUS --out INDEX",
    "train": "graft train INDEX",
    "docids": "graft train INDEX",  # `graft train` makes the DocIDs and pairs on its way
    "pairs": "graft train INDEX",
}

_TRACKED_LIBRARIES = (
    "numpy", "scipy", "polars", "networkx", "sentence-transformers", "transformers", "torch",
    "accelerate", "marisa-trie", "onnxruntime",
)


def library_versions() -> dict[str, str]:
    """Versions of Python and the libraries that shape an index's content."""
    out = {"python": platform.python_version()}
    for name in _TRACKED_LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        out["graft"] = importlib.metadata.version("graft")
    except importlib.metadata.PackageNotFoundError:
        pass
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def manifest_path(index_dir: str | Path) -> Path:
    return Path(index_dir) / "manifest.json"


def new_manifest(corpus_hash: str) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "corpus_hash": corpus_hash,
        "created_at": now_iso(),
        "stages": {},
    }


def read_manifest(index_dir: str | Path, *, require: tuple[str, ...] = ("build",)) -> dict[str, Any]:
    """Read and check an index's manifest.

    Args:
        index_dir: the index directory.
        require: stages that must have completed.

    Raises:
        IndexFormatError: no manifest, another format or version, or a required stage missing;
            the message names the command that produces what is missing.
    """
    index_dir = Path(index_dir)
    path = manifest_path(index_dir)
    if not index_dir.is_dir():
        what = "is a file, not an index directory" if index_dir.exists() else "the directory does not exist"
        raise IndexFormatError(f"no index at '{index_dir}': {what}; create one with `{STAGE_COMMANDS['build']}`")
    if not path.is_file():
        busy = lock_holder(index_dir)
        if busy:
            raise IndexFormatError(f"'{index_dir}' is not an index yet: {busy} is building it; wait for it to finish")
        raise IndexFormatError(
            f"'{index_dir}' is not a GRAFT index (no manifest.json); create one with "
            f"`{STAGE_COMMANDS['build']}`"
        )
    try:
        manifest = read_json(path)
    except ValueError as exc:
        raise IndexFormatError(f"{path}: manifest is not valid JSON ({exc}); rebuild with "
                               f"`{STAGE_COMMANDS['build']}`") from exc
    stages = manifest.get("stages", {}) if isinstance(manifest, dict) else None
    if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
        raise IndexFormatError(f"{path}: not a GRAFT manifest (an object whose 'stages' maps each stage to its "
                               f"record); rebuild with `{STAGE_COMMANDS['build']}`")
    if manifest.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{path}: format {manifest.get('format')!r} is not {FORMAT_NAME!r}")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{path}: index format version {version!r} is not supported (this GRAFT reads version "
            f"{FORMAT_VERSION}); rebuild it with `{STAGE_COMMANDS['build']}`"
        )
    damaged = _damaged_records(stages)
    if damaged:
        raise IndexFormatError(f"{path}: not a GRAFT manifest ({damaged}); rebuild with "
                               f"`{STAGE_COMMANDS['build']}`")
    for stage in require:
        if stage not in stages:
            cmd = STAGE_COMMANDS.get(stage, f"graft {stage}")
            busy = lock_holder(index_dir)
            if busy:
                raise IndexFormatError(f"index '{index_dir}' has no '{stage}' stage yet: {busy} is writing it; "
                                       f"wait for it to finish")
            if manifest.get("in_progress") == "build":
                source = (manifest.get("corpus") or {}).get("source")
                again = (f"graft build {shlex.quote(str(source))} --out {shlex.quote(str(index_dir))}" if source
                         else STAGE_COMMANDS["build"])
                raise IndexFormatError(f"index '{index_dir}' is being rebuilt, or its rebuild was stopped: run "
                                       f"`{again}` again (it resumes)")
            raise IndexFormatError(f"index '{index_dir}' has no '{stage}' stage yet; run `{cmd}`")
    return manifest


#: Per-facet counts of the build record: objects mapping a facet to a number.
_PER_FACET_COUNTS = ("facet_items", "edges", "share_with_incoming_edge")


def _damaged_records(stages: dict[str, Any]) -> str | None:
    """What in the stage records is not as `record_stage` writes it, or None: every record's
    config, counts and timings_s are objects, and the build record has a config and counts whose
    paper and citation counts are numbers and per-facet counts objects of numbers."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for stage, record in stages.items():
        for key in ("config", "counts", "timings_s"):
            if key in record and not isinstance(record[key], dict):
                return f"stages.{stage}.{key} is {type(record[key]).__name__}, not an object"
    build = stages.get("build")
    if build is None:
        return None
    for key in ("config", "counts"):
        if key not in build:
            return f"stages.build has no {key}"
    counts = build["counts"]
    for key in ("papers", "citations"):
        if key in counts and not number(counts[key]):
            return f"stages.build.counts.{key} is {counts[key]!r}, not a number"
    for key in _PER_FACET_COUNTS:
        value = counts.get(key)
        if value is not None and not (isinstance(value, dict) and all(map(number, value.values()))):
            return f"stages.build.counts.{key} is {value!r}, not an object of per-facet numbers"
    return None


def record_stage(
    index_dir: str | Path,
    manifest: dict[str, Any],
    stage: str,
    *,
    config: dict[str, Any],
    counts: dict[str, Any],
    timings: dict[str, float],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Add a finished stage's record to the manifest and write it atomically."""
    manifest.setdefault("stages", {})[stage] = {
        "finished_at": now_iso(),
        "config": config,
        "counts": counts,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "versions": library_versions(),
        **(extra or {}),
    }
    write_json(manifest_path(index_dir), manifest)
    return manifest


def has_model(index_dir: str | Path) -> bool:
    """True when the index holds a finished generative retriever (`INDEX/model` with its weights and
    the training record written after them)."""
    folder = Path(index_dir) / "model"
    return (folder / "config.json").is_file() and (folder / MODEL_DONE).is_file()
