"""Citation signals: bibliographic coupling and co-citation, combined into one score in [0, 1].

With A the n x n citation matrix (A[i, j] = 1 if i cites j):
    coupling   = A Aᵀ  (i and j cite the same papers)
    co-citation = Aᵀ A (i and j are cited by the same papers)
Each is taken off the diagonal, log-compressed with log(1 + x), divided by its maximum so it lies in
[0, 1], and the two are averaged (DESIGN.md, "Citation signals").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


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


def _off_diagonal(m: sp.csr_matrix) -> sp.csr_matrix:
    m = sp.csr_matrix(m)
    m.setdiag(0)
    m.eliminate_zeros()
    return m


def _log_rescale(m: sp.csr_matrix) -> tuple[sp.csr_matrix, float]:
    """log(1 + x) then divide by the maximum; returns the matrix and the raw maximum count."""
    m = m.astype(np.float32)
    raw_max = float(m.data.max()) if m.nnz else 0.0
    if raw_max > 0:
        m.data = np.log1p(m.data) / np.log1p(raw_max)
    return m, raw_max


@dataclass
class CitationSignals:
    """The combined citation score and the constants needed to score a new paper the same way."""

    score: sp.csr_matrix  # n x n, symmetric, values in [0, 1], zero diagonal
    coupling_max: float  # largest raw coupling count (the rescaling constant)
    cocitation_max: float  # largest raw co-citation count
    n_coupling_pairs: int
    n_cocitation_pairs: int


def citation_signals(a: sp.csr_matrix) -> CitationSignals:
    """Bibliographic coupling and co-citation of citation matrix `a`, averaged into one score.

    Args:
        a: binary n x n CSR matrix, a[i, j] = 1 if paper i cites paper j.
    Returns:
        `CitationSignals` whose `score` = (rescale(log1p(A Aᵀ)) + rescale(log1p(Aᵀ A))) / 2.
    """
    a = sp.csr_matrix(a, dtype=np.float32)
    coupling = _off_diagonal(a @ a.T)
    cocitation = _off_diagonal((a.T @ a).tocsr())
    coupling_n, coupling_max = _log_rescale(coupling)
    cocitation_n, cocitation_max = _log_rescale(cocitation)
    score = ((coupling_n + cocitation_n) * 0.5).tocsr()
    score.sort_indices()
    return CitationSignals(
        score=score,
        coupling_max=coupling_max,
        cocitation_max=cocitation_max,
        n_coupling_pairs=int(coupling.nnz),
        n_cocitation_pairs=int(cocitation.nnz),
    )


def external_citation_row(
    a: sp.csr_matrix, references: np.ndarray, coupling_max: float
) -> sp.csr_matrix:
    """Citation score of a paper outside the corpus against every corpus paper (1 x n).

    A new paper is cited by no corpus paper, so only its bibliographic coupling with corpus papers
    (shared references) counts; co-citation is zero. The corpus' rescaling constant is reused so the
    score is on the same scale as the graph's.
    """
    n = a.shape[0]
    refs = np.unique(np.asarray(references, dtype=np.int64))
    if refs.size == 0 or coupling_max <= 0:
        return sp.csr_matrix((1, n), dtype=np.float32)
    r = sp.csr_matrix((np.ones(refs.size, dtype=np.float32), (np.zeros(refs.size, dtype=np.int64), refs)),
                      shape=(1, n))
    shared = (r @ sp.csr_matrix(a, dtype=np.float32).T).tocsr()
    shared.data = np.minimum(np.log1p(shared.data) / np.log1p(coupling_max), 1.0) * 0.5
    return shared
