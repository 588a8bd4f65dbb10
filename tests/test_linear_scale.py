"""The linear squared-hinge SVM at scale: averaged SGD over row blocks (against a slow loop),
streaming from compressed shards without assembling them, and per-class groups on a cluster
giving the one-machine model within solver tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.classifiers import QuadraticHingeSVC
from classify_images.classifiers.base import merge_problem_groups
from classify_images.classifiers.quadratic_hinge import SGD_BATCH_ROWS
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.storage.shard_store import ShardedRows
from classify_images.pipeline.training.model_file import load_model
from classify_images.pipeline.training.streaming_training import RowBlocks, fit_streaming


def data(n=240, d=40, n_classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_classes, d))
    y = np.arange(n) % n_classes
    X = centres[y] + 1.5 * rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), y


def reference_asgd(X, y, C, n_epochs, block, batch):
    """Averaged SGD on 1/2||W||^2 + C sum sq-hinge, divided by C n, with loops over classes and rows
    (steps of ``batch`` rows within blocks of ``block`` rows)."""
    n, d = X.shape
    classes = np.unique(y)
    P = len(classes)
    X = X.astype(np.float64)
    lam = 1.0 / (C * n)
    first = [X[s : min(s + batch, block, n)] for s in range(0, min(block, n), batch)][:8]
    curvature = max(np.linalg.eigvalsh(B @ B.T)[-1] / len(B) for B in first)  # the steps of the first block
    eta0, eta0_b = 1.0 / (4.0 * curvature), 1.0 / 4.0
    W, b = np.zeros((P, d)), np.zeros(P)
    W_bar, b_bar = W.copy(), b.copy()
    t = 0
    for _ in range(n_epochs):
        starts = [
            (s, min(s + batch, b + block, n)) for b in range(0, n, block) for s in range(b, min(b + block, n), batch)
        ]
        for start, stop in starts:
            rows = range(start, stop)
            eta = eta0 / (1 + lam * eta0 * t) ** 0.75
            grad_W, grad_b = np.zeros((P, d)), np.zeros(P)
            for c in range(P):
                for i in rows:
                    target = 1.0 if y[i] == classes[c] else -1.0
                    margin = max(0.0, 1.0 - target * (X[i] @ W[c] + b[c]))
                    grad_W[c] += -2.0 * target * margin * X[i]
                    grad_b[c] += -2.0 * target * margin
            m = len(rows)
            W = (1 - eta * lam) * W - eta * grad_W / m
            b = b - eta * eta0_b / eta0 * grad_b / m
            t += m
            if t <= n:
                W_bar, b_bar = W.copy(), b.copy()
            else:
                mu = m / (t - n + m)
                W_bar += mu * (W - W_bar)
                b_bar += mu * (b - b_bar)
    return W_bar, b_bar


def test_streaming_asgd_matches_a_slow_loop():
    X, y = data(n=100, d=12, n_classes=3)
    model = fit_streaming(QuadraticHingeSVC(C=2.0, streaming="sgd"), RowBlocks(X, y, 50), n_epochs=3)
    W, b = reference_asgd(X, y, 2.0, 3, 50, SGD_BATCH_ROWS)
    np.testing.assert_allclose(model.coef_, W, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(model.intercept_, b, rtol=1e-6, atol=1e-9)
    assert model.n_iter_ == 3 * 4 and model.C_ == 2.0


def test_streaming_asgd_approaches_lbfgs():
    X, y = data()
    exact = QuadraticHingeSVC().fit(X, y)
    streamed = fit_streaming(QuadraticHingeSVC(streaming="sgd"), RowBlocks(X, y, 64, seed=0), n_epochs=15)
    assert streamed.C_ == pytest.approx(exact.C_)
    # the objective is close to the optimum's, far below the start's (W = 0: C * n * 1)
    optimum, reached = exact.objective(X, y), streamed.objective(X, y)
    assert optimum <= reached < optimum + 0.1 * (exact.C_ * len(y) * 4 - optimum)
    assert np.mean(streamed.predict(X) == exact.predict(X)) > 0.9


def test_partial_fit_errors():
    X, y = data(n=40)
    with pytest.raises(ValueError, match="n_samples"):
        QuadraticHingeSVC().partial_fit(X, y, classes=np.unique(y), n_samples=0)
    alone = QuadraticHingeSVC().partial_fit(X, y, classes=np.unique(y))  # one block = one epoch
    assert alone._sgd_state["n"] == 40 and alone.coef_.shape == (4, X.shape[1])
    with pytest.raises(ValueError, match="classes must be passed"):
        QuadraticHingeSVC().partial_fit(X, y, n_samples=40)
    with pytest.raises(ValueError, match="balanced"):
        QuadraticHingeSVC(class_weight="balanced").partial_fit(X, y, classes=np.unique(y), n_samples=40)
    model = QuadraticHingeSVC().partial_fit(X, y, classes=np.unique(y), n_samples=40)
    with pytest.raises(ValueError, match="not in classes"):
        model.partial_fit(X, y + 10)


def test_problem_groups_give_the_joint_model_within_tolerance():
    X, y = data()
    make = lambda: QuadraticHingeSVC(tol=1e-9, max_iter=5000)  # noqa: E731
    joint = make().fit(X, y)
    groups = [make().fit_problem_group(X, y, 0, 1), make().fit_problem_group(X, y, 1, 4)]
    merged = merge_problem_groups(groups)
    np.testing.assert_allclose(merged.coef_, joint.coef_, rtol=1e-4, atol=1e-5 * np.abs(joint.coef_).max())
    np.testing.assert_allclose(merged.intercept_, joint.intercept_, atol=1e-4)
    assert merged.objective_ == pytest.approx(joint.objective_, rel=1e-6)
    np.testing.assert_array_equal(merged.predict(X), joint.predict(X))


def test_cli_streams_linear_from_product_quantised_shards(tmp_path, monkeypatch):
    from classify_images.pipeline.extraction.build import build_feature_set

    from ._encoder_helpers import small_config
    from .conftest import FIXTURE_IMAGES
    from .test_compressed_rows import FISHER

    build_feature_set(
        FIXTURE_IMAGES,
        tmp_path / "fs",
        small_config(**FISHER),
        cache_dir=None,
        store="sharded",
        batch_size=5,
        rows="pq8",
    )
    feature_set = load_feature_set(tmp_path / "fs")
    decoded_test = feature_set.rows["test"].toarray()

    def refuse(self):
        raise AssertionError("the sharded training rows were assembled")

    monkeypatch.setattr(ShardedRows, "toarray", refuse)
    out = tmp_path / "linear.npz"
    assert (
        main(
            [
                "train",
                str(tmp_path / "fs"),
                "--classifier",
                "linear",
                "--param",
                "n_epochs=20",
                "--param",
                "streaming=sgd",
                "--streaming",
                "--block-rows",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    model, _ = load_model(out)
    names = np.asarray(feature_set.class_names)
    assert np.mean(model.predict(decoded_test) == names[feature_set.y_test]) > 0.5


# ------------------------------------------------------------- L-BFGS block by block
def test_the_blockwise_objective_is_the_whole_objective():
    """Objective (1) and gradient (2) summed over blocks equal the ones on all the rows (float64)."""
    from classify_images.classifiers._quadratic_hinge_objective import (
        BlockwiseQuadraticHingeObjective,
        QuadraticHingeObjective,
    )
    from classify_images.classifiers.base import ovr_targets

    X, y = data(n=90, d=10, n_classes=3)
    X = X.astype(np.float64)
    Y = ovr_targets(y, 3).astype(np.float64)
    cost = np.random.default_rng(1).uniform(0.5, 2.0, size=Y.shape)
    whole = QuadraticHingeObjective(X, Y, cost, intercept_penalty=0.3)
    blocks = [(X[i : i + 25], np.arange(i, min(i + 25, 90))) for i in range(0, 90, 25)]
    parts = BlockwiseQuadraticHingeObjective(
        blocks,
        lambda Xb, rows: (Xb, Y[rows], cost[rows]),
        n_samples=90,
        n_features=10,
        n_problems=3,
        float32=False,
        intercept_penalty=0.3,
    )
    rng = np.random.default_rng(2)
    for _ in range(3):
        W, b = rng.normal(size=(10, 3)), rng.normal(size=3)
        expected, got = whole.value_and_grad(W, b), parts.value_and_grad(W, b)
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["float64", "float32", "csr"])
@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_fit_blocks_is_fit_within_tolerance(kind, class_weight):
    X, y = data(n=150, d=20, n_classes=4)
    X = {"float64": X, "float32": X.astype(np.float32), "csr": sp.csr_matrix(np.maximum(X, 0))}[kind]
    make = lambda: QuadraticHingeSVC(class_weight=class_weight, solver="features", tol=1e-8, max_iter=5000)  # noqa: E731
    whole = make().fit(X, y)
    blocks = RowBlocks(X, y, 40, seed=0)
    streamed = fit_streaming(make(), blocks)  # streaming="lbfgs", the default
    assert streamed.C_ == pytest.approx(whole.C_)
    np.testing.assert_array_equal(streamed.classes_, whole.classes_)
    scale = np.abs(whole.coef_).max()
    np.testing.assert_allclose(streamed.coef_, whole.coef_, atol=1e-4 * scale)
    np.testing.assert_allclose(
        streamed.intercept_, whole.intercept_, atol=1e-4 * max(1.0, np.abs(whole.intercept_).max())
    )
    assert streamed.objective_ == pytest.approx(whole.objective_, rel=1e-6)
    np.testing.assert_array_equal(streamed.predict(X), whole.predict(X))


def test_fit_blocks_errors():
    X, y = data(n=40)
    with pytest.raises(ValueError, match="not in classes"):
        QuadraticHingeSVC().fit_blocks([(X, y)], classes=np.unique(y)[:2])
    with pytest.raises(ValueError, match="no training row"):
        QuadraticHingeSVC().fit_blocks([])


def test_cli_streams_linear_by_lbfgs_to_the_in_memory_model(tmp_path, monkeypatch):
    """``train --streaming`` of the linear SVM (L-BFGS block by block, the default) from float16
    shards, never assembling them, gives the model ``fit`` learns on the decoded rows."""
    from classify_images.pipeline.extraction.build import build_feature_set

    from ._encoder_helpers import small_config
    from .conftest import FIXTURE_IMAGES
    from .test_compressed_rows import FISHER

    build_feature_set(
        FIXTURE_IMAGES,
        tmp_path / "fs",
        small_config(**FISHER),
        cache_dir=None,
        store="sharded",
        batch_size=5,
        rows="float16",
    )
    feature_set = load_feature_set(tmp_path / "fs")
    decoded_train, decoded_test = feature_set.rows["train"].toarray(), feature_set.rows["test"].toarray()
    names = np.asarray(feature_set.class_names)
    in_memory = QuadraticHingeSVC(solver="features").fit(decoded_train, names[feature_set.y_train])

    def refuse(self):
        raise AssertionError("the sharded training rows were assembled")

    monkeypatch.setattr(ShardedRows, "toarray", refuse)
    out = tmp_path / "linear.npz"
    assert (
        main(
            [
                "train",
                str(tmp_path / "fs"),
                "--classifier",
                "linear",
                "--streaming",
                "--block-rows",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    model, _ = load_model(out)
    np.testing.assert_array_equal(model.predict(decoded_test), in_memory.predict(decoded_test))
    np.testing.assert_allclose(model.coef_, in_memory.coef_, atol=1e-3 * np.abs(in_memory.coef_).max())
