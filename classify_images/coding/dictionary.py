"""Online dictionary learning for sparse coding (ScSPM Eq. 3), on every core with the same bits as on one.

The dictionary :math:`D \\in \\mathbb{R}^{K\\times d}` (atoms as rows) of ScSPM [1]_ (its Eq. 3)
minimises the expected lasso cost of a descriptor,

.. math::

    f(D) = \\frac1n \\sum_{i=1}^n \\ell(x_i, D), \\qquad
    \\ell(x, D) = \\min_{\\alpha \\in \\mathbb{R}^K} \\tfrac12 \\lVert x - D^\\top \\alpha \\rVert_2^2
    + \\lambda \\lVert \\alpha \\rVert_1 ,
    \\qquad \\text{s.t. } \\lVert d_k \\rVert_2 \\le 1 \\;\\; (k = 1..K),

Eq. (1)–(2) of Mairal et al. [2]_ with their constraint set :math:`\\mathcal C` (Eq. 3).  It is
learnt by their online algorithm [2]_ (Algorithm 1) with mini-batches (Section 3.4.3), as
``spams.trainDL`` does:

1. ``D_0``: ``K`` training descriptors of non-zero norm drawn at random, scaled to unit norm
   (:func:`~classify_images.coding.codebook.initial_atoms`); :math:`A_0 = 0`, :math:`B_0 = 0`.
2. For :math:`t = 0, 1, \\dots, T-1`: first, an atom nearly collinear with an earlier one
   (:math:`|d_i^\\top d_j| > 0.999999\\,\\lVert d_i\\rVert\\lVert d_j\\rVert`, :math:`i < j`) is replaced by a
   random training descriptor of non-zero norm, scaled to unit norm (``spams.trainDL``'s ``cleanDict``,
   its default ``clean=True``: two equal atoms would share their codes and stay equal).  Then the mini-batch is the next :math:`\\eta` descriptors of a
   seeded permutation of the sample (cyclically); each is coded on :math:`D_{t}` by the lasso
   (Algorithm 1, step 4; the project's LARS / feature-sign coder,
   :func:`~classify_images.coding.lars.lasso_lars_codes`), then the past is down-weighted
   and the batch added (Section 3.4.3, with :math:`\\theta` of Section 3.4.2, the weights of
   ``spams.trainDL``'s default, including its cap :math:`2n` on :math:`\\theta`):

   .. math::

       A_t = \\beta_t A_{t-1} + \\tfrac1\\eta \\textstyle\\sum_i \\alpha_i \\alpha_i^\\top, \\quad
       B_t = \\beta_t B_{t-1} + \\tfrac1\\eta \\textstyle\\sum_i \\alpha_i x_i^\\top, \\quad
       \\beta_t = \\frac{\\theta + 1 - \\eta}{\\theta + 1}, \\quad
       \\theta = \\min\\Bigl(2n, \\begin{cases} t\\eta & t < \\eta \\\\ \\eta^2 + t - \\eta & t \\ge \\eta
       \\end{cases}\\Bigr)

   (:math:`\\beta_0` multiplies zeros; :math:`\\beta_1 = 1/(\\eta + 1)` nearly forgets the codes
   made on the random :math:`D_0`; then :math:`\\beta_t \\approx (t-1)/t`, a running mean, for
   :math:`t < \\eta`; then the past decays by about :math:`1 - 1/\\eta` per mini-batch).
3. :math:`D_{t+1}`: one pass of block-coordinate descent (Algorithm 2) on the surrogate
   :math:`\\tfrac12 \\mathrm{Tr}(D^\\top A_t D) - \\mathrm{Tr}(D^\\top B_t)`, atom by atom,
   :math:`u_j = d_j + (b_j - D^\\top a_j)/A_{jj}`, :math:`d_j = u_j/\\max(\\lVert u_j\\rVert_2, 1)`
   (the projection on the unit ball of Algorithm 2), skipping atoms with :math:`A_{jj} \\le 10^{-6}`.
4. An atom still unused (:math:`A_{jj} \\le 10^{-6}`) once more than 10 000 descriptors were
   seen is replaced by a random training descriptor of non-zero norm, scaled to unit norm
   (Section 3.4.5, "purging the dictionary from unused atoms").

Determinism.  Each descriptor's code does not depend on the other rows of its batch
(:mod:`~classify_images.coding.lars`, "Determinism"), so the mini-batch is cut into one piece per
thread and the codes are stacked in descriptor order; :math:`\\sum \\alpha\\alpha^\\top` and
:math:`\\sum \\alpha x^\\top` are computed from the stacked codes by scipy's sparse products
(single-threaded, a fixed order); :math:`DD^\\top` by BLAS on one thread; the dictionary update is
sequential (:func:`~classify_images.coding._dictionary_kernels.update_atoms`).  The dictionary is
therefore the same bits for any ``n_threads``, on a given machine and BLAS (a different BLAS or
processor may round :math:`DD^\\top` differently).  The threads run the coder (about half of the
time); the rest is sequential.

Against ``spams.trainDL`` as the project calls it ([3]_; ``mode=2``, ``iter=T``, ``batchsize=η``,
``numThreads=1`` and its defaults ``modeD=0``, ``clean=True``, ``t0=1e-5``, ``rho=1``,
``lambda2=1e-9``, ``modeParam=0``, ``iter_updateD=1``), which learns the same objective.
*The same*: the constraint (``modeD=0``: the unit ball; SPAMS' ``normalize2`` scales an updated
atom only when its norm exceeds 1), one pass of Algorithm 2 per mini-batch skipping atoms with
:math:`A_{jj} \\le 10^{-6}`, the past weights :math:`\\beta_t` (``modeParam=0``), the mini-batches
taken cyclically from one permutation (the last one wraps around), the replacement of near-duplicate
atoms (step 2) and of unused atoms after 10 000 descriptors (step 4: SPAMS zeroes the atom in the
update and its ``cleanDict`` replaces the zero atom before the next mini-batch is coded, the same
dictionary at the same time).
*Deviations*: (a) the permutation and the replacements come from NumPy's seeded generator, not
from libc's ``srandom(0)``: from the same initial atoms the two learners see the descriptors in
another order and end in another local minimum of the same objective (on the 15-Scenes sample:
median correlation 0.64 between corresponding atoms, held-out cost equal within 0.005 %);
(b) :math:`A_0 = 0`, :math:`B_0 = 0`; SPAMS starts from :math:`t_0 I` and :math:`t_0 D_0`
(:math:`t_0 = 10^{-5}`), multiplied by the same :math:`\\beta_t` (:math:`\\beta_0 = 1 - \\eta`, so
about :math:`-10^{-5} I` after the second mini-batch, decaying as :math:`1/t`) and dropped after
10 000 descriptors; (c) SPAMS restarts its two epoch-parity accumulators when the iterations pass
over the sample more than once (Section 3.4.1), here the statistics keep accumulating with the
weights above (ScSPM's config makes 0.64 of a pass); (d) the codes come from the project's coder
(float32 correlations by default, the encoder's precision; codes rounded to float32: on the
15-Scenes sample the dictionary learnt with float64 correlations has corresponding atoms of
median correlation 1.00000, minimum 0.994), SPAMS' from its own LARS in float64 with
:math:`\\lambda_2 = 10^{-9}` on the diagonal of the Gram matrix and at most :math:`\\min(d, K)`
non-zeros; (e) SPAMS' duplicate search updates its Gram matrix after each replacement, here the
atoms marked in one scan are replaced together; (f) the threads change no bit (SPAMS' do: its
per-thread partial sums).  The held-out objective of both, and ScSPM's accuracy with each (and
its spread over dictionary seeds), are compared in docs/benchmarks/sparse-coding.md ("Our online
dictionary learner vs spams.trainDL").

References
----------
.. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching using sparse coding
   for image classification", CVPR 2009.
.. [2] J. Mairal, F. Bach, J. Ponce and G. Sapiro, "Online learning for matrix factorization and
   sparse coding", JMLR 11, 19–60, 2010.
.. [3] SPAMS (J. Mairal), ``dictLearn/dicts.h``: ``Trainer::train`` and ``cleanDict`` (read in the v2.1
   sources; the project calls spams-bin 2.6).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numpy as np
import scipy.sparse as sp
from numpy.typing import DTypeLike

from ._dictionary_kernels import near_duplicate_atoms, update_atoms
from ._threads import default_threads
from .lars import lasso_lars_codes, lasso_objective

__all__ = ["IMPLEMENTATION_VERSION", "learn_online_dictionary", "mean_lasso_cost"]

#: Version of this module's numerical output.  Bump it whenever a change alters the dictionaries
#: it learns: it is part of the sparse-coding encoder's stage-cache keys and of its feature sets'
#: config hash.
IMPLEMENTATION_VERSION = 2  # 2: near-duplicate atoms replaced (spams.trainDL's cleanDict)

#: An atom with A_jj <= _MIN_USAGE is not updated (Algorithm 2 divides by A_jj) and, once more
#: than _PURGE_AFTER descriptors were seen, is replaced by a training descriptor (SPAMS' values).
_MIN_USAGE = 1e-6
_PURGE_AFTER = 10_000

#: Atoms more correlated than this with an earlier atom are replaced (SPAMS' ``cleanDict``).
_MAX_CORRELATION = 0.999999

#: Second word of the generator's seed: the order and replacements are drawn from a stream other
#: than the one of the initial atoms (seeded by ``random_state`` alone).
_STREAM = 27


def _past_weight(t: int, batch_size: int, n_samples: int) -> float:
    """:math:`\\beta_t` of the module docstring (Sections 3.4.2–3.4.3 of [2]; SPAMS' ``scal``)."""
    theta = t * batch_size if t < batch_size else batch_size * batch_size + t - batch_size
    theta = min(theta, 2 * n_samples)
    return (theta + 1 - batch_size) / (theta + 1)


def _gram(D: np.ndarray, run) -> np.ndarray:
    """:math:`DD^\\top`, exactly symmetric, as three BLAS products of fixed blocks (two tasks of
    ``run``, a ``map``): the halves' Gram blocks (``syrk``) and the cross block (``gemm``), mirrored.
    The blocks do not depend on the thread count, so neither do the bits."""
    K = D.shape[0]
    h = K // 2
    G = np.empty((K, K))

    def task(which: int) -> None:
        if which == 0:
            G[:h, h:] = D[:h] @ D[h:].T
        else:
            G[:h, :h] = D[:h] @ D[:h].T
            G[h:, h:] = D[h:] @ D[h:].T

    list(run(task, (0, 1)))
    G[h:, :h] = G[:h, h:].T
    return G


def learn_online_dictionary(
    descriptors: np.ndarray,
    initial: np.ndarray,
    lambda1: float,
    *,
    n_iter: int,
    batch_size: int,
    random_state: int = 0,
    n_threads: int | None = None,
    correlation_dtype: DTypeLike = np.float32,
) -> np.ndarray:
    """Sparse-coding dictionary by online dictionary learning (Mairal et al. 2010, Algorithms 1–2).

    See the module docstring for the algorithm, its determinism and its deviations from
    ``spams.trainDL``.  The caller limits BLAS to one thread (it computes :math:`DD^\\top`).

    Parameters
    ----------
    descriptors : ndarray (n, d)
        Training descriptors as rows.
    initial : ndarray (K, d)
        Initial atoms as rows, unit norm (:func:`~classify_images.coding.codebook.initial_atoms`).
    lambda1 : float
        :math:`\\lambda`, weight of the ℓ1 penalty (0.15 in ScSPM).
    n_iter : int
        Mini-batches :math:`T`.
    batch_size : int
        Descriptors per mini-batch :math:`\\eta` (at most ``n``).
    random_state : int
        Seed of the permutation of the descriptors and of the replacements of unused atoms.
    n_threads : int, optional
        Threads that code each mini-batch (default: the cores available); changes no number.
    correlation_dtype : {numpy.float32, numpy.float64}
        Precision of the coder's correlations :math:`XD^\\top` (as
        :func:`~classify_images.coding.lars.lasso_lars_codes`).

    Returns
    -------
    dictionary : ndarray of float64, shape (K, d)
    """
    X = np.ascontiguousarray(descriptors, dtype=np.float64)
    D = np.array(initial, dtype=np.float64, order="C", copy=True)
    n, d = X.shape
    K = D.shape[0]
    if D.shape != (K, d):
        raise ValueError(f"initial atoms must have shape (K, {d}), got {D.shape}")
    if n_iter < 1 or batch_size < 1:
        raise ValueError(f"n_iter and batch_size must be >= 1, got {n_iter} and {batch_size}")
    eta = min(int(batch_size), n)
    lam = float(lambda1)
    # a stream of its own (not initial_atoms' draw from the same seed)
    rng = np.random.default_rng((int(random_state), _STREAM))
    order = rng.permutation(n)
    replacements = np.flatnonzero(np.einsum("ij,ij->i", X, X) > 0)
    n_threads = default_threads() if n_threads is None else max(1, int(n_threads))
    pieces = np.array_split(np.arange(eta), min(n_threads, eta))
    A = np.zeros((K, K))
    B = np.zeros((K, d))
    with ThreadPoolExecutor(max_workers=n_threads) if n_threads > 1 else nullcontext() as pool:
        run = pool.map if pool is not None else map
        for t in range(int(n_iter)):
            batch = X[order[(t * eta + np.arange(eta)) % n]]
            G = _gram(D, run)
            duplicates = np.flatnonzero(near_duplicate_atoms(G, _MAX_CORRELATION)) if replacements.size else []
            if len(duplicates):
                _replace(D, duplicates, X, replacements, rng)
                G = _gram(D, run)

            def code(rows, batch=batch, G=G):
                return lasso_lars_codes(batch[rows], D, lam, gram=G, correlation_dtype=correlation_dtype)

            parts = list(run(code, pieces))
            U = (sp.vstack(parts, format="csr") if len(parts) > 1 else parts[0]).astype(np.float64)
            beta = _past_weight(t, eta, n)
            A *= beta
            outer = (U.T @ U).tocoo()  # a fixed-order sparse product
            outer.sum_duplicates()  # each (row, col) once, for the indexed +=
            A[outer.row, outer.col] += outer.data / eta
            B *= beta
            B += np.asarray(U.T @ batch) / eta
            update_atoms(D, A, B, _MIN_USAGE)
            if (t + 1) * eta > _PURGE_AFTER and replacements.size:
                _replace(D, np.flatnonzero(np.diagonal(A) <= _MIN_USAGE), X, replacements, rng)
    return D


def _replace(D: np.ndarray, atoms, X: np.ndarray, replacements: np.ndarray, rng: np.random.Generator) -> None:
    """Replace ``D``'s rows ``atoms`` (in order) by rows of ``X`` drawn from ``replacements``, scaled to unit norm."""
    for j in atoms:
        x = X[replacements[rng.integers(replacements.size)]]
        D[j] = x / np.linalg.norm(x)


def mean_lasso_cost(descriptors: np.ndarray, dictionary: np.ndarray, lambda1: float) -> float:
    """:math:`f(D)`: the mean lasso cost :math:`\\ell(x, D)` of the descriptors (float64 codes).

    The objective the dictionary learners minimise (module docstring), on descriptors they may not
    have seen: the codes are exact lasso solutions (:func:`~classify_images.coding.lars.lasso_lars_codes`
    with float64 correlations), the cost :func:`~classify_images.coding.lars.lasso_objective`.
    """
    codes = lasso_lars_codes(descriptors, dictionary, lambda1, correlation_dtype=np.float64)
    return float(np.mean(lasso_objective(descriptors, dictionary, codes, lambda1)))
