"""Tests of benchmarks/bench_streaming_linear.py on the fixture feature set."""

from __future__ import annotations

import bench_streaming_linear as bench
import numpy as np
import pytest


@pytest.fixture(scope="module")
def feature_set_path(tmp_path_factory):
    from tests.conftest import build_fixture_feature_set

    return str(build_fixture_feature_set(tmp_path_factory.mktemp("streaming")))


def test_split_blocks_hold_the_split_rows_and_never_the_matrix(feature_set_path):
    from classify_images.pipeline.storage.feature_store import load_feature_set

    fs = load_feature_set(feature_set_path)
    train, test, y_all = bench.split_of(fs, seed=1)
    blocks = bench.SplitBlocks(fs, train, y_all[train], block_rows=4)
    seen = [(X, y) for X, y in blocks]
    assert len(seen) > 1 and max(X.shape[0] for X, _ in seen) < len(train)
    X_all = np.concatenate([X for X, _ in seen])
    expected = fs.pooled_rows(train)
    # same rows (blocks come in storage order): compare as sets of (row, label)
    got = sorted(map(tuple, np.column_stack([X_all, np.concatenate([y for _, y in seen])]).tolist()))
    want = sorted(map(tuple, np.column_stack([expected, y_all[train]]).tolist()))
    assert got == want
    assert sum(1 for _ in blocks) == len(seen)  # re-iterable


def test_streaming_and_memory_give_the_same_model_within_tol(feature_set_path, tmp_path):
    memory = bench.run_one(feature_set_path, "memory", 0, block_rows=4, save=str(tmp_path / "m.npz"))
    streaming = bench.run_one(feature_set_path, "streaming", 0, block_rows=4, save=str(tmp_path / "s.npz"))
    pair = bench.compare_pair(memory, streaming, np.load(tmp_path / "m.npz"), np.load(tmp_path / "s.npz"))
    assert memory["n_train"] == streaming["n_train"] > 0 and memory["C"] == pytest.approx(streaming["C"])
    assert abs(pair["objective_gap_relative"]) < 1e-3
    assert pair["prediction_agreement"] > 0.9 and pair["within_target"] == (abs(pair["difference_points"]) <= 0.3)


def test_blockwise_objective_is_the_estimators_objective():
    from classify_images.classifiers import QuadraticHingeSVC

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 6)), np.arange(40) % 3
    model = QuadraticHingeSVC(C=0.7).fit(X, y)
    blocks = [(X[:15], y[:15]), (X[15:], y[15:])]
    assert bench.blockwise_objective(model, blocks) == pytest.approx(model.objective(X, y), rel=1e-9)


def test_an_unknown_mode_is_refused(feature_set_path):
    with pytest.raises(ValueError, match="mode must be one of"):
        bench.run_one(feature_set_path, "gpu", 0, block_rows=4)


def test_the_script_pairs_the_modes_per_split_and_reuses_what_it_measured(feature_set_path, tmp_path):
    import json
    import subprocess
    import sys

    command = [
        sys.executable,
        bench.__file__,
        feature_set_path,
        "--seeds",
        "0",
        "--block-rows",
        "4",
        "--work",
        str(tmp_path / "work"),
        "--json",
        str(tmp_path / "out.json"),
    ]
    first = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    report = json.loads((tmp_path / "out.json").read_text())
    assert first.startswith("machine: ") and len(report["runs"]) == 2 and len(report["pairs"]) == 1
    assert all(run["peak_rss_mib"] > 0 and run["sampled_peak_rss_mib"] is not None for run in report["runs"])
    again = subprocess.run(command + ["--reuse"], capture_output=True, text=True, check=True).stdout
    assert again.count("reusing") == 2
    assert json.loads((tmp_path / "out.json").read_text())["pairs"] == report["pairs"]
