"""Codebooks learnt from a sample of training descriptors: the learners the encoders use
(:meth:`~classify_images.coding.encoders.Encoder.learn`).

The codebooks, as in the papers the package reproduces:

* **k-means** (vector quantisation, BoF / SPM; Lazebnik et al. 2006): ``K``
  centres minimising :math:`\\sum_i \\min_k \\lVert x_i - c_k \\rVert^2`
  (Lloyd iterations, k-means++ start; scikit-learn's :class:`~sklearn.cluster.KMeans`).
* **sparse-coding dictionary** (ScSPM; Yang et al. 2009, Eq. 3):
  :math:`\\min_{U,V} \\sum_i \\lVert x_i - V u_i \\rVert^2/2 + \\lambda \\lVert u_i \\rVert_1`
  s.t. :math:`\\lVert v_k \\rVert_2 \\le 1`, learnt by online dictionary learning (Mairal et
  al. 2010): our deterministic multi-threaded learner (the default) or SPAMS' ``spams.trainDL`` (the optional GPL extra)
  (:mod:`~classify_images.coding.dictionary`, ``codebook.dictionary_solver = "online"``).
* ``"llc"`` and ``"vlad"``: k-means centres as above, for LLC coding
  (:mod:`~classify_images.coding.llc`) and VLAD (:mod:`~classify_images.coding.vlad`).
* ``"fisher"``: a Fisher-vector model (:mod:`~classify_images.coding.fisher`), learnt
  by :func:`learn_fisher_model`: PCA to ``D`` dimensions (no whitening), then a
  diagonal-covariance GMM of ``K`` components fitted by EM from a k-means start
  (:func:`~classify_images.coding.gmm.fit_diagonal_gmm`: scikit-learn's
  :class:`~sklearn.mixture.GaussianMixture` algorithm, on every core with the same bits as
  on one), as a dict of arrays.

All are learnt only from descriptors of *training* images, drawn by a seeded
sample (:func:`sample_rows`), so the codebook never sees test data.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import warnings

import numpy as np

from .._log import step_progress
from ..errors import ClassifyImagesError

__all__ = [
    "IMPLEMENTATION_VERSION",
    "DEFAULT_PCA_DIMS",
    "Codebook",
    "codebook_size",
    "codebook_digest",
    "learn_kmeans_codebook",
    "learn_sparse_dictionary",
    "DICTIONARY_SOLVERS",
    "SPAMS_INSTALL_HINT",
    "MissingSolverError",
    "spams_missing",
    "initial_atoms",
    "learn_fisher_model",
    "sample_rows",
]

_log = logging.getLogger(__name__)

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 2

#: PCA dimensions of the descriptors for Fisher vectors when the config does not say.
DEFAULT_PCA_DIMS = 64

#: Norm below which SPAMS treats an initial atom as zero (and draws it from its own,
#: never reseeded, Gaussian generator): :func:`initial_atoms` never gives such an atom.
_MIN_ATOM_NORM = 1e-10

#: A learnt codebook: a (K, d) array of words, or the named arrays of a Fisher model.
Codebook = np.ndarray | dict[str, np.ndarray]


def codebook_size(codebook: Codebook) -> int:
    """Number of words ``K`` (GMM components for a Fisher model)."""
    if isinstance(codebook, dict):
        return int(codebook["weights"].shape[0])
    return int(codebook.shape[0])


def codebook_digest(codebook: Codebook) -> str:
    """SHA-1 of the codebook's bytes (of every named array, in name order, for a dict)."""
    if not isinstance(codebook, dict):
        return hashlib.sha1(np.ascontiguousarray(codebook).tobytes()).hexdigest()
    sha = hashlib.sha1()
    for name in sorted(codebook):
        array = np.ascontiguousarray(codebook[name])
        sha.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        sha.update(array.tobytes())
    return sha.hexdigest()


def sample_rows(n_rows: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of ``min(n_rows, n_samples)`` rows drawn without replacement."""
    if n_samples >= n_rows:
        return np.arange(n_rows)
    return np.sort(rng.choice(n_rows, size=n_samples, replace=False))


def _check_descriptors(descriptors: np.ndarray, n_words: int, what: str) -> np.ndarray:
    descriptors = np.asarray(descriptors, dtype=np.float32)
    if descriptors.ndim != 2 or descriptors.shape[0] == 0:
        raise ValueError(f"{what}: descriptors must be a non-empty 2-D array, got shape {descriptors.shape}")
    if n_words < 2:
        raise ValueError(f"{what}: the codebook needs at least 2 words, got {n_words}")
    if descriptors.shape[0] < n_words:
        raise ValueError(
            f"{what}: {descriptors.shape[0]} training descriptors cannot make {n_words} words; "
            "use more training images, a denser grid, or a smaller codebook"
        )
    return descriptors


def learn_kmeans_codebook(
    descriptors: np.ndarray,
    n_words: int,
    *,
    max_iter: int = 100,
    random_state: int = 0,
) -> np.ndarray:
    """k-means visual vocabulary.

    Parameters
    ----------
    descriptors : ndarray (n_samples, n_dims)
        Training descriptors (any real dtype; used as float32).
    n_words : int
        Number of centres ``K``.
    max_iter : int
        Lloyd iterations at most (one k-means++ start).
    random_state : int
        Seed of the k-means++ initialisation.

    Returns
    -------
    centres : ndarray of float32, shape (n_words, n_dims)
    """
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    descriptors = _check_descriptors(descriptors, n_words, "k-means codebook")
    # One thread: k-means++ makes thousands of small BLAS calls whose worker
    # threads spin-wait; on a loaded machine that is several times slower than one
    # thread (docs/benchmarks/build-and-cache.md).
    # Progress: scikit-learn's verbose lines ("Iteration i, inertia …"), which change no number.
    with (
        step_progress(
            _log,
            f"k-means codebook ({n_words} words, at most {max_iter} iterations)",
            capture_stdout=True,
            total_iterations=max_iter,
        ) as verbose,
        threadpool_limits(limits=1),
    ):
        kmeans = KMeans(
            n_clusters=n_words, n_init=1, max_iter=max_iter, tol=1e-4, random_state=random_state, verbose=int(verbose)
        ).fit(descriptors)
    return np.ascontiguousarray(kmeans.cluster_centers_, dtype=np.float32)


#: ``codebook.dictionary_solver`` values: our online learner (:mod:`~classify_images.coding.dictionary`,
#: the default) and ``spams.trainDL`` (the optional extra ``classify-images[spams]``, GPL-3.0-or-later).
DICTIONARY_SOLVERS = ("online", "spams")

#: What to run to get ``spams`` (``codebook.dictionary_solver = "spams"``).
SPAMS_INSTALL_HINT = "pip install 'classify-images[spams]' (or pip install spams-bin)"


class MissingSolverError(ClassifyImagesError, ImportError):
    """``codebook.dictionary_solver = "spams"`` without spams importable (one line, what to install)."""


def spams_missing() -> str | None:
    """Why ``spams`` cannot be imported (one line with :data:`SPAMS_INSTALL_HINT`), or ``None``."""
    if importlib.util.find_spec("spams") is not None:
        return None
    return (
        'codebook.dictionary_solver = "spams" needs spams (spams-bin, GPL-3.0-or-later), which '
        f"is not installed: {SPAMS_INSTALL_HINT}, or remove the setting for our own learner (the default)"
    )


def learn_sparse_dictionary(
    descriptors: np.ndarray,
    n_atoms: int,
    *,
    lambda1: float = 0.15,
    n_iter: int = 1000,
    batch_size: int = 512,
    random_state: int = 0,
    solver: str = "online",
    n_threads: int | None = None,
) -> np.ndarray:
    """Sparse-coding dictionary (ScSPM Eq. 3) by online dictionary learning.

    Solves :math:`\\min_{V} \\frac{1}{n}\\sum_i \\min_{u_i} \\tfrac12\\lVert x_i - V u_i\\rVert_2^2
    + \\lambda \\lVert u_i \\rVert_1` with unit-norm-bounded atoms, the objective
    of the ScSPM reference code (feature-sign search, ``gamma = 0.15``), by the online
    algorithm of Mairal et al. (JMLR 2010, Algorithms 1–2 with mini-batches), from the same
    initial atoms (:func:`initial_atoms`) with either solver:

    * ``"online"`` (default): :func:`~classify_images.coding.dictionary.learn_online_dictionary`,
      the mini-batches coded on ``n_threads`` threads, the same bits for any thread count (the
      same held-out objective as spams at half its CPU; ScSPM accuracy on 15-Scenes spams' within
      the spread of the dictionary's seed, docs/benchmarks/sparse-coding.md);
    * ``"spams"``: ``spams.trainDL`` (the optional extra, GPL-3.0-or-later) on one thread (its
      threads change the bits).

    Parameters
    ----------
    descriptors : ndarray (n_samples, n_dims)
        Training descriptors, ideally unit-norm SIFT.
    n_atoms : int
        Dictionary size ``K`` (1024 in ScSPM).
    lambda1 : float
        Sparsity weight :math:`\\lambda` (``gamma`` of the reference code).
    n_iter : int
        Mini-batch iterations (``n_iter·batch_size`` descriptors are visited).
    batch_size : int
        Mini-batch size.
    random_state : int
        Seed of the initial dictionary (:func:`initial_atoms`) and, for ``"online"``, of the
        order of the descriptors.  SPAMS reseeds its own generator (``srandom(0)``) at each
        call, so with one thread and no zero initial atom its dictionary too is a function of
        the arguments only, whatever the process computed before.
    solver : {"online", "spams"}
        The learner (``codebook.dictionary_solver``).
    n_threads : int, optional
        Threads of ``"online"`` (default: the cores available); changes no number.

    Returns
    -------
    dictionary : ndarray of float32, shape (n_atoms, n_dims)
        Atoms as rows (the same orientation as k-means centres).

    Raises
    ------
    MissingSolverError
        ``solver="spams"`` without spams installed.
    """
    from threadpoolctl import threadpool_limits

    if solver not in DICTIONARY_SOLVERS:
        raise ValueError(f"sparse-coding dictionary: solver must be one of {DICTIONARY_SOLVERS}, got {solver!r}")
    if solver == "spams" and (missing := spams_missing()):
        raise MissingSolverError(missing)
    descriptors = _check_descriptors(descriptors, n_atoms, "sparse-coding dictionary")
    X = np.asfortranarray(descriptors.T, dtype=np.float64)
    init = initial_atoms(X, n_atoms, random_state)
    # Progress: the time so far (SPAMS prints from C++, not through sys.stdout, and learns in one call).
    with step_progress(
        _log,
        f"sparse-coding dictionary ({n_atoms} atoms, {n_iter} mini-batches of {batch_size})"
        + (" by the online learner" if solver == "online" else ""),
    ):
        if solver == "online":
            from .dictionary import learn_online_dictionary

            with threadpool_limits(limits=1):  # D Dᵀ: one BLAS thread, whatever the caller's
                D = learn_online_dictionary(
                    descriptors,
                    init.T,
                    lambda1,
                    n_iter=int(n_iter),
                    batch_size=int(batch_size),
                    random_state=random_state,
                    n_threads=n_threads,
                )
            return np.ascontiguousarray(D, dtype=np.float32)
        import spams

        D = spams.trainDL(
            X,
            D=init,
            lambda1=float(lambda1),
            mode=2,
            iter=int(n_iter),
            batchsize=int(batch_size),
            numThreads=1,
            verbose=False,
        )
    return np.ascontiguousarray(np.asarray(D).T, dtype=np.float32)


def initial_atoms(X: np.ndarray, n_atoms: int, random_state: int) -> np.ndarray:
    """Unit-norm initial dictionary for ``spams.trainDL``: columns of ``X`` drawn at random.

    The atoms are ``n_atoms`` training descriptors of non-zero norm drawn without
    replacement (:func:`sample_rows`) and scaled to unit norm; if fewer descriptors
    than atoms have a non-zero norm, the remaining atoms are seeded Gaussian
    directions.  No atom is zero, and that is what makes the dictionary
    reproducible: SPAMS (``Matrix::normalize``) replaces a zero initial atom by
    Gaussian noise from a generator that lives in the library (``normalDistrib``
    on Numerical Recipes' ``ran1``, static state, never reseeded), so its draws
    depend on every earlier call in the process.  All-zero descriptors are common:
    dense SIFT zeroes the descriptors of low-contrast patches.

    Parameters
    ----------
    X : ndarray of float64, shape (n_dims, n_samples)
        Training descriptors as columns.
    n_atoms : int
        Number of atoms ``K``.
    random_state : int
        Seed of the draw (and of the Gaussian directions).

    Returns
    -------
    init : ndarray of float64, shape (n_dims, n_atoms), Fortran order

    References
    ----------
    1. J. Mairal, F. Bach, J. Ponce, G. Sapiro. Online learning for matrix factorization
       and sparse coding. JMLR 11, 2010 (Algorithm 1: the initial dictionary ``D_0``).
    2. SPAMS 2.6, ``linalg.h`` (``Matrix::normalize``, ``Vector::setAleat``) and
       ``misc.h`` (``normalDistrib``, ``ran1``).
    """
    rng = np.random.default_rng(random_state)
    norms = np.linalg.norm(X, axis=0)
    usable = np.flatnonzero(norms > _MIN_ATOM_NORM)
    picked = usable[sample_rows(usable.size, n_atoms, rng)]
    init = np.empty((X.shape[0], n_atoms), dtype=np.float64, order="F")
    init[:, : picked.size] = X[:, picked] / norms[picked]
    if picked.size < n_atoms:
        directions = rng.standard_normal((X.shape[0], n_atoms - picked.size))
        init[:, picked.size :] = directions / np.linalg.norm(directions, axis=0)
    return init


def learn_fisher_model(
    descriptors: np.ndarray,
    n_components: int,
    *,
    pca_dims: int = DEFAULT_PCA_DIMS,
    max_iter: int = 100,
    random_state: int = 0,
    n_threads: int | None = None,
    coordinates: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """PCA + diagonal GMM for improved Fisher vectors (Perronnin et al. 2010, §2 and §4.1).

    The descriptors are centred and projected on their ``pca_dims`` principal axes
    (:class:`~sklearn.decomposition.PCA`, no whitening, one BLAS thread, by the eigendecomposition
    of the ``P × P`` covariance matrix: ``svd_solver="covariance_eigh"``, 16× faster than a full
    SVD of the ``n × P`` samples for 10⁵ × 384, the same axes to ~1e-11); a GMM
    with ``K`` diagonal components, :math:`p(x) = \\sum_k \\pi_k \\mathcal N(x; \\mu_k, \\mathrm{diag}\\,\\sigma_k^2)`,
    is fitted to the projections by EM from a seeded k-means start
    (:func:`~classify_images.coding.gmm.fit_diagonal_gmm`: scikit-learn's
    :class:`~sklearn.mixture.GaussianMixture` algorithm, ``covariance_type="diag"``).  EM
    sums fixed chunks of descriptors, each on one BLAS thread, in a fixed order: the model
    is the same bits for any ``n_threads``, in this process or on a cluster worker, on a
    given machine.

    Parameters
    ----------
    descriptors : ndarray (n_samples, P)
        Training descriptors.
    n_components : int
        GMM components ``K`` (256 is the usual choice).
    pca_dims : int
        ``D ≤ P``, dimensions kept by PCA.
    max_iter : int
        EM iterations at most.
    random_state : int
        Seed of the GMM's initialisation.
    n_threads : int, optional
        Threads of k-means and EM (default: the cores available); changes no number.
    coordinates : ndarray (n_samples, 2), optional
        The descriptors' relative keypoint coordinates
        (:func:`~classify_images.coding.fisher.spatial_coordinates`), appended to the
        projections before the GMM (Sánchez et al. 2012): the GMM then has ``D + 2`` dimensions.
        The PCA is learnt on the descriptors alone.

    Returns
    -------
    model : dict of float64 ndarrays
        ``pca_mean`` (P,), ``pca_components`` (D, P), ``weights`` (K,), ``means`` (K, D),
        ``variances`` (K, D) — :data:`~classify_images.coding.fisher.FISHER_MODEL_KEYS`
        (``D + 2`` columns of ``means`` and ``variances`` with ``coordinates``).
    """
    from sklearn.decomposition import PCA
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    from .gmm import fit_diagonal_gmm

    descriptors = _check_descriptors(descriptors, n_components, "Fisher-vector GMM")
    if not 1 <= pca_dims <= descriptors.shape[1]:
        raise ValueError(
            f"Fisher-vector GMM: pca_dims must be in [1, {descriptors.shape[1]}] (the descriptor length), got {pca_dims}"
        )
    X = descriptors.astype(np.float64)
    if coordinates is not None and np.shape(coordinates) != (X.shape[0], 2):
        raise ValueError(
            f"Fisher-vector GMM: coordinates must have shape ({X.shape[0]}, 2), got {np.shape(coordinates)}"
        )
    # One BLAS / OpenMP thread: the covariance's partial sums depend on the number of threads,
    # which differs between this process and a Dask worker; EM's threads each run one chunk
    # on one BLAS thread (coding/gmm.py).
    # Progress: one line per EM iteration, which changes no number.
    with (
        threadpool_limits(limits=1),
        step_progress(
            _log,
            f"Fisher-vector GMM ({n_components} components, at most {max_iter} EM iterations)",
            capture_stdout=True,
            total_iterations=max_iter,
        ) as verbose,
    ):
        pca = PCA(n_components=pca_dims, svd_solver="covariance_eigh", whiten=False).fit(X)
        projected = pca.transform(X)
        if coordinates is not None:
            projected = np.concatenate([projected, np.asarray(coordinates, dtype=np.float64)], axis=1)
        gmm, converged = fit_diagonal_gmm(
            projected,
            n_components,
            max_iter=max_iter,
            random_state=random_state,
            n_threads=n_threads,
            progress=print if verbose else None,
        )
    if not converged:
        warnings.warn(
            f"Fisher-vector GMM: EM stopped at codebook.n_iter = {max_iter} iterations before its "
            "change fell below 0.001; the model is used as it is (raise codebook.n_iter for "
            "a closer fit)",
            ConvergenceWarning,
            stacklevel=2,
        )
    return {
        "pca_mean": np.asarray(pca.mean_, dtype=np.float64),
        "pca_components": np.asarray(pca.components_, dtype=np.float64),
        **gmm,
    }
