"""The sparse-coding dictionary is a function of its arguments only (both solvers).

SPAMS fills a zero initial atom with Gaussian noise from a generator whose state lives
in the library and is never reseeded, so before :func:`initial_atoms` the second
dictionary learnt in a process differed from a fresh process's.
"""

import subprocess
import sys

import numpy as np
import pytest

from classify_images.coding.codebook import initial_atoms, learn_sparse_dictionary

_SMALL = dict(n_iter=5, batch_size=32, lambda1=0.15, random_state=0)
_SPAMS = dict(_SMALL, solver="spams")


def _descriptors(seed: int, n_rows: int = 300, n_dims: int = 16, zero_fraction: float = 0.3) -> np.ndarray:
    """Non-negative unit-norm rows, a fraction of them all-zero (as dense SIFT gives for flat patches)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n_rows, n_dims)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[rng.random(n_rows) < zero_fraction] = 0
    return X


def _advance_spams_generator() -> None:
    """A SPAMS call that draws from its internal Gaussian generator (an all-zero initial atom)."""
    import spams

    X = np.asfortranarray(_descriptors(7).T, dtype=np.float64)
    D0 = np.asfortranarray(X[:, :8])
    D0[:, :3] = 0
    spams.trainDL(X, D=D0, lambda1=0.1, mode=2, iter=2, batchsize=16, numThreads=1, verbose=False)


def test_initial_atoms_are_unit_norm_training_descriptors():
    X = np.asfortranarray(_descriptors(1).T, dtype=np.float64)
    init = initial_atoms(X, 24, random_state=0)
    assert init.shape == (16, 24) and init.flags.f_contiguous
    np.testing.assert_allclose(np.linalg.norm(init, axis=0), 1.0, rtol=1e-12)
    # Each atom is a distinct non-zero training descriptor, normalised (obvious check by search).
    normalised = X / np.where(np.linalg.norm(X, axis=0) > 0, np.linalg.norm(X, axis=0), 1)
    matches = [np.flatnonzero(np.abs(normalised - atom[:, None]).max(0) < 1e-12) for atom in init.T]
    assert all(len(m) >= 1 and np.linalg.norm(X[:, m[0]]) > 0 for m in matches)
    assert len({int(m[0]) for m in matches}) == 24
    np.testing.assert_array_equal(init, initial_atoms(X, 24, random_state=0))
    assert not np.array_equal(init, initial_atoms(X, 24, random_state=1))


def test_initial_atoms_fill_with_seeded_directions_when_few_descriptors_are_non_zero():
    X = np.zeros((16, 40))
    X[:, :5] = np.random.default_rng(2).random((16, 5))
    init = initial_atoms(X, 12, random_state=3)
    np.testing.assert_allclose(np.linalg.norm(init, axis=0), 1.0, rtol=1e-12)
    # The 5 non-zero descriptors come first, then 7 seeded Gaussian directions.
    np.testing.assert_allclose(np.sort(init[0, :5]), np.sort(X[0, :5] / np.linalg.norm(X[:, :5], axis=0)))
    np.testing.assert_array_equal(init, initial_atoms(X, 12, random_state=3))
    assert not np.array_equal(init[:, 5:], initial_atoms(X, 12, random_state=4)[:, 5:])


def test_dictionary_does_not_depend_on_earlier_spams_calls_in_the_process(tmp_path):
    pytest.importorskip("spams", reason="spams (spams-bin) cannot be imported")
    X = _descriptors(0)
    np.save(tmp_path / "X.npy", X)
    # The reference: the same call as the first thing a fresh process does.
    script = (
        "import numpy as np\n"
        "from classify_images.coding.codebook import learn_sparse_dictionary\n"
        f"X = np.load({str(tmp_path / 'X.npy')!r})\n"
        f"np.save({str(tmp_path / 'fresh.npy')!r}, learn_sparse_dictionary(X, 24, **{_SPAMS!r}))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=1800)
    fresh = np.load(tmp_path / "fresh.npy")

    # Here: other dictionaries (other data and parameters) and a SPAMS call that draws
    # from SPAMS' own generator come first.
    learn_sparse_dictionary(_descriptors(5, n_rows=200), 20, n_iter=3, batch_size=16, random_state=1, solver="spams")
    _advance_spams_generator()
    first = learn_sparse_dictionary(X, 24, **_SPAMS)
    _advance_spams_generator()
    second = learn_sparse_dictionary(X, 24, **_SPAMS)
    np.testing.assert_array_equal(first, fresh)
    np.testing.assert_array_equal(second, fresh)


@pytest.mark.parametrize("solver", ["online", "spams"])
@pytest.mark.parametrize("zero_fraction", [0.0, 0.95])
def test_dictionary_atoms_are_bounded_and_finite(zero_fraction, solver):
    if solver == "spams":
        pytest.importorskip("spams", reason="spams (spams-bin) cannot be imported")
    D = learn_sparse_dictionary(_descriptors(4, zero_fraction=zero_fraction), 24, **_SMALL, solver=solver)
    assert D.shape == (24, 16) and D.dtype == np.float32 and np.isfinite(D).all()
    assert np.all(np.linalg.norm(D, axis=1) <= 1 + 1e-4)
