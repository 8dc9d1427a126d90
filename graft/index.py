"""`graft.Index`: read access to an index directory and retrieval over it."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.artefacts import (
    ArtefactError,
    check_citations,
    check_facets,
    check_papers,
    check_vectors,
    checked_csr,
    load_csr,
)
from graft.errors import GraftError, IndexFormatError, QueryError
from graft.facets import FACETS
from graft.fusion import CITATION
from graft.lexical import LEXICAL_SETS, LEXICON_FILE, Lexicon, lexical_file
from graft.manifest import read_manifest
from graft.results import CitationEvidence, Evidence, Hit, QueryResult
from graft.teacher import GraphTeacher, TeacherConfig, symmetrise


def _memmap(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r")


def _npz_shape(path: Path) -> tuple[int, ...]:
    """The shape a scipy `.npz` matrix declares, read without loading the matrix."""
    with np.load(path) as data:
        return tuple(int(v) for v in data["shape"])


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def _npy_shape(path: Path) -> tuple[int, ...]:
    return tuple(np.load(path, mmap_mode="r").shape)


def version_of(manifest: dict[str, Any]) -> tuple[Any, ...]:
    """What tells one build of an index folder from another: its build id (None for indexes made
    before builds had one), corpus hash and build finishing time."""
    build = (manifest.get("stages") or {}).get("build") or {}
    return manifest.get("build_id"), manifest.get("corpus_hash"), build.get("finished_at")


class Index:
    """An opened index directory. Artefacts load lazily, on first use.

    Use `Index.open(path)`; it refuses a directory that is not a finished, compatible index.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.version = version_of(manifest)
        counts = (manifest.get("stages") or {}).get("build", {}).get("counts") or {}
        papers, items = counts.get("papers"), counts.get("facet_items")
        #: papers and facet items the manifest says this build wrote (None: not recorded)
        self._expected_papers: int | None = int(papers) if isinstance(papers, (int, float)) else None
        self._expected_items: int | None = int(sum(items.values())) if isinstance(items, dict) else None
        self._preparing = False  # `prepare_queries` running: derived query files are written

    @classmethod
    def open(cls, path: str | Path) -> Index:
        """Open an index built by `graft build`.

        Raises:
            IndexFormatError: missing directory or manifest, wrong format version, or no build stage;
                the message names the command to run.
        """
        path = Path(path)
        manifest = read_manifest(path, require=("build",))
        for rel in ("papers.parquet", "facets.parquet", "citations.parquet", "embeddings/items.npy",
                    *(f"graph/{f}.npz" for f in FACETS), "graph/citation.npz"):
            if not (path / rel).is_file():
                raise IndexFormatError(
                    f"index '{path}' lacks {rel}; rebuild it with `graft build CORPUS --out {path}`"
                )
        index = cls(path, manifest)
        index._check_files()
        return index

    def _check_files(self) -> None:
        """Every artefact's shape against the paper and item counts of the manifest, from the
        files' headers (nothing large is read).

        Raises:
            IndexFormatError: an artefact of another shape (from another index or build), or one
                that leads out of the index folder.
        """
        n, items = self._expected_papers, self._expected_items
        checks: list[tuple[str, Callable[[Path], Any], Any]] = [
            ("papers.parquet", _parquet_rows, n), ("facets.parquet", _parquet_rows, items),
            ("embeddings/items.npy", lambda p: _npy_shape(p)[0], items),
            *((f"graph/{f}.npz", _npz_shape, None if n is None else (n, n)) for f in (*FACETS, "citation")),
        ]
        for rel in ("embeddings/items_alone.npy", "embeddings/papers.npy"):
            if (self.path / rel).exists():
                checks.append((rel, lambda p: _npy_shape(p)[0], items if "items" in rel else n))
        if (self.path / "graph" / "text.npz").exists():
            checks.append(("graph/text.npz", _npz_shape, None if n is None else (n, n)))
        for rel, measure, expected in checks:
            self._inside(rel)
            try:
                found = measure(self.path / rel)
            except Exception as exc:
                raise IndexFormatError(f"index '{self.path}': {rel} cannot be read ({type(exc).__name__}: {exc}); "
                                       f"the file is damaged: rebuild the index with `graft build CORPUS --out "
                                       f"{self.path}`") from exc
            self._expect(rel, found, expected)

    def _expect(self, rel: str, found: Any, expected: Any) -> None:
        if expected is not None and found != expected:
            what = "rows" if isinstance(expected, int) else "shape"
            raise IndexFormatError(f"index '{self.path}': {rel} has {what} {found}, but this index's build wrote "
                                   f"{expected} (its manifest's counts): the file belongs to another index or build; "
                                   f"rebuild with `graft build CORPUS --out {self.path}`")

    def _inside(self, rel: str) -> None:
        """Refuse an artefact that leads out of the index folder (a symbolic link to elsewhere)."""
        root = self.path.resolve()
        target = (self.path / rel).resolve()
        if target != root and root not in target.parents:
            raise IndexFormatError(f"index '{self.path}': {rel} leads out of the index folder (to {target}); "
                                   "GRAFT does not follow links out of an index: replace the link by the file")

    def check_version(self) -> None:
        """Refuse to go on when the folder now holds another build than the one this handle opened.

        Raises:
            IndexFormatError: the index was rebuilt, or is being rebuilt, since `Index.open`.
        """
        from graft.store import read_json

        try:
            now = read_json(self.path / "manifest.json")
        except (OSError, ValueError):
            now = None
        if isinstance(now, dict) and not now.get("in_progress") and version_of(now) == self.version:
            return
        raise IndexFormatError(f"index '{self.path}' was rebuilt, or is being rebuilt, since this handle opened it: "
                               "its files now belong to another build, which is never mixed with the one already "
                               "read; open it again (Index.open) once the build has finished")

    # ---- artefacts -------------------------------------------------------------------------
    def _read(self, rel: str, load: Callable[[Path], Any], columns: tuple[str, ...] | None = None) -> Any:
        """`load` of the artefact `rel`; one that cannot be read (a damaged or truncated file) raises
        IndexFormatError naming it and the rebuild, instead of the reader's own error. `columns`: the
        columns of papers.parquet `load` reads (None: all)."""
        path = self.path / rel
        self._inside(rel)
        self.check_version()
        try:
            value = load(path)
        except ArtefactError:
            raise
        except Exception as exc:
            raise IndexFormatError(f"index '{self.path}': {rel} cannot be read ({type(exc).__name__}: {exc}); "
                                   f"the file is damaged: rebuild the index with `graft build CORPUS --out "
                                   f"{self.path}`") from exc
        self.check_version()  # a rebuild marks the manifest before it replaces any file
        n, items = self._expected_papers, self._expected_items
        if rel in ("papers.parquet", "facets.parquet"):
            self._expect(rel, value.height, n if rel == "papers.parquet" else items)
            if rel == "papers.parquet":
                return check_papers(value, self.path, rel, columns)
            # the check finds each item's paper row: `item_rows`, cached here (a cached_property's slot)
            self.__dict__["item_rows"] = check_facets(value, self.paper_column("paper_id"), self.path, rel)
            return value
        if rel == "citations.parquet":
            return check_citations(value, self.paper_column("paper_id"), self.path, rel)
        if rel.startswith("graph/") and rel.endswith(".npz"):
            self._expect(rel, tuple(value.shape), None if n is None else (n, n))
        elif rel.startswith("embeddings/") and rel.endswith(".npy"):
            if value.ndim:
                self._expect(rel, value.shape[0], n if rel == "embeddings/papers.npy" else items)
            dim = (self.manifest.get("embedding") or {}).get("dim")
            scanned = self._scanned(rel)
            checked = check_vectors(value, self.path, rel, dim if isinstance(dim, int) else None, scan=not scanned)
            if not scanned and self._preparing:
                self._scanned(rel, record=True)
            return checked
        return value

    def _scanned(self, rel: str, *, record: bool = False) -> bool:
        """Whether the vectors file `rel` of this build was already scanned whole for non-finite
        values (`cache/query/scanned.json` names it with its size and modification time), so a large
        index's gigabytes of vectors are read once, not at every open; `record`: name it there
        (`prepare_queries` only: a query never writes into the index)."""
        from graft.store import read_json, write_json

        path, log = self.path / rel, self.path / "cache" / "query" / "scanned.json"
        try:
            stat = path.stat()
            found = read_json(log) if log.is_file() else None
        except (OSError, ValueError):
            return False
        files = found.get("files") if isinstance(found, dict) and found.get("version") == list(self.version) else None
        files = files if isinstance(files, dict) else {}
        mark = [stat.st_size, stat.st_mtime_ns]
        if not record:
            return files.get(rel) == mark
        try:
            write_json(log, {"version": list(self.version), "files": {**files, rel: mark}})
        except OSError:
            pass  # a folder this process cannot write: scanned again next time
        return True

    def _csr(self, path: Path) -> sp.csr_matrix:
        """A graph of this index, its arrays checked for range (`graft.artefacts.load_csr`)."""
        return load_csr(self.path, path.relative_to(self.path).as_posix())

    @cached_property
    def papers(self) -> pl.DataFrame:
        return self._read("papers.parquet", pl.read_parquet)

    def paper_column(self, name: str) -> pl.Series:
        """One column of papers.parquet (`paper_id`, `title`, `year`, ...), read alone and checked as
        `papers` checks it: a query shows ids, titles and years, and a large corpus's abstracts are
        most of the file. From `papers` where that is already read."""
        if "papers" in self.__dict__:
            return self.papers[name]
        read = self.__dict__.setdefault("_paper_columns", {})
        if name not in read:
            frame = self._read("papers.parquet", lambda p: pl.read_parquet(p, columns=[name]), columns=(name,))
            read[name] = frame[name]
        return read[name]

    @cached_property
    def facets(self) -> pl.DataFrame:
        return self._read("facets.parquet", pl.read_parquet)

    @cached_property
    def citations(self) -> pl.DataFrame:
        return self._read("citations.parquet", pl.read_parquet)

    @cached_property
    def item_embeddings(self) -> np.ndarray:
        """Item embeddings aligned with `facets` rows (memory-mapped): the vectors the facet graphs
        were built from, each item with its paper's title at the build's `title_weight` (and read
        inside its paper's text under item context "late")."""
        return self._read("embeddings/items.npy", _memmap)

    @cached_property
    def item_text_embeddings(self) -> np.ndarray:
        """Embeddings of the item texts alone, aligned with `facets` rows (memory-mapped), for
        comparing sentences with items (the survey writer): `items_alone.npy` when the build mixed
        in titles or read the items in context, else the item embeddings themselves.

        Raises:
            IndexFormatError: a title-weighted or in-context index without `items_alone.npy`.
        """
        weight = float(self.build_setting("title_weight", 0.0))
        if weight == 0 and self.build_setting("item_context", "title") == "title":
            return self.item_embeddings
        path = self.path / "embeddings" / "items_alone.npy"
        if not path.is_file():
            raise IndexFormatError(f"index '{self.path}' lacks embeddings/items_alone.npy (its items carry "
                                   f"their titles); rebuild it with `graft build CORPUS --out {self.path}`")
        return self._read("embeddings/items_alone.npy", _memmap)

    def build_setting(self, name: str, default: Any) -> Any:
        """A setting of the build that made this index (`BuildConfig` as recorded in the manifest),
        or `default` where none is recorded."""
        value = (self.manifest["stages"]["build"].get("config") or {}).get(name)
        return default if value is None else value

    @cached_property
    def paper_embeddings(self) -> np.ndarray | None:
        """Title + abstract embeddings of the papers (memory-mapped unit rows in node order,
        `embeddings/papers.npy`), or None for an index built before the build wrote them."""
        path = self.path / "embeddings" / "papers.npy"
        return self._read("embeddings/papers.npy", _memmap) if path.is_file() else None

    @cached_property
    def lexicon(self) -> Lexicon | None:
        """The corpus's terms and their IDF (`embeddings/lexicon.parquet`, `graft.lexical`), or None
        for an index built without lexical similarity."""
        if not (self.path / LEXICON_FILE).is_file():
            return None
        return self._read(LEXICON_FILE, Lexicon.read)

    @cached_property
    def lexical(self) -> dict[str, sp.csr_matrix]:
        """The lexical rows the build stored (`embeddings/lexical_{name}.npz`, `graft.lexical`): per
        facet (a paper's title and items of the facet) and "papers" (title + abstract), n x V each;
        {} for an index built without them. Memory-mapped from `cache/query/` where the build wrote
        them (`prepare_queries`), so a query gathers its candidates' rows without reading them whole."""
        lexicon = self.lexicon
        names = [name for name in LEXICAL_SETS if (self.path / lexical_file(name)).is_file()]
        if lexicon is None or not names:
            return {}
        n, width = self.n, lexicon.size

        def make() -> dict[str, np.ndarray]:
            out = {}
            for name in names:
                rel = lexical_file(name)
                m = self._read(rel, lambda _p, rel=rel: load_csr(self.path, rel, n, columns=width))
                out.update({f"{name}.{part}": getattr(m, part) for part in ("indptr", "indices", "data")})
            return out

        def check(found: dict[str, np.ndarray]) -> dict[str, sp.csr_matrix]:
            return {name: checked_csr(self.path, f"cache/query/lexical/{name}", (n, width), found[f"{name}.indptr"],
                                      found[f"{name}.indices"], found[f"{name}.data"], n, columns=width)
                    for name in sorted({key.rsplit(".", 1)[0] for key in found})}

        return self._derived("lexical", make, check)

    @cached_property
    def lexical_postings(self) -> sp.csr_matrix | None:
        """The papers' title + abstract lexical rows by term (the transpose of `lexical["papers"]`,
        terms x n): a text's cosines with every paper read from its own terms' postings only
        (`lexical_cosines`). Memory-mapped from `cache/query/` where the build wrote them; None for an
        index without those rows."""
        papers = self.lexical.get("papers")
        if papers is None:
            return None
        n, width = self.n, papers.shape[1]

        def make() -> dict[str, np.ndarray]:
            m = sp.csr_matrix(papers.T, dtype=np.float32)
            m.sort_indices()
            return {f"postings.{part}": getattr(m, part) for part in ("indptr", "indices", "data")}

        def check(found: dict[str, np.ndarray]) -> sp.csr_matrix:
            return checked_csr(self.path, "cache/query/postings/postings", (width, n), found["postings.indptr"],
                               found["postings.indices"], found["postings.data"], width, columns=n)

        return self._derived("postings", make, check)

    def lexical_cosines(self, query: sp.csr_matrix) -> np.ndarray:
        """(n,) float32: the cosine of a 1 x V lexical row (`Lexicon.vectors` of a title + abstract)
        with every paper's (`lexical["papers"]`), from the postings of the row's terms alone; zeros
        for an index without lexical rows of its papers."""
        postings = self.lexical_postings
        if postings is None:
            return np.zeros(self.n, dtype=np.float32)
        query = sp.csr_matrix(query, dtype=np.float32)
        if not query.nnz:
            return np.zeros(self.n, dtype=np.float32)
        return np.asarray(postings[query.indices].T @ query.data, dtype=np.float32).ravel()

    @cached_property
    def item_rows(self) -> np.ndarray:
        """Node index of the paper owning each `facets` row (aligned with `item_embeddings`), found
        when `facets` loads (`graft.artefacts.check_facets`)."""
        self.facets  # noqa: B018 - loading it sets item_rows
        return self.__dict__["item_rows"]

    def item_rows_of(self, paper_id: str, facet: str) -> np.ndarray:
        """`facets` rows (and item embedding rows) of one paper's items of one facet, in item order
        (`item_groups`: no per-paper table is made); none for a paper or facet the index lacks."""
        row = self.row_of.get(paper_id)
        if row is None or facet not in self.item_groups:
            return np.zeros(0, dtype=np.int64)
        indptr, rows = self.item_groups[facet]
        return np.asarray(rows[int(indptr[row]) : int(indptr[row + 1])], dtype=np.int64)

    @cached_property
    def paper_ids(self) -> list[str]:
        return self.paper_column("paper_id").to_list()

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {pid: i for i, pid in enumerate(self.paper_ids)}

    @property
    def n(self) -> int:
        return len(self.paper_ids)

    @cached_property
    def graphs(self) -> dict[str, sp.csr_matrix]:
        """The typed top-K graphs W_f per facet (`graph/{facet}.npz`). Memory-mapped from
        `cache/query/` where the build wrote them (`prepare_queries`): a paper's out-edges are read
        without decompressing the four files whole (4.6 s and 1.2 GB at 10^6 papers)."""
        return self._query_matrices("graphs", lambda: {f: self._read(f"graph/{f}.npz", self._csr) for f in FACETS})

    @cached_property
    def walk_graphs(self) -> dict[str, sp.csr_matrix]:
        """max(W_f, W_fᵀ) per facet: the graphs the teacher walks (`graft.teacher.symmetrise`), and
        graph-RRF's support. Memory-mapped from `cache/query/` where the build wrote them
        (`prepare_queries`), so a query reads the rows it walks, not the whole graphs; else made in
        memory from `graphs`."""
        return self._query_matrices("walk", lambda: symmetrise(self.graphs))

    @cached_property
    def citation_score(self) -> sp.csr_matrix:
        return self._read("graph/citation.npz", self._csr)

    @cached_property
    def text_coupling(self) -> sp.csr_matrix:
        """n x n: the text coupling that stood in for the citation score of the papers without
        citation links when the graphs were built (`graft.citations.text_coupling`); empty for
        an index built without it."""
        if not (self.path / "graph" / "text.npz").is_file():
            return sp.csr_matrix((self.n, self.n), dtype=np.float32)
        return self._read("graph/text.npz", self._csr)

    def citation_half(self, node: int) -> sp.csr_matrix:
        """1 x n: the score the citation half of a corpus paper's edge weights was built from (its
        citation score row, or its text coupling row when it has no citation links)."""
        row = sp.csr_matrix(self.citation_score[node], dtype=np.float32)
        return row.maximum(sp.csr_matrix(self.text_coupling[node], dtype=np.float32))

    @cached_property
    def citation_matrix(self) -> sp.csr_matrix:
        """A[i, j] = 1 if paper i cites paper j (made from citations.parquet; memory-mapped from
        `cache/query/` as `walk_graphs` are)."""
        return self._citation_matrices["cites"]

    @cached_property
    def cited_by(self) -> sp.csr_matrix:
        """Aᵀ by rows: row j holds the papers that cite paper j (`citation_matrix` transposed)."""
        return self._citation_matrices["cited_by"]

    @cached_property
    def _citation_matrices(self) -> dict[str, sp.csr_matrix]:
        def made() -> dict[str, sp.csr_matrix]:
            a = self._citations_from_table()
            return {"cites": a, "cited_by": a.T.tocsr()}

        return self._query_matrices("citations", made)

    def coupling_row_log(self, rescale: str) -> np.ndarray:
        """log(1 + largest bibliographic coupling count) of every paper (`graft.citations.coupling_row_log`:
        how a paper outside the corpus has its coupling rescaled), kept as `_derived` arrays.

        Raises:
            ConfigError: an unknown `rescale`.
        """
        from graft.citations import RESCALE_MODES, coupling_row_log

        if rescale not in RESCALE_MODES:
            return coupling_row_log(self.citation_matrix, rescale)  # raises, naming the modes
        n = self.n

        def check(found: dict[str, np.ndarray]) -> np.ndarray:
            v = found["row_log"]
            if v.shape != (n,) or v.dtype.kind != "f" or not np.isfinite(v).all() or (n and v.min() < 0):
                raise ArtefactError(f"index '{self.path}': cache/query/coupling-{rescale} is damaged")
            return v

        memo = self.__dict__.setdefault("_coupling_row_log", {})
        if rescale not in memo:
            memo[rescale] = self._derived(
                f"coupling-{rescale}", lambda: {"row_log": coupling_row_log(self.citation_matrix, rescale)}, check)
        return memo[rescale]

    def _citations_from_table(self) -> sp.csr_matrix:
        """A[i, j] = 1 if paper i cites paper j, from citations.parquet."""
        c = self.citations
        ids = self.paper_column("paper_id")
        node = pl.int_range(len(ids), eager=True, dtype=pl.Int64)
        rows, cols = (c[name].replace_strict(ids, node, default=None) for name in ("citing", "cited"))
        for name, found in (("citing", rows), ("cited", cols)):
            if found.null_count():
                raise IndexFormatError(f"index '{self.path}': citations.parquet names paper "
                                       f"{c[name].filter(found.is_null()).first()!r}, which papers.parquet lacks: the "
                                       f"files belong to different builds; rebuild with `graft build CORPUS --out "
                                       f"{self.path}`")
        return sp.csr_matrix((np.ones(len(rows), np.float32), (rows.to_numpy(), cols.to_numpy())),
                             shape=(self.n, self.n))

    @cached_property
    def citation_links(self) -> sp.csr_matrix:
        """Symmetric binary citation links: L[i, j] = 1 where i cites j or j cites i (memory-mapped
        from `cache/query/` as `walk_graphs` are)."""

        def made() -> dict[str, sp.csr_matrix]:
            a = self.citation_matrix
            return {"links": ((a + a.T) > 0).astype(np.float32).tocsr()}

        return self._query_matrices("links", made)["links"]

    def _query_matrices(self, kind: str, make: Callable[[], dict[str, sp.csr_matrix]]) -> dict[str, sp.csr_matrix]:
        """n x n matrices derived from this build's artefacts (`kind`: "graphs", "walk" or "links"), kept as
        `_derived` arrays and range-checked as graphs are (`graft.artefacts.checked_csr`)."""
        n = self.n

        def arrays() -> dict[str, np.ndarray]:
            return {f"{name}.{part}": getattr(m, part) for name, m in make().items()
                    for part in ("indptr", "indices", "data")}

        def matrices(found: dict[str, np.ndarray]) -> dict[str, sp.csr_matrix]:
            names = sorted({key.rsplit(".", 1)[0] for key in found})
            return {name: checked_csr(self.path, f"cache/query/{kind}/{name}", (n, n), found[f"{name}.indptr"],
                                      found[f"{name}.indices"], found[f"{name}.data"], n) for name in names}

        return self._derived(kind, arrays, matrices)

    def _derived(self, kind: str, make: Callable[[], dict[str, np.ndarray]],
                 check: Callable[[dict[str, np.ndarray]], Any]) -> Any:
        """`check` of arrays derived from this build's artefacts, for queries to read without loading
        those whole: memory-mapped from `cache/query/{kind}/` when they were written for this build
        (its `version`) and pass `check` (which raises ArtefactError otherwise); else `make()`, kept
        in memory, and under `prepare_queries` (the build's last step) written there atomically (the
        record of the build last) for later processes. A query never writes into the index."""
        from graft.store import read_json, write_json, write_npy

        folder = self.path / "cache" / "query" / kind
        record = folder / "build.json"
        try:
            found = read_json(record) if record.is_file() else None
        except (OSError, ValueError):
            found = None
        if isinstance(found, dict) and found.get("version") == list(self.version) and found.get("names"):
            try:
                out = {}
                for name in found["names"]:
                    rel = f"cache/query/{kind}/{name}.npy"
                    self._inside(rel)
                    out[name] = np.load(self.path / rel, mmap_mode="r")
                self.check_version()
                return check(out)
            except (OSError, ValueError, ArtefactError):
                pass  # a file missing, cut short or damaged: made again below
        made = make()
        if not self._preparing:
            return check(made)
        try:
            record.unlink(missing_ok=True)
            for name, array in made.items():
                write_npy(folder / f"{name}.npy", np.asarray(array))
            write_json(record, {"version": list(self.version), "names": sorted(made)})
        except OSError:
            pass  # a folder this process cannot write: the arrays stay in memory
        return check(made)

    def prepare_queries(self) -> int:
        """Write what a query reads besides the index's own files, as the build does after writing
        them: the graphs and walk graphs, citation links and matrices, item groups and coupling constants under
        `cache/query/` (memory-mapped by later processes), and the vectors' one whole scan. An index
        without them (built before they existed) answers the same, making them in memory. Returns
        the number of parts made or found."""
        rescale = str(self.build_setting("citation_rescale", "pair"))
        for name in ("graphs", "walk_graphs", "citation_links", "_citation_matrices", "citation_matrix", "cited_by",
                     "item_groups", "_coupling_row_log", "item_embeddings", "paper_embeddings",
                     "item_text_embeddings", "lexicon", "lexical", "lexical_postings"):
            self.__dict__.pop(name, None)  # read before: made again, and written this time
        self._preparing = True
        try:
            parts = [self.graphs, self.walk_graphs, self.citation_links, self.cited_by, self.item_groups,
                     self.coupling_row_log(rescale), self.item_embeddings, self.paper_embeddings, self.lexical,
                     self.lexical_postings]
            if (self.path / "embeddings" / "items_alone.npy").is_file():
                parts.append(self.item_text_embeddings)
        finally:
            self._preparing = False
        return len(parts)

    @cached_property
    def item_groups(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per facet, (indptr, rows): paper p's items of the facet are the `facets` rows (and item
        embedding rows) `rows[indptr[p]:indptr[p + 1]]`, in item order. Kept as `_derived` arrays, so
        a query outside the corpus gathers its candidates' items without reading `facets` whole."""
        n, m = self.n, self._expected_items

        def make() -> dict[str, np.ndarray]:
            table = self.facets.select("facet", "item_idx").with_row_index("row").with_columns(
                owner=pl.Series(self.item_rows))
            out = {}
            for facet in FACETS:
                mine = table.filter(pl.col("facet") == facet).sort(["owner", "item_idx", "row"])
                owner = mine["owner"].to_numpy()
                out[f"{facet}.indptr"] = np.searchsorted(owner, np.arange(n + 1)).astype(np.int64)
                out[f"{facet}.rows"] = mine["row"].to_numpy().astype(np.int64)
            return out

        def check(found: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
            groups = {}
            for facet in FACETS:
                indptr, rows = found[f"{facet}.indptr"], found[f"{facet}.rows"]
                if indptr.ndim != 1 or len(indptr) != n + 1 or indptr.dtype.kind not in "iu" \
                        or rows.ndim != 1 or rows.dtype.kind not in "iu" \
                        or (n and (indptr[0] != 0 or indptr[-1] != len(rows) or (np.diff(indptr) < 0).any())) \
                        or (len(rows) and (int(rows.min()) < 0 or (m is not None and int(rows.max()) >= m))):
                    raise ArtefactError(f"index '{self.path}': cache/query/items/{facet} is damaged")
                groups[facet] = (indptr, rows)
            return groups

        return self._derived("items", make, check)

    def channel_weight(self, weight: float) -> float:
        """The citation channel's weight W in effect on this index: `weight`, or 0 for an index
        without citation links (the channel would have nothing to add)."""
        return weight if self.citation_links.nnz else 0.0

    def row(self, paper_id: str) -> int:
        """Node index of a paper id.

        Raises:
            GraftError: the id is not in the index (the message shows a few similar ids).
        """
        if not isinstance(paper_id, str):
            raise GraftError(f"a paper id is a string, got {type(paper_id).__name__} {paper_id!r:.40}")
        if not paper_id.strip():
            raise GraftError(f"the paper id is empty; give an id of index '{self.path}' (such as "
                             f"{self.paper_ids[0] if self.n else 'none: the index is empty'})")
        try:
            return self.row_of[paper_id]
        except KeyError:
            close = [p for p in self.paper_ids if p.startswith(paper_id[:4])][:5]
            hint = f"; similar ids: {', '.join(close)}" if close else ""
            raise GraftError(f"paper '{paper_id}' is not in index '{self.path}' ({self.n} papers){hint}") from None

    def paper_facets(self, paper_id: str) -> dict[str, list[str]]:
        """The facet items of one corpus paper, in item order (`item_groups`; their text read from the
        row groups that hold them: `facet_texts`).

        Raises:
            GraftError: the id is not in the index (`row`).
        """
        node = self.row(paper_id)  # an unknown id is an error, not a paper without items
        mine = {f: np.asarray(rows[indptr[node]:indptr[node + 1]], dtype=np.int64)
                for f, (indptr, rows) in self.item_groups.items()}
        texts = iter(self.facet_texts(np.concatenate([mine[f] for f in FACETS])))
        return {f: [next(texts) for _ in mine[f]] for f in FACETS}

    def facet_texts(self, rows: np.ndarray) -> list[str]:
        """The `text` of `facets.parquet` rows `rows`, reading only the row groups that hold them (from
        `facets` where that is already read): a large corpus's items are not read whole for one
        paper's.

        Raises:
            IndexFormatError: the file cannot be read, or its `text` column holds no strings.
        """
        if "facets" in self.__dict__:
            return self.facets["text"].gather(np.asarray(rows, dtype=np.int64)).to_list()
        return self._cells("facets.parquet", rows, ("text",), text=("text",))["text"]

    def paper_record(self, node: int, columns: tuple[str, ...] = ("title", "year", "venue")) -> dict[str, Any]:
        """`columns` of the paper in row `node` (title, year and venue by default; None for a column
        the index lacks, all but `title` being optional), read from the row group that holds it (from
        `papers` where that is already read)."""
        if "papers" in self.__dict__:
            row = self.papers.row(node, named=True)
            return {k: row.get(k) for k in columns}
        cells = self._cells("papers.parquet", [node], columns, text=tuple(c for c in columns if c == "title"),
                            optional=tuple(c for c in columns if c != "title"))
        return {k: v[0] for k, v in cells.items()}

    def has_paper_column(self, name: str) -> bool:
        """Whether papers.parquet holds the column `name` (its schema read, not its rows)."""
        if "papers" in self.__dict__:
            return name in self.papers.columns
        import pyarrow.parquet as pq

        self._inside("papers.parquet")
        try:
            return name in pq.read_schema(self.path / "papers.parquet").names
        except Exception as exc:  # a damaged file: named as every reader names it
            raise IndexFormatError(f"index '{self.path}': papers.parquet cannot be read ({type(exc).__name__}: "
                                   f"{exc}); rebuild the index with `graft build CORPUS --out {self.path}`") from exc

    def _cells(self, rel: str, rows: Any, columns: tuple[str, ...], *, text: tuple[str, ...] = (),
               optional: tuple[str, ...] = ()) -> dict[str, list[Any]]:
        """Values of `columns` of the Parquet artefact `rel` at `rows`, reading only those columns of
        the row groups that hold them, in one pass; the columns in `text` must hold strings, those
        in `optional` may be absent (their values are then None).

        Raises:
            IndexFormatError: the file cannot be read, lacks a column not `optional`, a row past its
                end, or a `text` column of another type.
        """
        import pyarrow.parquet as pq
        import pyarrow.types as pat

        rows = np.asarray(rows, dtype=np.int64)
        self._inside(rel)
        out: dict[str, list[Any]] = {c: [None] * len(rows) for c in columns}
        try:
            meta = pq.ParquetFile(self.path / rel)
            names = set(meta.schema_arrow.names)
            for column in columns:
                if column not in names and column not in optional:
                    raise ArtefactError(f"index '{self.path}': {rel} is damaged: it lacks the column '{column}'; "
                                        f"rebuild the index with `graft build CORPUS --out {self.path}`")
            present = [c for c in columns if c in names]
            starts = np.cumsum([0] + [meta.metadata.row_group(g).num_rows for g in range(meta.num_row_groups)])
            if len(rows) and (rows.min() < 0 or rows.max() >= starts[-1]):
                raise IndexFormatError(f"index '{self.path}': {rel} has {starts[-1]} rows, not row {rows.max()}")
            group = np.searchsorted(starts, rows, side="right") - 1
            for g in np.unique(group).tolist():
                table = meta.read_row_group(g, columns=present)
                at = np.flatnonzero(group == g)
                for column in present:
                    values = table.column(column)
                    if column in text and not (pat.is_string(values.type) or pat.is_large_string(values.type)):
                        raise ArtefactError(f"index '{self.path}': {rel} is damaged: its column '{column}' holds "
                                            f"{values.type}, not text; rebuild the index with `graft build CORPUS "
                                            f"--out {self.path}`")
                    for i, value in zip(at.tolist(), values.take(rows[at] - starts[g]).to_pylist()):
                        out[column][i] = value
        except IndexFormatError:
            raise
        except Exception as exc:
            raise IndexFormatError(f"index '{self.path}': {rel} cannot be read ({type(exc).__name__}: {exc}); "
                                   f"rebuild the index with `graft build CORPUS --out {self.path}`") from exc
        self.check_version()
        return out

    # ---- retrieval -------------------------------------------------------------------------
    @cached_property
    def _teachers(self) -> dict[TeacherConfig, GraphTeacher]:
        return {}

    def teacher(self, config: TeacherConfig | None = None) -> GraphTeacher:
        """The graph teacher over this index, built once per config (its walk matrices are reused)."""
        config = config or TeacherConfig()
        if config not in self._teachers:
            links = self.citation_links if config.citation_weight > 0 else None
            graphs = self.walk_graphs if config.symmetric else self.graphs
            self._teachers[config] = GraphTeacher(graphs, config, links, ids=self.paper_ids, walked=config.symmetric)
        return self._teachers[config]

    def _hits(self, fused: list[tuple[int, float, dict[str, float]]], per_facet: dict) -> list[Hit]:
        """Hits of a teacher's fusion (`GraphTeacher.retrieve`), the citation channel's part as
        `Hit.citation`."""
        titles, years = self.paper_column("title"), self.paper_column("year")
        hits = []
        for rank, (node, score, terms) in enumerate(fused, start=1):
            evidence, citation = {}, None
            for facet in terms:
                c = per_facet[facet][node]
                if facet == CITATION:
                    citation = CitationEvidence(term=terms[facet], share=round(c.weight, 6),
                                                papers=[self.paper_ids[p] for p in c.linked], first=c.of,
                                                rank=c.rank)
                    continue
                via = self.paper_ids[c.via] if c.via is not None else None
                evidence[facet] = Evidence(weight=round(c.weight, 6), hops=c.hops, via=via, rank=c.rank)
            facets = {f: t for f, t in terms.items() if f != CITATION}
            hits.append(Hit(paper_id=self.paper_ids[node], title=titles[node], rank=rank, score=score,
                            facets=facets, evidence=evidence, year=years[node], citation=citation))
        return hits

    @cached_property
    def _generative(self) -> dict[str, Any]:
        return {}

    def generative(self, *, device: str = "cpu") -> Any:
        """The index's trained generative retriever (`graft.retriever.GenerativeRetriever`), loaded
        once per device.

        Raises:
            GraftError: no trained model in `INDEX/model`, or a device this machine lacks.
        """
        from graft.devices import resolve_device
        from graft.retriever import load_retriever

        device = resolve_device(device)
        if device not in self._generative:
            self._generative[device] = load_retriever(self, device=device)
        return self._generative[device]

    def searcher(self, config: Any = None, **settings: Any) -> Any:
        """A `graft.query.Searcher` of this index: `config` (a `graft.query.QueryConfig`) or the
        config made from `settings` (its fields, checked there); `on_note` and `encoder` go to the
        searcher.

        Raises:
            QueryError: a bad setting.
        """
        from graft.query import QueryConfig, Searcher

        extra = {key: settings.pop(key) for key in ("on_note", "encoder") if key in settings}
        if config is not None and settings:
            raise QueryError("give a QueryConfig or its settings, not both")
        return Searcher(self, config or QueryConfig(**settings), **extra)

    def query(self, paper: str | None = None, facets: dict[str, list[str]] | None = None, *,
              query_id: str = "query", neighbours: dict[str, float] | None = None,
              exclude: set[str] | None = None, **settings: Any) -> QueryResult:
        """Facet-attributed related papers of a corpus paper (`paper`) or, for the generative
        retriever, of a paper outside the corpus given by its facet items (`facets`); a paper outside
        the corpus given by its text: `searcher().text(title, abstract)`.

        Args:
            settings: `graft.query.QueryConfig` fields (retriever, fusion, k, beams, citation_weight,
                device, ...), checked there.
            query_id: with `facets`, the result's query id (TREC lines); a corpus paper's is its id.
            neighbours: with `facets`: the paper's nearest corpus papers by title + abstract (paper id
                -> cosine), the text channel; exclude: with `facets`: paper ids never returned.
        Raises:
            QueryError: a bad setting or combination of arguments.
            GraftError: an unknown paper, or no trained model for graft.
        """
        if (paper is None) == (facets is None):
            raise QueryError("give exactly one of paper= (a corpus paper id) or facets= (a paper outside the corpus)")
        if isinstance(exclude, str):
            raise QueryError(f"exclude= takes a set of paper ids, not one string ({exclude!r}): exclude={{{exclude!r}}}")
        if (neighbours or exclude) and paper is not None:
            raise QueryError("neighbours= (the text channel) and exclude= go with facets= (a paper outside the corpus)")
        searcher = self.searcher(**settings)
        if paper is not None:
            return searcher.paper(paper)
        return searcher.items(facets, query_id=query_id, neighbours=neighbours, exclude=exclude or ())

    def query_paper(self, paper_id: str, *, k: int = 20, config: TeacherConfig | None = None) -> QueryResult:
        """Related papers of a corpus paper by the graph teacher (facet-attributed)."""
        node = self.row(paper_id)
        teacher = self.teacher(config)
        fused, per_facet = teacher.retrieve(teacher.node_rows(node), exclude={node}, k=k)
        return QueryResult(paper_id, "teacher", "rrf", self._hits(fused, per_facet))

    def query_rows(
        self, rows: dict[str, sp.csr_matrix], *, query_id: str = "query", k: int = 20,
        config: TeacherConfig | None = None, exclude: set[int] | None = None,
    ) -> QueryResult:
        """Related papers of a paper outside the corpus, given its facet edge rows (1 x n each);
        `exclude` = corpus rows never returned (left out of every facet list before fusion)."""
        teacher = self.teacher(config)
        fused, per_facet = teacher.retrieve(rows, k=k, exclude=exclude)
        return QueryResult(query_id, "teacher", "rrf", self._hits(fused, per_facet))
