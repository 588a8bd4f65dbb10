"""Diagonal Gaussian mixture by EM, on several threads with the same bits as on one.

The Fisher-vector model's GMM (:func:`~classify_images.coding.codebook.learn_fisher_model`):
``K`` diagonal components, :math:`p(x) = \\sum_k \\pi_k\\,\\mathcal N(x; \\mu_k, \\mathrm{diag}\\,\\sigma_k^2)`,
started from k-means (Lloyd iterations from a k-means++ start) and refined by EM, the
algorithm and stopping rules of scikit-learn's :class:`~sklearn.mixture.GaussianMixture`
(``covariance_type="diag"``, ``init_params="kmeans"``, ``tol=1e-3``, ``reg_covar=1e-6``) [1]_.

**Deterministic parallelism.**  Every pass over the ``n`` descriptors (a Lloyd
iteration, an EM iteration) cuts them into fixed chunks of :data:`CHUNK_ROWS` rows — the
cut depends on ``n`` only, never on the number of threads — and computes each chunk's
*sufficient statistics* on one BLAS thread:

.. math::  S^0_k = \\sum_{i \\in c}\\gamma_{ik},\\quad S^1_k = \\sum_{i \\in c}\\gamma_{ik}x_i,\\quad
           S^2_k = \\sum_{i \\in c}\\gamma_{ik}x_i^2,\\quad L = \\sum_{i \\in c}\\log p(x_i)

(:math:`\\gamma` the posteriors, [2]_ Eq. 9.23; one-hot labels for k-means).  The threads
take chunks in any order, but the chunk results are summed in chunk order, so the
statistics, hence the model, are the same bits for 1, 2 or 64 threads, in this process or
on a cluster worker (same machine and BLAS).  NumPy releases the GIL in the BLAS products
and the element-wise loops, so the threads run in parallel.  The M-step ([2]_ Eqs. 9.24–9.27):

.. math::  N_k = S^0_k + 10\\epsilon,\\quad \\mu_k = S^1_k/N_k,\\quad
           \\sigma_k^2 = S^2_k/N_k - \\mu_k^2 + r,\\quad \\pi_k = N_k/n.

EM stops when the mean log-likelihood :math:`L/n` changes by less than ``tol``, or after
``max_iter`` iterations.  The log-densities come from one BLAS product of :math:`[x, x^2]`
(:func:`~classify_images.coding.fisher.gmm_posteriors`' formula), in float64.

References
----------
.. [1] F. Pedregosa et al., "Scikit-learn: Machine learning in Python", JMLR 12, 2011
   (``sklearn/mixture/_gaussian_mixture.py``, ``sklearn/cluster/_kmeans.py``).
.. [2] C. M. Bishop, *Pattern Recognition and Machine Learning*, Springer 2006, §9.1 and §9.2.2.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._threads import default_threads

__all__ = [
    "IMPLEMENTATION_VERSION",
    "CHUNK_ROWS",
    "chunk_statistics",
    "kmeans_lloyd",
    "fit_diagonal_gmm",
]

#: Version of this module's numerical output (the Fisher model's GMM).  Bump it whenever a
#: change alters the numbers it produces: it is part of the Fisher encoder's stage-cache keys
#: and of its feature sets' config hash.  1: replaces scikit-learn's GaussianMixture (the same
#: model to ~1e-12, not bit for bit).
IMPLEMENTATION_VERSION = 1

#: Rows per chunk of a pass: fixed, so that the sums do not depend on the thread count.
CHUNK_ROWS = 4096

#: Added to every variance (scikit-learn's ``reg_covar``).
REG_COVAR = 1e-6


def log_joint_terms(weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(W, c)`` with :math:`\\log\\pi_k + \\log\\mathcal N(x;\\mu_k,\\sigma_k^2) = [x, x^2]\\,W_{:k} + c_k`
    (float64): the rows of ``W`` are :math:`\\mu_k/\\sigma_k^2`, then :math:`-1/(2\\sigma_k^2)`, and
    :math:`c_k = \\log\\pi_k - \\tfrac12\\sum_d(\\mu_{kd}^2/\\sigma_{kd}^2 + \\log\\sigma_{kd}^2 + \\log 2\\pi)`."""
    precisions = 1.0 / variances
    constant = np.log(weights) - 0.5 * (
        np.sum(means * means * precisions, axis=1)
        + np.sum(np.log(variances), axis=1)
        + means.shape[1] * np.log(2.0 * np.pi)
    )
    return np.concatenate([(means * precisions).T, -0.5 * precisions.T]), constant


def moments(x: np.ndarray) -> np.ndarray:
    """``[x, x^2]`` side by side, (n, 2D)."""
    return np.concatenate([x, x * x], axis=1)


def _chunk_map(n_rows: int, per_chunk: Callable[[slice], object], n_threads: int) -> list:
    """``per_chunk`` of every :data:`CHUNK_ROWS`-row chunk (a slice of ``range(n_rows)``), in chunk
    order, computed on ``n_threads`` threads."""
    chunks = [slice(start, min(start + CHUNK_ROWS, n_rows)) for start in range(0, n_rows, CHUNK_ROWS)]
    if n_threads > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(max_workers=min(n_threads, len(chunks))) as pool:
            return list(pool.map(per_chunk, chunks))
    return [per_chunk(chunk) for chunk in chunks]


def chunk_statistics(n_rows: int, per_chunk: Callable[[slice], tuple], n_threads: int) -> tuple:
    """``per_chunk`` of every :data:`CHUNK_ROWS`-row chunk, summed in chunk order.

    ``per_chunk`` returns a tuple of arrays (or floats); the chunks run on ``n_threads``
    threads, the sums are taken in a fixed order: the result does not depend on ``n_threads``.
    The caller limits BLAS to one thread.
    """
    results = _chunk_map(n_rows, per_chunk, n_threads)
    totals = [np.array(value, dtype=np.float64, copy=True) for value in results[0]]
    for result in results[1:]:
        for total, value in zip(totals, result):
            total += value
    return tuple(totals)


def _labels(x: np.ndarray, centres: np.ndarray, centre_norms: np.ndarray) -> np.ndarray:
    """Nearest centre of every row: argmin of :math:`\\lVert c\\rVert^2 - 2x\\cdot c`."""
    scores = x @ centres.T
    scores *= -2.0
    scores += centre_norms
    return scores.argmin(axis=1)


def _one_hot_statistics(x: np.ndarray, labels: np.ndarray, n_clusters: int, squares: bool = True) -> tuple:
    """``(S0, S1, S2)`` of hard assignments (``(S0, S1)`` without ``squares``): per-cluster
    counts and sums, by ``bincount`` in row order (a one-hot product would cost a GEMM)."""
    counts = np.bincount(labels, minlength=n_clusters).astype(np.float64)
    columns = [x] if not squares else [x, x * x]
    sums = [
        np.stack([np.bincount(labels, weights=column, minlength=n_clusters) for column in part.T], axis=1)
        for part in columns
    ]
    return (counts, *sums)


def kmeans_lloyd(
    x: np.ndarray,
    n_clusters: int,
    *,
    random_state: int = 0,
    max_iter: int = 300,
    tol: float = 1e-4,
    n_threads: int = 1,
    progress: Callable[[str], None] | None = None,
) -> np.ndarray:
    """k-means labels (Lloyd from a k-means++ start), as scikit-learn's :class:`~sklearn.cluster.KMeans`
    with ``n_init=1`` computes them, with the chunked sums of :func:`chunk_statistics`.

    Stops when no label changes or when the centres move by at most ``tol`` times the mean
    variance of the columns (squared shift summed over centres); the labels returned are those
    of the final centres.  An empty cluster keeps its centre (scikit-learn moves it to a far point).
    ``progress``, if given, is called with one line per iteration (it changes no number).

    Returns
    -------
    labels : ndarray of int (n,)
    """
    from sklearn.cluster import kmeans_plusplus

    n = x.shape[0]
    centres, _ = kmeans_plusplus(x, n_clusters, random_state=np.random.RandomState(random_state))
    threshold = float(np.mean(np.var(x, axis=0))) * tol
    labels = None
    for iteration in range(1, max_iter + 1):
        centre_norms = np.einsum("kd,kd->k", centres, centres)
        new_labels = np.concatenate(_chunk_map(n, lambda rows: _labels(x[rows], centres, centre_norms), n_threads))
        if labels is not None and np.array_equal(labels, new_labels):
            return labels
        labels = new_labels
        counts, sums = chunk_statistics(
            n, lambda rows: _one_hot_statistics(x[rows], labels[rows], n_clusters, False), n_threads
        )
        moved = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1.0)[:, None], centres)
        shift = float(np.sum((moved - centres) ** 2))
        centres = moved
        if progress is not None:
            progress(f"k-means start: iteration {iteration} of at most {max_iter}, centres moved {shift:.3g}")
        if shift <= threshold:
            break
    centre_norms = np.einsum("kd,kd->k", centres, centres)
    return np.concatenate(_chunk_map(n, lambda rows: _labels(x[rows], centres, centre_norms), n_threads))


def _m_step(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counts = s0 + 10.0 * np.finfo(np.float64).eps
    means = s1 / counts[:, None]
    variances = s2 / counts[:, None] - means * means + REG_COVAR
    return counts / n, means, variances


def _em_statistics(x: np.ndarray, terms: np.ndarray, constant: np.ndarray) -> tuple:
    """``(S0, S1, S2, L)`` of one chunk: posteriors by log-sum-exp, then their weighted sums."""
    x_moments = moments(x)
    log_joint = x_moments @ terms
    log_joint += constant
    top = log_joint.max(axis=1, keepdims=True)
    log_joint -= top
    np.exp(log_joint, out=log_joint)
    total = log_joint.sum(axis=1, keepdims=True)
    log_joint /= total
    s12 = log_joint.T @ x_moments
    D = x.shape[1]
    return log_joint.sum(axis=0), s12[:, :D], s12[:, D:], float(np.sum(np.log(total) + top))


def fit_diagonal_gmm(
    x: np.ndarray,
    n_components: int,
    *,
    max_iter: int = 100,
    tol: float = 1e-3,
    random_state: int = 0,
    n_threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, np.ndarray], bool]:
    """Fit a diagonal GMM by EM from a k-means start (module docstring).

    Parameters
    ----------
    x : ndarray (n, D)
        Data (used as float64).
    n_components : int
        ``K``.
    max_iter : int
        EM iterations at most.
    tol : float
        Convergence threshold on the change of the mean log-likelihood.
    random_state : int
        Seed of the k-means++ start.
    n_threads : int, optional
        Threads for the chunks (default: the cores available); changes no number.  The
        caller limits BLAS to one thread (``threadpoolctl``).
    progress : callable, optional
        Called with one line per EM iteration.

    Returns
    -------
    gmm : dict
        ``weights`` (K,), ``means`` (K, D), ``variances`` (K, D), float64.
    converged : bool
        Whether EM stopped on ``tol`` before ``max_iter`` iterations.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    n = x.shape[0]
    n_threads = default_threads() if n_threads is None else max(1, int(n_threads))
    labels = kmeans_lloyd(x, n_components, random_state=random_state, n_threads=n_threads, progress=progress)
    s0, s1, s2 = chunk_statistics(n, lambda rows: _one_hot_statistics(x[rows], labels[rows], n_components), n_threads)
    weights, means, variances = _m_step(s0, s1, s2, n)
    lower_bound = -np.inf
    for iteration in range(1, max_iter + 1):
        terms, constant = log_joint_terms(weights, means, variances)
        s0, s1, s2, log_likelihood = chunk_statistics(
            n, lambda rows: _em_statistics(x[rows], terms, constant), n_threads
        )
        weights, means, variances = _m_step(s0, s1, s2, n)
        previous, lower_bound = lower_bound, float(log_likelihood) / n
        if progress is not None:
            progress(
                f"Iteration {iteration} (EM): mean log-likelihood {lower_bound:.6f}, change {lower_bound - previous:.3g}"
            )
        if abs(lower_bound - previous) < tol:
            return {"weights": weights, "means": means, "variances": variances}, True
    return {"weights": weights, "means": means, "variances": variances}, False
