"""Exact lasso sparse codes by feature-sign search and the LARS-lasso homotopy.

For every descriptor :math:`x \\in \\mathbb{R}^d` and a dictionary
:math:`D \\in \\mathbb{R}^{K\\times d}` (atoms as rows) this module solves

.. math::

    u^\\star(x) = \\arg\\min_{u\\in\\mathbb{R}^K}\\;
        \\tfrac12\\lVert x - D^\\top u\\rVert_2^2 + \\lambda\\lVert u\\rVert_1 ,

Eq. (3) of ScSPM [1]_ with the dictionary :math:`V = D` fixed (its Eq. (10)),
the problem that ``spams.lasso(..., mode=2)`` [3]_ solves.  The reference
solver is the LARS-lasso homotopy of Efron et al. [2]_ (Section 3.1, "lasso
modification"), written on the Gram matrix :math:`G = DD^\\top` (computed once per dictionary) and the
correlations :math:`c = Dx` (one compiled product per block of descriptors), so
the rest of the work per descriptor is independent of ``d`` and only touches
the active set.  By default each descriptor is solved by feature-sign search [4]_ on a
small pool of atoms grown by the full KKT check (below), which gives the
same codes faster.  The compiled kernels live in the private module
:mod:`classify_images.coding._lars_kernels`.

Optimality (KKT).  :math:`u` is optimal iff, with the residual correlations
:math:`r = D(x - D^\\top u) = c - Gu`,

.. math::

    r_k = \\lambda\\,\\mathrm{sign}(u_k) \\;\\; (u_k \\ne 0), \\qquad
    |r_k| \\le \\lambda \\;\\; (u_k = 0).

Homotopy.  Follow the solution path :math:`u(\\mu)` from
:math:`\\mu = \\max_k |c_k|` (where :math:`u = 0`) down to :math:`\\mu=\\lambda`.
On each piece the active set :math:`A` and signs :math:`s_A` are fixed, the
path is affine, :math:`u_A(\\mu) = G_{AA}^{-1}(c_A - \\mu s_A)`, so with
:math:`w = G_{AA}^{-1}s_A` and :math:`a = G_{:,A}w` a step of length
:math:`\\gamma` does :math:`u_A \\mathrel{+}= \\gamma w`,
:math:`r \\mathrel{-}= \\gamma a`, :math:`\\mu \\mathrel{-}= \\gamma`
(:math:`a_A = s_A`, so all active :math:`|r_k|` stay equal to :math:`\\mu`).
The step ends at the first event:

* an inactive :math:`k` reaches the bound, :math:`|r_k - \\gamma a_k| = \\mu-\\gamma`:
  :math:`\\gamma = (\\mu - r_k)/(1-a_k)` (enters with sign +1) or
  :math:`(\\mu + r_k)/(1+a_k)` (sign −1), positive denominators only;
* an active coefficient crosses zero, :math:`\\gamma = -u_k/w_k > 0`: it
  leaves the active set (the lasso modification);
* :math:`\\mu` reaches :math:`\\lambda`, :math:`\\gamma = \\mu - \\lambda`: stop.

:math:`G_{AA}` is held as an incrementally updated Cholesky factor (rebuilt
from scratch after a removal, which is rare).  At the end the coefficients are
recomputed in closed form, :math:`u_A = G_{AA}^{-1}(c_A - \\lambda s_A)`, so
no error accumulates along the path.

Screened solver: feature-sign search on a growing pool, checked by the
full KKT condition (the default).  The ScSPM authors solve Eq. (10) by
feature-sign search [4]_ (Algorithm 1 there), an active-set method: keep an
active set :math:`A` with signs :math:`\\theta_A`; on the orthant of these
signs the objective is the quadratic
:math:`\\tfrac12\\lVert x - D_A^\\top u_A\\rVert^2 + \\lambda\\theta_A^\\top u_A`,
minimised at :math:`\\hat u_A = G_{AA}^{-1}(c_A - \\lambda\\theta_A)`.

1. If :math:`u` is optimal on :math:`A` (:math:`r_A = \\lambda\\theta_A`), the
   inactive atom of largest :math:`|r_j| > \\lambda` enters with
   :math:`\\theta_j = \\mathrm{sign}(r_j)`; if there is none, stop.
2. Move from :math:`u` towards :math:`\\hat u_A` up to the first coefficient
   that reaches zero (that atom leaves :math:`A`), or to :math:`\\hat u_A`
   itself (then :math:`u` is optimal on :math:`A`: back to 1).  Each move
   stays in the closed orthant, where the objective is the convex quadratic
   minimised at its end, so the objective decreases strictly; an active set
   with its signs is never optimal twice, and the search ends.

When :math:`u` is optimal on :math:`A`, adding atom :math:`j` changes the
minimiser by :math:`(r_j - \\lambda\\theta_j)\\,G_{A'A'}^{-1}e_j`, whose
:math:`j`-th entry has the sign :math:`\\theta_j` (:math:`(G^{-1})_{jj} > 0`):
the new coefficient moves away from zero with its sign.  If rounding makes it
move the other way, :math:`|r_j|` exceeded :math:`\\lambda` by rounding only
and atom :math:`j` is passed over until :math:`u` moves.

The search runs on a pool :math:`S` of atoms only: first the atoms of
largest :math:`|c_k|` (about ``n_candidates``; none if
:math:`\\max_k|c_k|\\le\\lambda`, when :math:`u = 0` is optimal); it needs the
pool's residual correlations :math:`r_S = c_S - G_{S,A}u_A` and the Gram
entries :math:`G_{A,S}`, gathered when an atom enters.  Its result solves the
lasso on :math:`S`; it solves the full problem iff the KKT condition also holds
outside :math:`S`, :math:`|c_j - G_{j,A}u_A| \\le \\lambda` for
:math:`j \\notin S`, checked in one pass of :math:`\\lceil |A|/4\\rceil` Gram
rows over the ``K`` atoms with the margin :math:`\\lambda(1-10^{-5})`, so that
rounding errs towards another round.  The violators join :math:`S` and the
search continues from where it stopped (the current :math:`u` is optimal on
its active set), until the check passes.  The final coefficients are the
closed form :math:`\\hat u_A` on the final active set, computed by the same
float64 Cholesky factor as at the end of the homotopy.  Since the lasso
solution is unique for a dictionary in general position, both solvers give
the same codes up to rounding.  The homotopy on all atoms
(``n_candidates=None``) is kept as the reference, and is the fallback of a
descriptor whose search meets a numerically dependent atom (codes with
nearly ``d`` non-zeros) or runs past ``max_steps`` iterations.

Determinism.  The correlations are not a BLAS ``gemm``: an optimised
``gemm`` chooses its micro-kernel, hence the rounding of an entry, by the
row's place in the block and by the processor (on an AVX2 CPU about half
the rows of a block changed in the last bits when the rows were permuted).
Each entry of :math:`XD^\\top` is summed over the coordinates in a fixed
order instead (:func:`~classify_images.coding._lars_kernels.correlations`),
and the solver treats every descriptor on its own, so a descriptor's code is
the same, bit for bit, whatever batch it is coded in (other rows, their
order and number), for a given dictionary and Gram matrix.

Numerical safety.  Descriptors with :math:`\\max_k|c_k| \\le \\lambda` (zero or
low-contrast) get an empty code.  In the homotopy, an atom whose Cholesky pivot is
:math:`\\le 10^{-10} G_{kk}` (linearly dependent on the active atoms, e.g. a
duplicated atom, or an all-zero atom) is skipped until the next removal (the
feature-sign search hands such a descriptor to the homotopy); the
variable that has just left may not re-enter on the next step (it sits exactly
on the bound); ties are handled one variable per step (zero-length steps);
the number of steps is capped (``max_steps``).

References
----------
.. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching
   using sparse coding for image classification", CVPR 2009.
.. [2] B. Efron, T. Hastie, I. Johnstone and R. Tibshirani, "Least angle
   regression", Annals of Statistics 32(2), 407–499, 2004.
.. [3] J. Mairal, F. Bach, J. Ponce and G. Sapiro, "Online learning for matrix
   factorization and sparse coding", JMLR 11, 19–60, 2010 (the SPAMS
   toolbox, ``spams.lasso``).
.. [4] H. Lee, A. Battle, R. Raina and A. Y. Ng, "Efficient sparse coding
   algorithms", Advances in Neural Information Processing Systems 19
   (NIPS 2006), 801–808, 2007.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numpy.typing import DTypeLike

from ._lars_kernels import correlations, encode_block

__all__ = ["LassoDictionary", "lasso_lars_codes", "lasso_objective"]

# A change to the solutions computed here must bump ``encode.IMPLEMENTATION_VERSION``.

#: Rows of the correlation product ``X Dᵀ`` computed (and coded) per block.
_CHUNK = 4096

#: An entering atom whose Cholesky pivot is <= _PIVOT_RTOL * G_kk is skipped.
_PIVOT_RTOL = 1e-10

#: A code found on the pool of atoms is accepted if every other atom has
#: |residual correlation| <= λ (1 - _KKT_MARGIN); otherwise the violating atoms
#: join the pool and the feature-sign search continues.
_KKT_MARGIN = 1e-5


class LassoDictionary:
    """A dictionary with the products every lasso solve over it needs, computed once.

    The Gram matrix :math:`G = DD^\\top` (float64, for the Cholesky factors and the
    final coefficients), its float32 copy (for the KKT checks and the homotopy's
    directions) and the transposed atoms :math:`D^\\top` in the correlations' dtype.
    :func:`lasso_lars_codes` builds one per call when given a bare array; a caller that
    codes many batches over one dictionary (:class:`~classify_images.coding.encode.SparseCoder`,
    one call per image) keeps one and passes it instead, so that no call copies the
    ``K × K`` matrices again.  The codes are the same either way.

    Parameters
    ----------
    dictionary : ndarray, shape (K, d)
        Atoms as rows.
    gram : ndarray, shape (K, K), optional
        Precomputed :math:`DD^\\top`.
    """

    def __init__(self, dictionary: np.ndarray, *, gram: np.ndarray | None = None) -> None:
        D = np.asarray(dictionary, dtype=np.float64)
        if D.ndim != 2:
            raise ValueError(f"dictionary must be 2-D (K, d), got shape {D.shape}")
        K = D.shape[0]
        G = np.ascontiguousarray(D @ D.T if gram is None else gram, dtype=np.float64)
        if G.shape != (K, K):
            raise ValueError(f"gram must have shape ({K}, {K}), got {G.shape}")
        self.dictionary = D
        self.gram = G
        self.gram32 = G.astype(np.float32)
        self._atoms_by_column: dict[np.dtype, np.ndarray] = {}

    def atoms_by_column(self, dtype: DTypeLike) -> np.ndarray:
        """:math:`D^\\top` (d, K), C-contiguous, in ``dtype`` (kept per dtype)."""
        dtype = np.dtype(dtype)
        if dtype not in self._atoms_by_column:
            self._atoms_by_column[dtype] = np.ascontiguousarray(self.dictionary.T, dtype=dtype)
        return self._atoms_by_column[dtype]


def lasso_lars_codes(
    X: np.ndarray,
    dictionary: np.ndarray | LassoDictionary,
    lambda1: float,
    *,
    gram: np.ndarray | None = None,
    max_steps: int | None = None,
    correlation_dtype: DTypeLike = np.float32,
    n_candidates: int | None = 16,
) -> sp.csr_matrix:
    """Exact lasso codes of the rows of ``X`` by the LARS-lasso homotopy.

    For each row :math:`x` of ``X`` solves Eq. (3) of ScSPM [1]_ with the
    dictionary fixed,

    .. math::

        u = \\arg\\min_u \\tfrac12\\lVert x - D^\\top u\\rVert_2^2 + \\lambda\\lVert u\\rVert_1 ,

    the problem of ``spams.lasso(..., mode=2)`` [3]_ (Eq. (10) of ScSPM), by
    feature-sign search [4]_ on KKT-checked pools of atoms, or by the LARS of
    Efron et al. [2]_ with the lasso modification (a variable leaves the
    active set when its coefficient crosses zero), on the Gram matrix
    :math:`G = DD^\\top` and the correlations :math:`XD^\\top` (computed
    per 4096 rows, each entry summed in a fixed order).  The result satisfies the KKT conditions
    :math:`|D(x - D^\\top u)| \\le \\lambda`, with equality
    :math:`= \\lambda\\,\\mathrm{sign}(u_k)` on the support.  See the module
    docstring for the algorithm and its numerical safeguards.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Descriptors as rows (any float dtype).  Rows with
        :math:`\\max_k |(DX^\\top)_k| \\le \\lambda` (e.g. zero rows) get an
        empty code.
    dictionary : ndarray, shape (K, d), or LassoDictionary
        Atoms as rows (ScSPM's :math:`V`); unit norm is usual but not required.  A
        :class:`LassoDictionary` brings its Gram matrices along (``gram`` is then ignored).
    lambda1 : float
        :math:`\\lambda \\ge 0`, weight of the ℓ1 penalty (0.15 in ScSPM).
    gram : ndarray, shape (K, K), optional
        Precomputed :math:`DD^\\top` (float64), to share between calls.
    max_steps : int, optional
        Cap on the homotopy steps per descriptor, and on the feature-sign
        iterations per pool (default ``4 * min(K, d) + 16``).
    correlation_dtype : {numpy.float32, numpy.float64}, default float32
        Precision of the product :math:`XD^\\top` (the homotopy itself
        runs in float64, directions from a float32 copy of :math:`G`, final
        coefficients from the float64 Cholesky factor).  float32 makes the
        product faster and moves the codes slightly away from the float64
        solution, by much less than the uint8 quantisation of cached
        descriptors; see docs/benchmarks/sparse-coding.md, "Sparse coding (ScSPM Eq. 3):
        numba LARS-lasso vs spams.lasso" for both choices against
        ``spams.lasso``.

    n_candidates : int or None, default 16
        Screening: each descriptor is solved by feature-sign search [4]_ on a
        pool of about this many atoms of largest :math:`|c_k|`, grown by the
        atoms that violate the full problem's KKT condition
        :math:`|c_j - (Gu)_j| \\le \\lambda` until none does (the code then
        solves the full problem).  ``None`` follows the LARS-lasso homotopy
        on all atoms for every descriptor (the reference solver; also the
        fallback of the rare descriptor whose search fails, see the module
        docstring).  Both give the same codes up to rounding.

    Returns
    -------
    codes : scipy.sparse.csr_matrix of float32, shape (n, K)
        Sorted column indices; only non-zero coefficients are stored.

    References
    ----------
    .. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid
       matching using sparse coding for image classification", CVPR 2009.
    .. [2] B. Efron, T. Hastie, I. Johnstone and R. Tibshirani, "Least angle
       regression", Annals of Statistics 32(2), 407–499, 2004.
    .. [3] J. Mairal, F. Bach, J. Ponce and G. Sapiro, "Online learning for
       matrix factorization and sparse coding", JMLR 11, 19–60, 2010.
    .. [4] H. Lee, A. Battle, R. Raina and A. Y. Ng, "Efficient sparse coding
       algorithms", NIPS 19 (NIPS 2006), 801–808, 2007.
    """
    products = dictionary if isinstance(dictionary, LassoDictionary) else LassoDictionary(dictionary, gram=gram)
    K, d = products.dictionary.shape
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"X must be 2-D (n, {d}) to match the dictionary, got shape {X.shape}")
    lam = float(lambda1)
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lambda1 must be a finite number >= 0, got {lambda1!r}")
    G, G32 = products.gram, products.gram32
    cdtype = np.dtype(correlation_dtype)
    if cdtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"correlation_dtype must be float32 or float64, got {correlation_dtype!r}")
    DcT = products.atoms_by_column(cdtype)
    steps = int(max_steps) if max_steps is not None else 4 * min(K, d) + 16
    if n_candidates is not None and (not isinstance(n_candidates, (int, np.integer)) or n_candidates < 1):
        raise ValueError(f"n_candidates must be a positive integer or None, got {n_candidates!r}")
    m = K if n_candidates is None else min(int(n_candidates), K)
    n = X.shape[0]
    if n == 0:
        return sp.csr_matrix((0, K), dtype=np.float32)
    # the factor can hold at most rank(D) <= min(K, d) atoms (+ slack for rounding)
    parts_i, parts_d, parts_c = [], [], []
    for start in range(0, n, _CHUNK):
        block = np.ascontiguousarray(X[start : start + _CHUNK], dtype=cdtype)
        # not BLAS: a fixed summation order per entry, so a row's code is independent of its batch
        C = np.empty((block.shape[0], K), dtype=cdtype)  # float32 or float64; numba specialises
        correlations(block, DcT, C)
        idx, val, cnt, _, _ = encode_block(
            C, G, G32, lam, steps, _PIVOT_RTOL, min(K, d + 8), m, lam * (1.0 - _KKT_MARGIN)
        )
        parts_i.append(idx)
        parts_d.append(val)
        parts_c.append(cnt)
    return _stack_csr(parts_i, parts_d, parts_c, (n, K))


def _stack_csr(parts_indices, parts_data, parts_counts, shape: tuple[int, int]) -> sp.csr_matrix:
    """One CSR matrix from the per-block (indices, data, counts per row) of :func:`encode_block`.

    The row pointer is int32 when the number of stored values allows it.
    """
    counts = np.concatenate(parts_counts)
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate(parts_indices)
    data = np.concatenate(parts_data)
    if indptr[-1] <= np.iinfo(np.int32).max:
        indptr = indptr.astype(np.int32)
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def lasso_objective(
    X: np.ndarray, dictionary: np.ndarray, codes: np.ndarray | sp.spmatrix, lambda1: float
) -> np.ndarray:
    """Lasso objective of each code, to check a solver.

    .. math::

        f(u) = \\tfrac12\\lVert x - D^\\top u\\rVert_2^2 + \\lambda\\lVert u\\rVert_1 ,

    computed in float64 for every row ``x`` of ``X`` and its code ``u``.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Descriptors as rows.
    dictionary : ndarray, shape (K, d)
        Atoms as rows.
    codes : ndarray or scipy.sparse matrix, shape (n, K)
        One code per row of ``X`` (e.g. from :func:`lasso_lars_codes`).
    lambda1 : float
        Weight :math:`\\lambda` of the l1 penalty.

    Returns
    -------
    objective : ndarray of float64, shape (n,)
    """
    D = np.asarray(dictionary, dtype=np.float64)
    U = codes.toarray() if sp.issparse(codes) else np.asarray(codes)
    U = U.astype(np.float64)
    R = np.asarray(X, dtype=np.float64) - U @ D
    return 0.5 * np.einsum("ij,ij->i", R, R) + float(lambda1) * np.abs(U).sum(1)
