"""Tests of benchmarks/bench_distributed_linear.py: the relabelling of a feature set's rows and
the comparison of two linear models."""

from __future__ import annotations

import bench_distributed_linear as bench
import numpy as np
import pytest
from bench_pmsvm_liblinear import subclass_labels


def test_relabelled_cuts_the_pooled_rows_as_the_pmsvm_benchmark(tmp_path):
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from tests.conftest import build_fixture_feature_set

    fs = load_feature_set(build_fixture_feature_set(tmp_path))
    n_classes = 2 * fs.n_classes if hasattr(fs, "n_classes") else 2 * len(fs.class_names)
    y_train, y_test = bench.relabelled(fs, n_classes)
    X_all = np.concatenate([np.asarray(fs.X_train), np.asarray(fs.X_test)])
    expected = subclass_labels(X_all, np.concatenate([fs.y_train, fs.y_test]), n_classes)
    assert np.array_equal(np.concatenate([y_train, y_test]), expected)
    assert len(np.unique(expected)) == n_classes and len(y_train) == len(fs.y_train)


def test_compare_models_measures_the_gap_between_two_solutions():
    from classify_images.classifiers import QuadraticHingeSVC

    rng = np.random.default_rng(1)
    centres = rng.normal(size=(4, 20))
    y = np.arange(200) % 4
    X = (centres[y] + rng.normal(size=(200, 20))).astype(np.float32)
    tight = QuadraticHingeSVC(tol=1e-10).fit(X[:120], y[:120])
    same = bench.compare_models(tight, tight, X[:120], y[:120], X[120:], y[120:])
    assert (
        same["max_abs_dw_relative"] == 0.0
        and same["prediction_agreement"] == 1.0
        and same["objective_gap_relative"] == 0
    )
    loose = QuadraticHingeSVC(tol=1e-1).fit(X[:120], y[:120])
    gap = bench.compare_models(tight, loose, X[:120], y[:120], X[120:], y[120:])
    assert gap["max_abs_dw_relative"] > 1e-6 and gap["objective_gap_relative"] >= -1e-12
    assert gap["accuracy_local"] == pytest.approx(same["accuracy_cluster"])
