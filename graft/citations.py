"""Citation signals: bibliographic coupling and co-citation, combined into one score in [0, 1].

With A the n x n citation matrix (A[i, j] = 1 if i cites j):
    coupling   = A Aᵀ  (i and j cite the same papers)
    co-citation = Aᵀ A (i and j are cited by the same papers)
Each is taken off the diagonal, log-compressed with log(1 + x), rescaled to [0, 1], and the two
are averaged (DESIGN.md, "Citation signals").

Rescaling is per pair of papers: log(1 + x_ij) / sqrt(log(1 + max_i) * log(1 + max_j)), with max_i
the largest count in row i. It is symmetric, at most 1, and 1 for a paper's strongest coupled
partner when the two agree. Dividing by the corpus-wide maximum instead leaves the typical pair near
0.07 (cs768: one outlier pair shares 154 references), so with beta = 0.25 the citation term would add
~0.02 to edge weights of ~0.4 and barely move the graph; per-pair rescaling raised the graph
teacher's in-corpus Recall@20 on cs768 from 0.163 to 0.242 (300 queries, same facets and alpha/beta).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from graft.errors import ConfigError
from graft.lexical import blend


def citation_matrix(citing: np.ndarray, cited: np.ndarray, n: int) -> sp.csr_matrix:
    """Binary n x n CSR matrix with A[citing[k], cited[k]] = 1 (duplicates and self-loops dropped)."""
    citing = np.asarray(citing, dtype=np.int64)
    cited = np.asarray(cited, dtype=np.int64)
    keep = citing != cited
    a = sp.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.float32), (citing[keep], cited[keep])), shape=(n, n)
    )
    a.sum_duplicates()
    a.data[:] = 1.0
    return a


#: How log counts are rescaled to [0, 1]: per pair of papers (default) or by the corpus maximum.
RESCALE_MODES = ("pair", "global")


def _row_max_log(m: sp.csr_matrix, rescale: str = "pair") -> np.ndarray:
    """log(1 + max count) of each row (0 for an empty row); with "global", the corpus maximum for
    every row, which turns the per-pair formula into division by the global maximum."""
    if rescale not in RESCALE_MODES:
        raise ConfigError(f"citation rescale '{rescale}' is unknown; allowed: {', '.join(RESCALE_MODES)}")
    m = sp.csr_matrix(m)
    out = np.zeros(m.shape[0], dtype=np.float64)
    if rescale == "global":
        return out + (np.log1p(m.data.max()) if m.nnz else 0.0)
    nonempty = np.diff(m.indptr) > 0
    if m.nnz:
        out[nonempty] = np.log1p(np.maximum.reduceat(m.data, m.indptr[:-1][nonempty]))
    return out


def _log_rescale(m: sp.csr_matrix, rescale: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """log(1 + x_ij) / sqrt(log(1 + max_i) log(1 + max_j)) for a symmetric count matrix."""
    m = sp.csr_matrix(m, dtype=np.float32)
    row_log = _row_max_log(m, rescale)
    coo = m.tocoo()
    data = np.log1p(coo.data) / np.sqrt(row_log[coo.row] * row_log[coo.col])
    out = sp.csr_matrix((data.astype(np.float32), (coo.row, coo.col)), shape=m.shape)
    return out, row_log


@dataclass
class CitationSignals:
    """The combined citation score and the constants needed to score a new paper the same way."""

    score: sp.csr_matrix  # n x n, symmetric, values in [0, 1], zero diagonal
    coupling_row_log: np.ndarray  # log(1 + largest coupling count) of each paper (rescaling constants)
    cocitation_row_log: np.ndarray  # the same for co-citation
    n_coupling_pairs: int
    n_cocitation_pairs: int


#: Coupled and co-cited partners kept a paper in the build's citation signals: the most counted of
#: each (ties: the lower row first), a pair kept where either paper keeps it; 0 keeps all. Heavily
#: cited references couple thousands of papers, so the counts grow faster than the corpus (2.8 * 10^9
#: coupled pairs on the synthetic 10^6 corpus, docs/scale.md); a paper's weakest partners change
#: neither its rescaling (its largest count is always kept) nor its strongest candidates
#: (docs/results/linked_cap_cs768-partners.md).
CITATION_PARTNERS = 200
#: Count entries a block of rows may produce before the next block starts (a bound from the cited
#: papers' in-degrees, `count_blocks`): 2^24, about 200 MiB of a block's sparse product.
COUNT_BLOCK_ENTRIES = 2**24


def count_blocks(a: sp.csr_matrix, budget: int = COUNT_BLOCK_ENTRIES) -> list[tuple[int, int]]:
    """Consecutive row ranges covering a's rows whose coupling and co-citation products each produce
    at most about `budget` entries (a row's bound: the summed degrees of the papers it shares; a row
    above the budget alone is a range of its own)."""
    a = sp.csr_matrix(a, dtype=np.float32)
    n = a.shape[0]
    if n == 0:
        return []
    indeg = np.asarray(a.sum(axis=0)).ravel()
    outdeg = np.asarray(a.sum(axis=1)).ravel()
    bound = np.maximum(a @ indeg, sp.csr_matrix(a.T) @ outdeg)  # coupling and co-citation partners at most
    ends = np.cumsum(np.minimum(bound, n))
    out, start = [], 0
    while start < n:
        base = ends[start - 1] if start else 0.0
        stop = max(start + 1, int(np.searchsorted(ends, base + budget, side="right")))
        out.append((start, min(stop, n)))
        start = min(stop, n)
    return out


def link_count_rows(a: sp.csr_matrix, a_t: sp.csr_matrix, start: int, stop: int,
                    partners: int = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Rows start..stop of the coupling counts A Aᵀ and the co-citation counts Aᵀ A (`a_t` = Aᵀ as
    CSR, float32), their diagonal removed: the work unit of the citation stage. With `partners` > 0
    a row keeps its partners among its `partners` most coupled and its `partners` most co-cited
    (`CITATION_PARTNERS`), both counts of each. Stacked in row order they are exactly the whole
    matrices (counts are whole numbers), less the dropped partners."""
    from graft.edges import strongest_per_row

    a = sp.csr_matrix(a, dtype=np.float32)
    coupling, cocitation = (_off_diagonal_rows(m, start) for m in (a[start:stop] @ a.T, a_t[start:stop] @ a))
    if partners > 0:
        kept = ((strongest_per_row(coupling, partners) + strongest_per_row(cocitation, partners)) > 0)
        coupling, cocitation = (sp.csr_matrix(m.multiply(kept), dtype=np.float32) for m in (coupling, cocitation))
    for m in (coupling, cocitation):
        m.eliminate_zeros()
        m.sort_indices()
    return coupling, cocitation


def _off_diagonal_rows(m: sp.spmatrix, start: int) -> sp.csr_matrix:
    """Rows start.. of a square matrix (as `m`) without the diagonal's entries, nor zeros."""
    coo = sp.coo_matrix(m)
    keep = (coo.col != coo.row + start) & (coo.data != 0)
    return sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=coo.shape, dtype=np.float32)


def link_counts(a: sp.csr_matrix, partners: int = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The coupling and co-citation counts of `a` (`link_count_rows` over `count_blocks`), one block
    of rows at a time so that no whole product is held where `partners` drops most of it."""
    a = sp.csr_matrix(a, dtype=np.float32)
    a_t = sp.csr_matrix(a.T)
    blocks = [link_count_rows(a, a_t, s, e, partners) for s, e in count_blocks(a)]
    n = a.shape[0]
    if not blocks:
        return sp.csr_matrix((n, n), dtype=np.float32), sp.csr_matrix((n, n), dtype=np.float32)
    return sp.vstack([b[0] for b in blocks]).tocsr(), sp.vstack([b[1] for b in blocks]).tocsr()


def citation_signals(a: sp.csr_matrix, rescale: str = "pair",
                     counts: tuple[sp.csr_matrix, sp.csr_matrix] | None = None,
                     partners: int = 0) -> CitationSignals:
    """Bibliographic coupling and co-citation of citation matrix `a`, averaged into one score.

    Args:
        a: binary n x n CSR matrix, a[i, j] = 1 if paper i cites paper j.
        rescale: "pair" (the module docstring's per-pair rescaling) or "global" (divide by the
            corpus maximum; kept for comparison).
        counts: the coupling and co-citation counts without their diagonal, where already computed
            (`link_count_rows` stacked, with the same `partners`); computed here when None.
        partners: each paper's `partners` most coupled and `partners` most co-cited papers kept
            (`CITATION_PARTNERS`); a pair stays where either of its papers keeps it, and scores as it
            would with every partner kept (both its counts are kept, and a row's largest count, its
            rescaling constant, is always among them). 0 keeps all.
    Returns:
        `CitationSignals` whose `score` = (rescale(log1p(A Aᵀ)) + rescale(log1p(Aᵀ A))) / 2, with
            the per-pair rescaling of the module docstring.
    """
    a = sp.csr_matrix(a, dtype=np.float32)
    if counts is None:
        if partners > 0:
            counts = link_counts(a, partners)
        else:
            counts = (_off_diagonal_rows(a @ a.T, 0), _off_diagonal_rows(a.T @ a, 0))
    coupling, cocitation = (sp.csr_matrix(m, dtype=np.float32) for m in counts)
    if partners > 0:  # symmetric again: a pair one of its papers kept
        coupling, cocitation = (m.maximum(m.T).tocsr() for m in (coupling, cocitation))
    coupling_n, coupling_row_log = _log_rescale(coupling, rescale)
    cocitation_n, cocitation_row_log = _log_rescale(cocitation, rescale)
    score = ((coupling_n + cocitation_n) * 0.5).tocsr()
    score.sort_indices()
    return CitationSignals(
        score=score,
        coupling_row_log=coupling_row_log,
        cocitation_row_log=cocitation_row_log,
        n_coupling_pairs=int(coupling.nnz),
        n_cocitation_pairs=int(cocitation.nnz),
    )


def citation_links(a: sp.csr_matrix, score: sp.csr_matrix, *, direct: bool = False,
                   per_row: int = 0) -> sp.csr_matrix:
    """Pattern of citation-linked pairs, the graph's candidates beyond facet similarity: coupled or
    co-cited papers (`score` > 0; with `per_row` > 0 only each paper's `per_row` highest-scored,
    `graft.edges.strongest_per_row`), and with `direct` the direct citations either way too."""
    from graft.edges import strongest_per_row

    linked = strongest_per_row(score, per_row)
    if direct:
        linked = linked + sp.csr_matrix(a, dtype=np.float32) + sp.csr_matrix(a, dtype=np.float32).T
    return (linked > 0).astype(np.float32).tocsr()


#: Papers nearest by title + abstract whose clipped cosine fills the citation half (beta) of the edge
#: rows of a paper with no citation evidence ("text coupling"): a paper outside the corpus with no
#: references, and in the build a corpus paper with no citation links; 0 leaves that half zero.
#: Chosen on cs768's dev papers posed as text-only queries (docs/results/text_coupling_cs768.md).
TEXT_NEIGHBOURS = 10


#: Cosines held at once while text coupling a build's link-less papers (64 MiB of float32).
TEXT_BLOCK_FLOATS = 2**24


def linkless_rows(a: sp.csr_matrix) -> np.ndarray:
    """Rows of the papers that cite no corpus paper and are cited by none (no citation evidence)."""
    a = sp.csr_matrix(a)
    degree = np.diff(a.indptr) + np.diff(sp.csc_matrix(a).indptr)
    return np.flatnonzero(degree == 0)


def text_coupling_row(paper_vectors: np.ndarray, query: np.ndarray, m: int, *,
                      exclude: int | None = None, lexical_sims: np.ndarray | None = None,
                      lexical_weight: float = 0.0) -> sp.csr_matrix:
    """A text-only paper's stand-in for its citation score row (1 x n): its similarity by title +
    abstract with its `m` nearest corpus papers, clipped to [0, 1], zero elsewhere. The similarity
    is the cosine of the title + abstract embeddings, blended at `lexical_weight` with the cosine of
    their lexical rows where those are given (`lexical_sims`, `graft.lexical`).

    A paper outside the corpus that lists no references has no bibliographic coupling with any
    corpus paper; the papers it reads most like are the ones it would most likely share references with.

    Args:
        paper_vectors: (n, d) unit rows, the corpus's title + abstract embeddings (`embeddings/papers.npy`).
        query: (d,) unit vector of the paper's own title + abstract, same encoder.
        m: neighbours kept (0 = an empty row).
        exclude: a row never taken as a neighbour (the paper itself, when it is in the corpus).
        lexical_sims: (n,) the cosines of the paper's lexical row of title + abstract with every corpus
            paper's (`graft.Index.lexical_cosines`, from its terms' postings), or None.
        lexical_weight: μ, the lexical cosine's share.
    """
    n = paper_vectors.shape[0]
    if m <= 0 or n == 0:
        return sp.csr_matrix((1, n), dtype=np.float32)
    sims = np.asarray(paper_vectors @ np.asarray(query, dtype=np.float32), dtype=np.float32)
    if lexical_weight > 0 and lexical_sims is not None:
        sims = blend(sims, np.asarray(lexical_sims, dtype=np.float32), lexical_weight)
    if exclude is not None:
        sims[exclude] = -np.inf
    order = np.lexsort((np.arange(n), -sims))[:m]
    order = order[np.isfinite(sims[order]) & (sims[order] > 0)]
    cols = np.sort(order)
    return sp.csr_matrix((np.clip(sims[cols], 0.0, 1.0), (np.zeros(len(cols), dtype=np.int64), cols)),
                         shape=(1, n), dtype=np.float32)


def text_coupling(paper_vectors: np.ndarray, rows: np.ndarray, m: int, *, lexical: sp.csr_matrix | None = None,
                  lexical_weight: float = 0.0) -> sp.csr_matrix:
    """n x n stand-in for the citation score of the papers `rows`: each row is that paper's
    `text_coupling_row` (its `m` nearest other papers by title + abstract, clipped similarity, with
    the `lexical` rows blended in at `lexical_weight`); every other row is empty.

    A paper without citation links has no coupling or co-citation with any paper, so the citation
    half (beta) of its edge weights would be zero; it is scored as a paper outside the corpus
    without references is.

    Args:
        paper_vectors: (n, d) unit rows (`embeddings/papers.npy`).
        rows: the papers to fill (`linkless_rows`); m: neighbours per paper (0 = an empty matrix).
    """
    from graft.similarity import best_columns

    vectors = np.asarray(paper_vectors, dtype=np.float32)
    n = vectors.shape[0]
    rows = np.asarray(rows, dtype=np.int64)
    if m <= 0 or n == 0 or len(rows) == 0:
        return sp.csr_matrix((n, n), dtype=np.float32)
    owners, cols, data = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
    block = max(1, TEXT_BLOCK_FLOATS // n)  # rows of cosines at a time: a few hundred at 10^5 papers
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        sims = vectors[part] @ vectors.T  # one product a block, not a product and a sort of n a paper
        if lexical_weight > 0 and lexical is not None:
            sims = blend(sims, (lexical[part] @ lexical.T).toarray(), lexical_weight)
        sims[np.arange(len(part)), part] = -np.inf  # never its own neighbour
        best = best_columns(sims, m)  # by (cosine descending, column), as text_coupling_row orders them
        vals = np.take_along_axis(sims, best, axis=1)
        keep = np.isfinite(vals) & (vals > 0)
        owners.append(np.repeat(part, keep.sum(axis=1)))
        cols.append(best[keep])
        data.append(np.clip(vals[keep], 0.0, 1.0).astype(np.float32))
    out = sp.csr_matrix((np.concatenate(data), (np.concatenate(owners), np.concatenate(cols))), shape=(n, n),
                        dtype=np.float32)
    out.sort_indices()
    return out


def coupling_row_log(a: sp.csr_matrix, rescale: str = "pair") -> np.ndarray:
    """log(1 + largest coupling count) of every corpus paper, as used by `citation_signals` (one
    block of rows of A Aᵀ at a time, each row's largest count kept)."""
    _row_max_log(sp.csr_matrix((0, 0)), rescale)  # an unknown mode raises, naming the modes
    a = sp.csr_matrix(a, dtype=np.float32)
    out = np.zeros(a.shape[0], dtype=np.float64)
    for start, stop in count_blocks(a):
        out[start:stop] = _row_max_log(_off_diagonal_rows(a[start:stop] @ a.T, start))
    if rescale == "global" and len(out):  # the corpus's largest count for every row
        out[:] = out.max()
    return out


def external_citation_row(a: sp.csr_matrix, references: np.ndarray, row_log: np.ndarray, *,
                          cited_by: sp.csr_matrix | None = None) -> sp.csr_matrix:
    """Citation score of a paper outside the corpus against every corpus paper (1 x n).

    A new paper is cited by no corpus paper, so only its bibliographic coupling with corpus papers
    (shared references) counts; its co-citation half is zero. Counts are rescaled per pair like
    corpus pairs, with `row_log` (from `coupling_row_log`) giving the corpus papers' constants.
    `cited_by`: `a` transposed as CSR (`graft.Index.cited_by`), whose rows of the references are
    all that is read; without it, `a` is transposed here.
    """
    n = a.shape[0]
    refs = np.unique(np.asarray(references, dtype=np.int64))
    if refs.size == 0:
        return sp.csr_matrix((1, n), dtype=np.float32)
    r = sp.csr_matrix((np.ones(refs.size, dtype=np.float32), (np.zeros(refs.size, dtype=np.int64), refs)),
                      shape=(1, n))
    by = cited_by if cited_by is not None else sp.csr_matrix(a, dtype=np.float32).T.tocsr()
    shared = (r @ by).tocsr()
    shared.eliminate_zeros()
    if shared.nnz == 0:
        return sp.csr_matrix((1, n), dtype=np.float32)
    own = np.log1p(shared.data.max())
    # the new paper may share more references with j than j's best corpus partner does
    denom = np.sqrt(own * np.maximum(row_log[shared.indices], np.log1p(shared.data)))
    shared.data = (0.5 * np.log1p(shared.data) / denom).astype(np.float32)
    return shared
