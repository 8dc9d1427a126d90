"""Out-of-corpus queries' facets and edge rows, extracted once and kept in `SPLITDIR/ooc/facets.jsonl`.

An out-of-corpus query is a held-out paper's title and abstract. Every system that answers it from
facets needs the same things, and all need the sentence encoder: the heuristic extractor's facet
items (the generative systems decode them), the text-only facet edge rows scored against the index
(the teacher walks them, the attribution suite checks credits against them; their citation half is
text coupling), the same rows under facet-only weights (the facet-only baseline walks them) and the
query's nearest corpus papers by title + abstract (the text coupling row: the generative retriever's
text channel).
They are computed in batches (`graft.external.ExternalScorer.score_many`) and written here after
each chunk of `eval.systems.OOC_CHUNK` queries (a stopped run keeps what it finished), so later runs, and machines without the encoder's files,
read them instead.

File format (JSON lines): a header `{"format", "version", "key", "created"}`, then one line per
query, sorted by qid: `{"qid", "text_sha", "facets": {facet: [items]}, "rows": {facet: [[column
indices], [weights]]}, "facet_only_rows": (the same form), "neighbours": [[column indices],
[cosines]]}`. The key names what the entries depend
on: the index's corpus hash and the graph settings of its build (top-K, alpha, beta, candidates,
citation rescaling, title weight), the extractor and its settings, the encoder, the text
coupling of the rows (`text_neighbours`), their feedback pass (`feedback`), and a digest of the code
that makes them (the extractor's sources and `graft/external.py`). A file with another
key or version is stale and rebuilt whole; an entry whose query text changed (`text_sha`) is recomputed. Weights are float32 values
written as JSON floats, which read back bit for bit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graft.errors import ConfigError, GraftError
from graft.facets import FACETS
from graft.jsonio import loads
from graft.manifest import now_iso
from graft.store import write_lines

CACHE_NAME = "facets.jsonl"
CACHE_FORMAT = "graft-ooc-facets"
CACHE_VERSION = 3  # 2: facet-only rows beside the rows; 3: the text coupling row (neighbours)


@dataclass
class OocEntry:
    """One out-of-corpus query's facet items, its facet edge rows (1 x n each), the same rows
    under facet-only weights (alpha 1, beta 0) for the facet-only baseline, and its text coupling
    row (1 x n: cosine with its nearest papers by title + abstract; empty without text coupling)."""

    facets: dict[str, list[str]]
    rows: dict[str, sp.csr_matrix]
    text_sha: str
    facet_only_rows: dict[str, sp.csr_matrix]
    neighbours: sp.csr_matrix


def cache_path(split_dir: str | Path) -> Path:
    """Where a split keeps its out-of-corpus facets: `SPLITDIR/ooc/facets.jsonl`."""
    return Path(split_dir) / "ooc" / CACHE_NAME


def text_sha(title: str, abstract: str) -> str:
    """A short hash of a query's text (what its facets were extracted from)."""
    return hashlib.sha256(f"{title}\n{abstract}".encode()).hexdigest()[:16]


def cache_key(manifest: dict[str, Any], *, extractor: str, extractor_config: dict[str, Any],
              encoder: str, text_neighbours: int, feedback: int) -> dict[str, Any]:
    """What the cached entries depend on.

    Args:
        manifest: the index's manifest (corpus hash and build config).
        extractor: the facet extractor's name (`heuristic`).
        extractor_config: its settings.
        encoder: the sentence encoder's name (`all-MiniLM-L6-v2` or a local folder).
        text_neighbours: M of the rows' text coupling (`graft.external.TEXT_NEIGHBOURS`; 0 = none).
        feedback: R of their second pass (`graft.external.FEEDBACK`; 0 = none).
    Returns:
        The key written into, and compared with, the file's header.
    """
    from graphbuild.build import EXTRACTOR_SOURCES, BuildConfig
    from graphbuild.checkpoints import source_digest

    build = BuildConfig.from_manifest(manifest)
    graph = {k: getattr(build, k) for k in ("top_k", "alpha", "beta", "n_candidates", "citation_rescale",
                                            "title_weight", "item_context", "linked_candidates",
                                            "citation_partners", "lexical_weight", "text_lexical_weight")}
    # the code that takes a query apart and scores its rows: entries made by other code are stale
    code = source_digest(*EXTRACTOR_SOURCES.get(extractor, ()), "graft/external.py", "graft/lexical.py")
    return {"corpus_hash": manifest.get("corpus_hash"), "graph": graph, "extractor": extractor,
            "extractor_config": extractor_config, "encoder": encoder, "text_neighbours": text_neighbours,
            "feedback": feedback, "code": code}


def default_key(manifest: dict[str, Any], encoder_name: str | None = None) -> dict[str, Any]:
    """The key of entries made as `ExternalScorer` makes them for this index: the heuristic extractor
    with its default settings, the index's embedding model (or `encoder_name`), the default text
    coupling where the build wrote paper embeddings (none where it predates them) and the default
    feedback pass. Computed from
    the manifest, without loading the encoder or the index's files."""
    from graft.build_config import BuildConfig
    from graft.encoder import model_name
    from graft.external import FEEDBACK, TEXT_NEIGHBOURS
    from graft.extract import HeuristicFacetExtractor

    build = manifest.get("stages", {}).get("build", {})
    papers = bool((build.get("counts") or {}).get("paper_embeddings"))
    return cache_key(manifest, extractor=HeuristicFacetExtractor.name, extractor_config=asdict(BuildConfig.from_manifest(manifest).heuristic_config()),
                     encoder=encoder_name or model_name((build.get("config") or {}).get("embedding_model")),
                     text_neighbours=TEXT_NEIGHBOURS if papers else 0, feedback=FEEDBACK)


def _row_json(row: sp.csr_matrix) -> list[list[Any]]:
    row = sp.csr_matrix(row)
    return [row.indices.astype(np.int64).tolist(), [float(w) for w in row.data.astype(np.float32)]]


def _row_from_json(value: list[list[Any]], n: int) -> sp.csr_matrix:
    cols, weights = value
    indices = np.asarray(cols, dtype=np.int32)
    return sp.csr_matrix((np.asarray(weights, dtype=np.float32), indices, np.array([0, len(indices)], np.int32)),
                         shape=(1, n))


def read_cache(path: str | Path, key: dict[str, Any], n: int) -> dict[str, OocEntry] | None:
    """The entries of a cache file, or None when the file is missing or its key is not `key`.

    Args:
        path: the cache file.
        key: the expected key (`default_key`).
        n: papers in the index (the width of the rows).
    Raises:
        GraftError: the file is not a cache file or a line is not valid JSON (delete it to rebuild).
    """
    path = Path(path)
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        header = loads(lines[0], f"{path} line 1") if lines else {}
        if header.get("format") != CACHE_FORMAT:
            raise ConfigError(f"format {header.get('format')!r} is not {CACHE_FORMAT!r}")
        if header.get("version") != CACHE_VERSION or header.get("key") != key:
            return None
        out = {}
        for line in lines[1:]:
            if line.strip():
                row = loads(line, str(path))
                out[row["qid"]] = OocEntry({f: list(row["facets"].get(f, [])) for f in FACETS},
                                           {f: _row_from_json(row["rows"][f], n) for f in FACETS}, row["text_sha"],
                                           {f: _row_from_json(row["facet_only_rows"][f], n) for f in FACETS},
                                           _row_from_json(row["neighbours"], n))
    except (ValueError, KeyError, TypeError) as exc:
        raise GraftError(f"{path} is not a readable out-of-corpus facet cache ({exc}); delete it and rerun "
                         f"to rebuild it") from None
    return out


def write_cache(path: str | Path, key: dict[str, Any], entries: dict[str, OocEntry]) -> Path:
    """Write a cache file atomically (entries sorted by qid)."""
    header = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": key, "created": now_iso(),
              "queries": len(entries)}
    lines = [json.dumps(header)]
    for qid in sorted(entries):
        e = entries[qid]
        lines.append(json.dumps({"qid": qid, "text_sha": e.text_sha, "facets": {f: e.facets.get(f, []) for f in FACETS},
                                 "rows": {f: _row_json(e.rows[f]) for f in FACETS},
                                 "facet_only_rows": {f: _row_json(e.facet_only_rows[f]) for f in FACETS},
                                 "neighbours": _row_json(e.neighbours)}))
    write_lines(path, lines)
    return Path(path)
