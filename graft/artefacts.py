"""Range checks of an index's arrays as they are loaded: an artefact is validated, never trusted.

scipy and numpy index with the numbers a file holds: a graph whose column index lies past n reads
and writes outside its arrays (a segmentation fault, not an exception), and a NaN embedding turns
every cosine it meets into NaN, which ranks as nothing. Each loader here checks what its array must
satisfy and raises `IndexFormatError` naming the file and the fault instead.

Every check is one vectorised pass (O(nnz) for a graph, O(rows x dim) for embeddings, read in
blocks so a memory-mapped file is never copied whole), once per load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.errors import IndexFormatError
from graft.facets import FACETS

#: Bytes of embeddings checked at a time: small enough to stay in the CPU's caches, large enough that
#: the per-block overhead does not show (measured: docs/results/artefact_checks.md).
BLOCK_BYTES = 4 * 2**20

#: A float is NaN or infinite exactly when all its exponent bits are set: the mask of those bits per
#: float type, and the unsigned integer type of the same width to read the bits as.
_EXPONENT = {2: (np.uint16, 0x7C00), 4: (np.uint32, 0x7F800000), 8: (np.uint64, 0x7FF0000000000000)}


class ArtefactError(IndexFormatError):
    """An index artefact holds values its readers cannot use (out of range, not finite, wrong type)."""


def _fault(index: Path, rel: str, what: str) -> ArtefactError:
    return ArtefactError(f"index '{index}': {rel} is damaged: {what}; rebuild the index with "
                         f"`graft build CORPUS --out {index}`")


def _integers(index: Path, rel: str, name: str, array: np.ndarray) -> None:
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise _fault(index, rel, f"its {name} are {array.dtype} of shape {array.shape}, not a row of integers")
    return array


def load_csr(index: Path, rel: str, n: int | None = None, columns: int | None = None) -> sp.csr_matrix:
    """The CSR matrix `sp.save_npz` wrote at `index / rel`, after checking what scipy would trust: the
    format, a shape of (n, n), `indptr` starting at 0, never decreasing and ending at nnz, column
    indices inside [0, n), and weights finite and not negative (every graph GRAFT writes holds
    weights in [0, 1]).

    Args:
        index: the index folder; rel: the `.npz` file inside it; n: the papers of the index (None:
            the shape is only checked for being square).
        columns: the matrix is n x `columns` (a paper's lexical rows, `graft.lexical`), not square.
    Raises:
        ArtefactError: naming the file and the first fault found.
    """
    try:
        with np.load(index / rel, allow_pickle=False) as npz:
            missing = [k for k in ("format", "shape", "indptr", "indices", "data") if k not in npz.files]
            if missing:
                raise _fault(index, rel, f"it lacks {', '.join(missing)} (not a sparse matrix file)")
            fmt, shape, indptr, indices, data = (npz[k] for k in ("format", "shape", "indptr", "indices", "data"))
    except ArtefactError:
        raise
    except Exception as exc:  # a truncated zip, a bad header, an object array: numpy raises many types
        raise _fault(index, rel, f"it cannot be read ({type(exc).__name__}: {exc})") from exc
    fmt_text = fmt.item() if fmt.size == 1 else fmt.tolist()
    if isinstance(fmt_text, bytes):
        fmt_text = fmt_text.decode("ascii", "replace")
    if fmt_text != "csr":
        raise _fault(index, rel, f"its format is {fmt_text!r:.20}, not 'csr'")
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise _fault(index, rel, f"its shape {shape.tolist()!r:.40} is not two integers")
    return checked_csr(index, rel, (int(shape[0]), int(shape[1])), indptr, indices, data, n, columns=columns)


def checked_csr(index: Path, rel: str, shape: tuple[int, int], indptr: np.ndarray, indices: np.ndarray,
                data: np.ndarray, n: int | None = None, *, columns: int | None = None) -> sp.csr_matrix:
    """A CSR matrix of these arrays (memory-mapped ones stay mapped: nothing is copied), after the
    checks `load_csr` describes; the O(nnz) ones read `BLOCK_BYTES` at a time.

    Raises:
        ArtefactError: naming the file and the first fault found.
    """
    rows, cols = shape
    if columns is not None:
        if rows < 0 or cols != columns or (n is not None and rows != n):
            raise _fault(index, rel, f"its shape is ({rows}, {cols}), not ({'n' if n is None else n}, {columns})")
    elif rows != cols or rows < 0 or (n is not None and rows != n):
        want = f"({n}, {n})" if n is not None else "square"
        raise _fault(index, rel, f"its shape is ({rows}, {cols}), not {want}")
    _integers(index, rel, "row pointers", indptr)
    _integers(index, rel, "column indices", indices)
    if data.ndim != 1 or data.dtype.kind != "f":  # the build writes float32 weights in [0, 1]
        raise _fault(index, rel, f"its weights are {data.dtype} of shape {data.shape}, not a row of floats")
    nnz = len(indices)
    if len(indptr) != rows + 1:
        raise _fault(index, rel, f"it has {len(indptr)} row pointers for {rows} rows (needs {rows + 1})")
    if len(data) != nnz:
        raise _fault(index, rel, f"it has {len(data)} weights for {nnz} column indices")
    if rows and (indptr[0] != 0 or indptr[-1] != nnz):
        raise _fault(index, rel, f"its row pointers run from {indptr[0]} to {indptr[-1]}, not from 0 to {nnz}")
    if rows and bool((np.diff(indptr.astype(np.int64)) < 0).any()):
        raise _fault(index, rel, "its row pointers decrease (a row would have a negative length)")
    step = max(1, BLOCK_BYTES // 4)
    for start in range(0, nnz, step):
        cut, w = indices[start:start + step], data[start:start + step]
        low, high = int(cut.min()), int(cut.max())
        if low < 0 or high >= cols:
            bad = low if low < 0 else high
            raise _fault(index, rel, f"it holds column index {bad}, outside [0, {cols}) (the index's papers)")
        finite = np.isfinite(w)
        if not finite.all():
            raise _fault(index, rel, f"{int((~finite).sum())} of its {nnz} weights are not finite (NaN or inf)")
        if w.min() < 0:
            raise _fault(index, rel, f"it holds weight {float(w.min())}, below 0 (weights lie in [0, 1])")
    index_dtype = np.int32 if max(nnz, cols) < np.iinfo(np.int32).max else np.int64
    return sp.csr_matrix((data.astype(np.float32, copy=False), indices.astype(index_dtype, copy=False),
                          indptr.astype(index_dtype, copy=False)), shape=(rows, cols))


def check_vectors(array: np.ndarray, index: Path, rel: str, dim: int | None, *, scan: bool = True) -> np.ndarray:
    """`array` (an embedding matrix as loaded, often memory-mapped) after checking it is 2-D, of a
    float type, with `dim` columns where that is known, and (with `scan`) finite everywhere; read
    `BLOCK_BYTES` at a time, so a memory-mapped file is checked without being copied. `scan` False:
    a file already scanned whole (`graft.Index` records which), its header checked only.

    Raises:
        ArtefactError: naming the file and the fault.
    """
    if array.ndim != 2 or array.dtype.kind != "f":
        raise _fault(index, rel, f"it holds {array.dtype} of shape {array.shape}, not a matrix of floats")
    if dim is not None and array.shape[1] != dim:
        raise _fault(index, rel, f"its vectors have {array.shape[1]} dimensions, the index's encoder {dim}")
    if array.dtype.itemsize not in _EXPONENT:
        raise _fault(index, rel, f"it holds {array.dtype}, not float16, float32 or float64")
    if not scan:
        return array
    bits, mask = _EXPONENT[array.dtype.itemsize]
    rows = max(1, BLOCK_BYTES // max(1, array.shape[1] * array.dtype.itemsize))
    for start in range(0, array.shape[0], rows):
        block = array[start:start + rows]
        # integer work on the exponent bits: several times faster than np.isfinite on float16
        if block.size and int(np.bitwise_and(block.view(bits), bits(mask)).max()) == mask:
            bad = start + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
            raise _fault(index, rel, f"row {bad} is not finite (NaN or inf)")
    return array


def check_papers(papers: pl.DataFrame, index: Path, rel: str, columns: tuple[str, ...] | None = None) -> pl.DataFrame:
    """papers.parquet: a unique, non-empty string `paper_id` per row, a string `title` and `abstract`
    and an integer (or empty) `year`, the columns every reader takes; `columns`: only these (a table
    read with some of its columns, `graft.Index.paper_column`).

    Raises:
        ArtefactError: naming the file and the fault.
    """
    wanted = {"paper_id": _STRING, "title": _STRING, "abstract": _STRING, "year": _INTEGER}
    _columns(papers, index, rel, {k: v for k, v in wanted.items() if columns is None or k in columns})
    if columns is not None and "paper_id" not in columns:
        return papers
    ids = papers["paper_id"]
    if ids.null_count() or (ids.str.len_chars() == 0).any():
        raise _fault(index, rel, "a paper has no id")
    if ids.n_unique() != papers.height:
        dup = ids.filter(ids.is_duplicated()).first()
        raise _fault(index, rel, f"paper id {dup!r:.60} names two rows")
    return papers


def check_facets(facets: pl.DataFrame, paper_ids: pl.Series, index: Path, rel: str) -> np.ndarray:
    """facets.parquet: every item names a paper of papers.parquet and one of the facets.

    Returns:
        the node (papers.parquet row) of each item's paper, found in the same pass (one hash lookup
        per item, in polars).
    Raises:
        ArtefactError: naming the file and the fault.
    """
    _columns(facets, index, rel, {"paper_id": _STRING, "facet": _STRING, "text": _STRING, "item_idx": _INTEGER})
    rows = facets["paper_id"].replace_strict(paper_ids, pl.int_range(len(paper_ids), eager=True, dtype=pl.Int64),
                                             default=None)
    if rows.null_count():
        unknown = facets["paper_id"].filter(rows.is_null()).first()
        raise _fault(index, rel, f"an item names paper {unknown!r:.60}, which papers.parquet lacks")
    odd = facets["facet"].filter(~facets["facet"].is_in(list(FACETS)) | facets["facet"].is_null())
    if len(odd):
        raise _fault(index, rel, f"an item's facet is {odd.first()!r:.40} (allowed: {', '.join(FACETS)})")
    return rows.to_numpy().astype(np.int64, copy=False)


def check_citations(citations: pl.DataFrame, paper_ids: pl.Series, index: Path, rel: str) -> pl.DataFrame:
    """citations.parquet: `citing` and `cited` name papers of papers.parquet.

    Raises:
        ArtefactError: naming the file and the fault.
    """
    _columns(citations, index, rel, {"citing": _STRING, "cited": _STRING})
    for name in ("citing", "cited"):
        unknown = citations[name].filter(~citations[name].is_in(paper_ids.implode()) | citations[name].is_null())
        if len(unknown):
            raise _fault(index, rel, f"a link names paper {unknown.first()!r:.60}, which papers.parquet lacks")
    return citations


def check_docids(docids: pl.DataFrame, items: pl.DataFrame, paper_ids: pl.Series, index: Path,
                 folder: str = "docids") -> None:
    """A trained model's DocID tables (`graft.docids.DocidTable`): `docids.parquet` numbers each
    facet's DocIDs 0..m-1 (a DocID's row is found by its number) and maps them to papers of the
    index; `items.parquet` names papers of the index and DocIDs that exist.

    Raises:
        ArtefactError: naming the file and the fault.
    """
    rel, items_rel = f"{folder}/docids.parquet", f"{folder}/items.parquet"
    _columns(docids, index, rel, {"facet": _STRING, "docid_id": _INTEGER, "paper_ids": _STRING_LIST})
    _columns(items, index, items_rel, {"paper_id": _STRING, "facet": _STRING, "docid_id": _INTEGER})
    odd = docids["facet"].filter(~docids["facet"].is_in(list(FACETS)) | docids["facet"].is_null())
    if len(odd):
        raise _fault(index, rel, f"a DocID's facet is {odd.first()!r:.40} (allowed: {', '.join(FACETS)})")
    numbering = docids.group_by("facet").agg(pl.len().alias("m"), pl.col("docid_id").min().alias("low"),
                                             pl.col("docid_id").max().alias("high"),
                                             pl.col("docid_id").n_unique().alias("distinct"),
                                             pl.col("docid_id").null_count().alias("empty"))
    broken = numbering.filter((pl.col("low") != 0) | (pl.col("high") != pl.col("m") - 1)
                              | (pl.col("distinct") != pl.col("m")) | (pl.col("empty") > 0))
    if broken.height:
        row = broken.row(0, named=True)
        raise _fault(index, rel, f"the {row['facet']} DocIDs are numbered {row['low']}..{row['high']} "
                                 f"({row['distinct']} distinct), not 0..{row['m'] - 1}")
    named = docids["paper_ids"].explode()
    unknown = named.filter(~named.is_in(paper_ids.implode()) | named.is_null())
    if len(unknown):
        raise _fault(index, rel, f"a DocID names paper {unknown.first()!r:.60}, which papers.parquet lacks")
    unknown = items["paper_id"].filter(~items["paper_id"].is_in(paper_ids.implode()) | items["paper_id"].is_null())
    if len(unknown):
        raise _fault(index, items_rel, f"an item names paper {unknown.first()!r:.60}, which papers.parquet lacks")
    sizes = dict(zip(numbering["facet"].to_list(), numbering["m"].to_list()))
    bound = items["facet"].replace_strict(sizes, default=0, return_dtype=pl.Int64)
    past = items.filter(pl.col("docid_id").is_not_null() & ((pl.col("docid_id") < 0) | (pl.col("docid_id") >= bound)))
    if past.height:
        row = past.row(0, named=True)
        raise _fault(index, items_rel, f"an item of paper {row['paper_id']!r:.60} names {row['facet']} DocID "
                                       f"{row['docid_id']}, which docids.parquet lacks")


_STRING = ("text", lambda dtype: dtype == pl.String)
_INTEGER = ("integers", lambda dtype: dtype.is_integer() or dtype == pl.Null)
_STRING_LIST = ("lists of text", lambda dtype: dtype == pl.List(pl.String))


def _columns(frame: pl.DataFrame, index: Path, rel: str, wanted: dict[str, tuple[str, Callable[[Any], bool]]]) -> None:
    for name, (kind, fits) in wanted.items():
        if name not in frame.columns:
            raise _fault(index, rel, f"it lacks the column '{name}'")
        if not fits(frame[name].dtype):
            raise _fault(index, rel, f"its column '{name}' holds {frame[name].dtype}, not {kind}")
