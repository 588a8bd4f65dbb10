"""Our online dictionary learner (coding/dictionary.py): the same bits on any number of threads,
equal to a slow obvious reference, and as good as ``spams.trainDL`` on held-out descriptors."""

import importlib.util
import sys

import numpy as np
import pytest

from classify_images.coding import codebook as codebook_module
from classify_images.coding.codebook import MissingSolverError, initial_atoms, learn_sparse_dictionary
from classify_images.coding.dictionary import _STREAM, learn_online_dictionary, mean_lasso_cost
from classify_images.coding.encoders import EncoderParameterError, make_encoder


def _sparse_mixtures(seed: int, n: int, d: int, k: int, density: float = 0.08) -> np.ndarray:
    """Unit-norm rows, each a sparse combination of ``k`` random unit directions plus noise."""
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((k, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    codes = rng.standard_normal((n, k)) * (rng.random((n, k)) < density)
    X = codes @ directions + 0.05 * rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


def _initial(X: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    return initial_atoms(np.asfortranarray(X.T, dtype=np.float64), k, seed).T


def _lasso_by_coordinate_descent(x: np.ndarray, D: np.ndarray, lam: float) -> np.ndarray:
    """argmin_u ½‖x − Dᵀu‖² + λ‖u‖₁ by cyclic coordinate descent to convergence (tiny K only)."""
    G, c = D @ D.T, D @ x
    u = np.zeros(D.shape[0])
    for _ in range(100_000):
        biggest = 0.0
        for k in range(u.size):
            r = c[k] - G[k] @ u + G[k, k] * u[k]
            new = np.sign(r) * max(abs(r) - lam, 0.0) / G[k, k]
            biggest, u[k] = max(biggest, abs(new - u[k])), new
        if biggest < 1e-15:
            return u
    raise AssertionError("coordinate descent did not converge")


def _reference_dictionary(X, D0, lam, n_iter, eta, seed):
    """Mairal et al. 2010, Algorithm 1 with mini-batches and Algorithm 2, written out plainly."""
    X = X.astype(np.float64)
    D = D0.astype(np.float64).copy()
    n, K = X.shape[0], D.shape[0]
    rng = np.random.default_rng((seed, _STREAM))
    order = rng.permutation(n)
    nonzero = np.flatnonzero(np.linalg.norm(X, axis=1) > 0)

    def draw():
        x = X[nonzero[rng.integers(nonzero.size)]]
        return x / np.linalg.norm(x)

    A, B = np.zeros((K, K)), np.zeros((K, X.shape[1]))
    for t in range(n_iter):
        batch = X[order[(t * eta + np.arange(eta)) % n]]
        # near-duplicate atoms (of an earlier atom that stays) replaced, all of one scan together
        G = D @ D.T
        kept, duplicates = [], []
        for j in range(K):
            (duplicates if any(abs(G[i, j]) > 0.999999 * np.sqrt(G[i, i] * G[j, j]) for i in kept) else kept).append(j)
        for j in duplicates:
            D[j] = draw()
        # the codes rounded to float32, as the coder returns them
        U = np.array([_lasso_by_coordinate_descent(x, D, lam) for x in batch]).astype(np.float32).astype(np.float64)
        theta = min(t * eta if t < eta else eta * eta + t - eta, 2 * n)
        beta = (theta + 1 - eta) / (theta + 1)
        A = beta * A + U.T @ U / eta
        B = beta * B + U.T @ batch / eta
        for j in range(K):
            if A[j, j] > 1e-6:
                u = D[j] + (B[j] - A[j] @ D) / A[j, j]
                D[j] = u / max(np.linalg.norm(u), 1.0)
        if (t + 1) * eta > 10_000:
            for j in np.flatnonzero(np.diagonal(A) <= 1e-6):
                D[j] = draw()
    return D


def test_the_dictionary_is_the_same_bits_on_one_two_and_three_threads():
    X = _sparse_mixtures(0, 800, 16, 32)
    D0 = _initial(X, 24)
    learnt = [
        learn_online_dictionary(X, D0, 0.15, n_iter=12, batch_size=70, n_threads=threads) for threads in (1, 2, 3)
    ]
    assert not np.array_equal(learnt[0], D0)
    for other in learnt[1:]:
        np.testing.assert_array_equal(other, learnt[0])
    # the public entry point too (float32 atoms, the build's call)
    by_threads = [
        learn_sparse_dictionary(X, 24, n_iter=12, batch_size=70, solver="online", n_threads=threads)
        for threads in (1, 2)
    ]
    np.testing.assert_array_equal(by_threads[0], by_threads[1])


@pytest.mark.parametrize("seed", [0, 1])
def test_the_learner_equals_a_slow_obvious_reference(seed):
    X = _sparse_mixtures(seed, 60, 8, 6, density=0.3)
    D0 = _initial(X, 6, seed)
    fast = learn_online_dictionary(
        X, D0, 0.1, n_iter=9, batch_size=8, random_state=seed, n_threads=2, correlation_dtype=np.float64
    )
    slow = _reference_dictionary(X, D0, 0.1, 9, 8, seed)
    assert np.abs(slow - D0).max() > 1e-2  # the atoms moved
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)
    # float32 correlations (the default, the encoder's precision) move it by rounding only
    default = learn_online_dictionary(X, D0, 0.1, n_iter=9, batch_size=8, random_state=seed)
    np.testing.assert_allclose(default, slow, rtol=0, atol=1e-4)


def test_near_duplicate_atoms_are_replaced_as_by_the_reference():
    X = _sparse_mixtures(4, 60, 8, 6, density=0.3)
    D0 = _initial(X, 6, 4)
    D0[3], D0[5] = D0[1], -D0[1] * (1 - 1e-9)  # collinear with atom 1 (either sign)
    fast = learn_online_dictionary(X, D0, 0.1, n_iter=5, batch_size=8, random_state=4, correlation_dtype=np.float64)
    np.testing.assert_allclose(fast, _reference_dictionary(X, D0, 0.1, 5, 8, 4), rtol=0, atol=1e-9)
    unit = fast / np.linalg.norm(fast, axis=1, keepdims=True)
    assert np.abs(np.triu(unit @ unit.T, 1)).max() < 0.999


def test_near_duplicate_search_equals_the_obvious_scan():
    from classify_images.coding._dictionary_kernels import near_duplicate_atoms

    rng = np.random.default_rng(0)
    D = rng.standard_normal((12, 5))
    D[4], D[7], D[11] = D[2] * 3, -D[2], D[0] + 1e-3 * rng.standard_normal(5)  # 11: near 0, not within 1e-6
    D[9] = D[7] * 0.5
    G = D @ D.T
    marked = near_duplicate_atoms(G, 0.999999)
    kept, expected = [], np.zeros(12, bool)
    for j in range(12):
        if any(abs(G[i, j]) > 0.999999 * np.sqrt(G[i, i] * G[j, j]) for i in kept):
            expected[j] = True
        else:
            kept.append(j)
    np.testing.assert_array_equal(marked, expected)
    assert marked.tolist() == [j in (4, 7, 9) for j in range(12)]


def test_an_atom_never_used_is_replaced_by_a_training_descriptor():
    X = np.zeros((400, 6), dtype=np.float32)
    X[:, :4] = _sparse_mixtures(3, 400, 4, 8, density=0.4)  # the data span the first 4 coordinates
    D0 = _initial(X, 5)
    D0[4] = np.eye(6)[5]  # orthogonal to every descriptor: its code is always 0
    few = learn_online_dictionary(X, D0, 0.1, n_iter=10, batch_size=100)  # 1000 descriptors seen
    np.testing.assert_array_equal(few[4], D0[4])
    many = learn_online_dictionary(X, D0, 0.1, n_iter=101, batch_size=100)  # > 10 000 seen
    assert many[4, 5] == 0 and np.isclose(np.linalg.norm(many[4]), 1.0)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    assert np.abs(unit - many[4]).max(axis=1).min() < 1e-6  # after the last update, a unit descriptor


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_held_out_objective_is_within_two_percent_of_spams(seed):
    spams = pytest.importorskip(
        "spams", reason="spams (spams-bin) is the reference of this comparison and cannot be imported"
    )
    X = _sparse_mixtures(10 + seed, 6000, 32, 64)
    train, held_out = X[:5000], X[5000:]
    D0 = _initial(train, 64, seed)
    ours = learn_online_dictionary(train, D0, 0.15, n_iter=60, batch_size=64, random_state=seed)
    theirs = np.asarray(
        spams.trainDL(
            np.asfortranarray(train.T, dtype=np.float64),
            D=np.asfortranarray(D0.T),
            lambda1=0.15,
            mode=2,
            iter=60,
            batchsize=64,
            numThreads=1,
            verbose=False,
        )
    ).T
    f_ours, f_spams, f_start = (mean_lasso_cost(held_out, D, 0.15) for D in (ours, theirs, D0))
    assert f_spams < 0.9 * f_start  # spams learnt something on this data
    assert f_ours <= 1.02 * f_spams, (f_ours, f_spams)


def test_asking_for_spams_without_it_names_the_extra(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "spams" else real_find_spec(name, *a)
    )
    table = {"kind": "sparse", "size": 8, "n_samples": 100, "lambda": 0.15, "n_iter": 2, "seed": 0}
    with pytest.raises(EncoderParameterError, match=r"classify-images\[spams\]") as error:
        make_encoder({**table, "dictionary_solver": "spams"})
    assert "\n" not in str(error.value)
    with pytest.raises(MissingSolverError, match=r"classify-images\[spams\]"):
        learn_sparse_dictionary(_sparse_mixtures(0, 50, 4, 4), 8, n_iter=2, solver="spams")
    # our learner, the default, needs no spams (an import of it would fail here)
    monkeypatch.setitem(sys.modules, "spams", None)
    assert make_encoder(table).solver == "online"
    assert learn_sparse_dictionary(_sparse_mixtures(0, 50, 4, 4), 8, n_iter=2).shape == (8, 4)
    assert make_encoder({**table, "dictionary_solver": "online"}).solver == "online"
    assert codebook_module.spams_missing() is not None
