"""Training rows read a block of columns at a time (:mod:`classify_images.classifiers.column_blocks`):
the linear SVM trained on them equals the one trained on the same rows in memory, every solver
and the cross-validation of ``C`` included; a feature set's rows and mirrors read by columns
(float32, float16, int8, int4) are the rows the experiment gathered before, bit for bit, and an
experiment on them never holds the training rows."""

from __future__ import annotations

import numpy as np
import pytest

from classify_images.classifiers import span
from classify_images.classifiers.column_blocks import ColumnBlockRows, float32_columns
from classify_images.classifiers.eigenbasis import gram_matrix
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.coding.scalar_quantizer import dequantize_columns, dequantize_rows, quantize_rows


class ArrayColumns(ColumnBlockRows):
    """The obvious column reader: rows ``rows`` of an array in memory, counting its reads."""

    def __init__(self, values: np.ndarray, rows: np.ndarray | None = None, checked: bool = False) -> None:
        self.values = values
        self.rows = np.arange(values.shape[0]) if rows is None else np.asarray(rows)
        self.checked_finite = checked
        self.reads = [0]

    @property
    def shape(self):
        return (self.rows.size, self.values.shape[1])

    @property
    def identity(self):
        return ("array", id(self.values), self.rows.tobytes())

    def read_columns(self, start, stop, out=None):
        self.reads[0] += 1
        block = self.values[self.rows, start:stop].astype(np.float32)
        if out is None:
            return block
        out[...] = block
        return out

    def take(self, rows):
        taken = ArrayColumns(self.values, self.rows[np.asarray(rows)], self.checked_finite)
        taken.reads = self.reads
        return taken


def _problem(n=60, d=9000, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = rng.standard_normal((n, d)).astype(np.float32) * 0.01
    X[np.arange(n), y] += 0.05  # separable enough to learn, not trivially
    return X, y


def test_indexing_reads_lazily_and_decodes_as_the_array():
    X, _ = _problem(n=10, d=5000)
    lazy = ArrayColumns(X)
    assert isinstance(lazy[:4], ColumnBlockRows) and lazy[:4].shape == (4, 5000)
    assert isinstance(lazy[[3, 1]], ColumnBlockRows) and lazy.reads[0] == 0
    np.testing.assert_array_equal(np.asarray(lazy), X)
    np.testing.assert_array_equal(lazy[:, 4090:4100], X[:, 4090:4100])
    np.testing.assert_array_equal(np.asarray(lazy[[3, 1]]), X[[3, 1]])
    np.testing.assert_array_equal(lazy[2], X[2])
    np.testing.assert_array_equal(lazy[[2, 0], 7:9], X[[2, 0], 7:9])
    np.testing.assert_array_equal(np.asarray(lazy[X[:, 0] > 0]), X[X[:, 0] > 0])
    np.testing.assert_allclose(lazy.squared_norms(), np.einsum("ij,ij->i", X.astype(np.float64), X))
    np.testing.assert_array_equal(float32_columns(lazy, 10, 20), X[:, 10:20])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_gram_matrix_by_columns_is_the_in_memory_one(dtype):
    X, _ = _problem(n=40, d=9000)
    X = X.astype(dtype)
    np.testing.assert_array_equal(gram_matrix(ArrayColumns(X)), gram_matrix(X))
    np.testing.assert_array_equal(
        gram_matrix(ArrayColumns(X), float64_products=True), gram_matrix(X.astype(np.float32), float64_products=True)
    )


@pytest.mark.parametrize("solver", ["auto", "span", "eigen", "features"])
def test_the_linear_svm_on_column_blocks_is_the_one_on_the_rows(solver):
    X, y = _problem()
    params = dict(C=10.0, solver=solver, tol=1e-6, max_iter=300)
    in_memory = QuadraticHingeSVC(**params).fit(X, y)
    lazy = ArrayColumns(X, checked=True)
    by_columns = QuadraticHingeSVC(**params).fit(lazy, y)
    if solver in ("auto", "span"):  # the span solver: two passes over the blocks (Gram, weights)
        blocks = -(-X.shape[1] // 4096)
        assert lazy.reads[0] == blocks + -(-X.shape[1] // span._COLUMNS)
    np.testing.assert_allclose(by_columns.coef_, in_memory.coef_, rtol=1e-5, atol=1e-7 * np.abs(in_memory.coef_).max())
    np.testing.assert_allclose(by_columns.intercept_, in_memory.intercept_, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(by_columns.predict(lazy), in_memory.predict(X))
    assert by_columns.n_features_in_ == X.shape[1]


def test_c_auto_and_the_default_search_on_column_blocks_match_the_rows():
    from classify_images.classifiers.model_selection import default_grid, search_parameters

    X, y = _problem(n=90)
    lazy = ArrayColumns(X)
    a = QuadraticHingeSVC(C="auto").fit(X, y)
    b = QuadraticHingeSVC(C="auto").fit(lazy, y)
    assert a.C_ == pytest.approx(b.C_, rel=1e-6)
    assert default_grid(X) == default_grid(lazy)
    found = search_parameters(QuadraticHingeSVC(), X, y, default_grid(X), seed=0)
    lazy_found = search_parameters(QuadraticHingeSVC(), lazy, y, default_grid(X), seed=0)
    assert lazy_found.method == found.method == "gram"
    assert lazy_found.best == found.best
    np.testing.assert_allclose([s["score"] for s in lazy_found.scores], [s["score"] for s in found.scores])


def test_non_finite_rows_by_columns_are_refused_unless_checked():
    X, y = _problem(n=30, d=5000)
    X[4, 4500] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        QuadraticHingeSVC(C=1.0).fit(ArrayColumns(X), y)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("d", [4096, 9001])
def test_dequantized_columns_are_those_of_the_dequantized_rows(bits, d):
    rng = np.random.default_rng(bits + d)
    stored = quantize_rows(rng.standard_normal((12, d)).astype(np.float32), bits)
    whole = dequantize_rows(stored, bits, n_features=d)
    rows = np.array([5, 0, 11, 5])
    for start, stop in [(0, d), (0, 1), (1, min(d, 4097)), (4095, min(d, 4097)), (d - 3, d), (7, 7)]:
        got = dequantize_columns(stored, bits, rows, start, stop, d)
        np.testing.assert_array_equal(got, whole[rows, start:stop])
    with pytest.raises(ValueError, match="columns"):
        dequantize_columns(stored, bits, rows, 0, d + 1, d)


@pytest.fixture(scope="module")
def stored_builds(tmp_path_factory):
    """One Fisher-vector build with mirrors, its rows stored float32, float16, int8 and int4 (npy)."""
    from .test_scalar_rows import fisher_builds_with_mirrors

    return fisher_builds_with_mirrors(tmp_path_factory.mktemp("column-blocks"), ("float32", "float16", "int8", "int4"))


@pytest.mark.parametrize("rows", ["float32", "float16", "int8", "int4"])
def test_stored_columns_are_the_gathered_rows_and_mirrors(stored_builds, rows):
    from classify_images.pipeline.extraction.augment import rows_and_mirrors
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.storage.pooled_columns import StoredColumns, stored_columns

    fs = load_feature_set(stored_builds[rows])
    n_pooled = len(fs.y_train) + len(fs.y_test)
    picked = np.array([n_pooled - 1, 0, 3, len(fs.y_train), 2])  # test and training rows, any order
    for mirrored in (False, True):
        lazy = stored_columns(fs, picked, mirrored=mirrored)
        assert isinstance(lazy, StoredColumns) and lazy.checked_finite
        gathered = rows_and_mirrors(fs, picked) if mirrored else fs.pooled_rows(picked)
        np.testing.assert_array_equal(np.asarray(lazy), gathered)
        np.testing.assert_array_equal(lazy[:, 5:40], gathered[:, 5:40])
        np.testing.assert_array_equal(np.asarray(lazy[1:3]), gathered[1:3])
        assert lazy[1:3].identity == lazy.take(np.array([1, 2])).identity != lazy.identity


def test_no_stored_columns_for_shards_or_product_quantised_rows(tmp_path):
    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.storage.pooled_columns import stored_columns

    from ._encoder_helpers import small_config
    from .conftest import FIXTURE_IMAGES
    from .test_compressed_rows import FISHER

    config = small_config(**FISHER)
    build_feature_set(FIXTURE_IMAGES, tmp_path / "s", config, cache_dir=tmp_path / "c", store="sharded")
    sharded = load_feature_set(tmp_path / "s")
    assert stored_columns(sharded, np.arange(3)) is None
    assert stored_columns(sharded, np.arange(3), mirrored=True) is None  # no mirrors either


@pytest.mark.parametrize("rows", ["int8", "float16"])
def test_an_experiment_trains_on_stored_columns_as_on_the_gathered_rows(stored_builds, rows, monkeypatch):
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.storage.pooled_columns import StoredColumns
    from classify_images.pipeline.training import evaluation

    fs = load_feature_set(stored_builds[rows])
    seen = []
    train = evaluation.train_classifier

    def recording(name, params, X, y, **kwargs):
        seen.append(type(X))
        return train(name, params, X, y, **kwargs)

    monkeypatch.setattr(evaluation, "train_classifier", recording)
    lazy = evaluation.run_experiment(fs, "linear", {}, 2)  # the default search of C, the flips
    assert seen == [StoredColumns, StoredColumns]
    # the same experiment on the gathered float32 rows: the same choices and predictions
    monkeypatch.setattr(evaluation, "rows_by_columns", lambda *args, **kwargs: None)
    monkeypatch.setattr(evaluation, "training_dtype", lambda *args, **kwargs: np.float32)
    seen.clear()
    gathered = evaluation.run_experiment(fs, "linear", {}, 2)
    assert seen == [np.ndarray, np.ndarray]
    for a, b in zip(lazy.runs, gathered.runs, strict=True):
        assert a.chosen == b.chosen and a.flips == b.flips
        assert a.mean_per_class_accuracy == b.mean_per_class_accuracy
    assert evaluation.run_experiment(fs, "linear", {"solver": "features", "C": 1.0}, 1).runs  # gathered, runs


def test_an_experiment_by_columns_never_holds_the_training_rows(tmp_path, monkeypatch):
    """The split's training rows and mirrors stay in the store: the experiment's peak is far below
    one copy of them (it was that copy plus the Gram matrix and the folds)."""
    from classify_images.pipeline.storage import feature_store
    from classify_images.pipeline.training.evaluation import run_experiment

    from .test_experiment_memory import N_FEATURES, PER_CLASS, _mirrored_feature_set, _peak_bytes

    monkeypatch.setattr(feature_store, "POOLED_BLOCK_BYTES", 8 * 4 * N_FEATURES)
    fs = _mirrored_feature_set(tmp_path)
    stacked_bytes = 2 * 3 * PER_CLASS * N_FEATURES * 4
    run_experiment(fs, "linear", {"C": 1.0}, 1)  # compiled and imported before measuring
    peak = _peak_bytes(lambda: run_experiment(fs, "linear", {"C": 1.0}, 1))
    assert peak < 0.5 * stacked_bytes, f"peak {peak / 2**20:.1f} MiB for {stacked_bytes / 2**20:.1f} MiB of rows"


def test_a_gram_matrix_held_for_a_selection_of_column_blocks_serves_its_fit():
    """``reused_gram`` knows a row selection of a :class:`ColumnBlockRows` by its identity: the fit
    on the images without their mirrors (the search's choice ``flip_train = False``) takes the
    search's Gram matrix and reads the rows once only, for the weights."""
    from classify_images.classifiers.eigenbasis import reused_gram

    X, y = _problem(n=80)
    lazy = ArrayColumns(X, checked=True)
    K = gram_matrix(lazy)
    images = lazy[:40]
    assert images.identity == lazy[np.arange(40)].identity != lazy.identity
    before = lazy.reads[0]
    with reused_gram(images, np.ascontiguousarray(K[:40, :40])):
        reused = QuadraticHingeSVC(C=1.0).fit(images, y[:40])
    assert lazy.reads[0] - before == -(-X.shape[1] // span._COLUMNS)  # the weights only: no Gram pass
    fresh = QuadraticHingeSVC(C=1.0).fit(X[:40], y[:40])
    np.testing.assert_allclose(reused.coef_, fresh.coef_, rtol=1e-5, atol=1e-7 * np.abs(fresh.coef_).max())


def test_no_rows_by_columns_is_scikit_learns_one_line_error():
    X, y = _problem(n=30, d=5000)
    with pytest.raises(ValueError, match="0 sample"):
        QuadraticHingeSVC(C=1.0).fit(ArrayColumns(X, rows=np.arange(0)), y[:0])
