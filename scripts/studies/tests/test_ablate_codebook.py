"""studies/ablate_codebook.py (issue 11): encoding a feature set's images with an external
codebook, the k-means objective, the scikit-learn iteration record, and (marker ``vlfeat``)
VLFeat's k-means on the same sample.  Small fixture images only."""

from __future__ import annotations

import json
from pathlib import Path

import ablate_codebook as ablate
import numpy as np
import pytest

from classify_images.coding.pooling import pyramid_grids
from classify_images.pipeline.storage.feature_store import load_feature_set
from tests.conftest import build_fixture_feature_set


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """A small feature set (average pooling 1x1 + 2x2, L1 of the whole vector) and its stage cache."""
    root = tmp_path_factory.mktemp("ablate-codebook")
    return build_fixture_feature_set(root), root / "cache"


def _stored(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    fs = load_feature_set(folder)
    return np.concatenate([fs.X_train, fs.X_test]), np.concatenate([fs.y_train, fs.y_test])


def _rows(reference, out: Path, pooling: str, *options: str) -> tuple[np.ndarray, np.ndarray]:
    """The script's ``rows`` of the reference feature set (``X``, ``y``)."""
    folder, cache = reference
    assert (
        ablate.main(
            [
                "rows",
                "--reference",
                str(folder),
                "--cache-dir",
                str(cache),
                "--pooling",
                pooling,
                *options,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return np.load(out / "X.npy"), np.load(out / "y.npy")


def test_rows_with_the_references_codebook_are_its_stored_rows(reference, tmp_path):
    X, y = _rows(reference, tmp_path / "rows", "whole-l1")
    X_ref, y_ref = _stored(reference[0])
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)


def test_an_injected_codebook_is_the_one_used(reference, tmp_path):
    """The reference's words in another order: every cell's histogram is permuted the same way,
    and the codes are computed anew (keyed by the new codebook's digest), not read back stale."""
    folder = reference[0]
    codebook = load_feature_set(folder).codebook()
    order = np.random.default_rng(0).permutation(codebook.shape[0])
    np.save(tmp_path / "permuted.npy", codebook[order])
    X, _ = _rows(reference, tmp_path / "rows", "whole-l1", "--codebook", str(tmp_path / "permuted.npy"))
    X_ref, _ = _stored(folder)
    K = codebook.shape[0]
    n_cells = X.shape[1] // K
    # word j of the permuted codebook is word order[j] of the reference
    expected = X_ref.reshape(len(X_ref), n_cells, K)[:, :, order].reshape(X_ref.shape)
    assert not np.array_equal(X, X_ref)
    np.testing.assert_allclose(X, expected, rtol=1e-6, atol=1e-9)
    info = json.loads((tmp_path / "rows" / "rows.json").read_text())
    assert info["codebook_digest"] != load_feature_set(folder).manifest["codebook"]["digest"]


def test_faithful_pooling_is_every_level_l1_normalised(reference, tmp_path):
    """The slow reference: cut the whole-L1 row into its levels, L1 each, then L1 the whole."""
    folder = reference[0]
    X, _ = _rows(reference, tmp_path / "rows", "faithful")
    X_ref, _ = _stored(folder)
    K = load_feature_set(folder).codebook().shape[0]
    levels = load_feature_set(folder).manifest["config"]["pooling"]["levels"]
    for row, whole in zip(X, X_ref):
        blocks, start = [], 0
        for rows, cols in pyramid_grids(levels):
            block = whole[start : start + rows * cols * K].astype(np.float64)
            start += rows * cols * K
            blocks.append(block / block.sum())
        expected = np.concatenate(blocks)
        np.testing.assert_allclose(row, expected / expected.sum(), rtol=1e-5, atol=1e-8)


def test_kmeans_objective_is_the_mean_squared_distance_to_the_nearest_centre():
    rng = np.random.default_rng(1)
    X = rng.random((300, 5)).astype(np.float32)
    C = rng.random((7, 5)).astype(np.float32)
    distances = ((X[:, None, :].astype(np.float64) - C[None].astype(np.float64)) ** 2).sum(-1)
    brute = distances.min(axis=1).mean()
    assert ablate.kmeans_objective(X, C) == pytest.approx(brute, rel=1e-9)


def test_one_lloyd_step_against_a_loop_and_at_a_fixed_point():
    rng = np.random.default_rng(2)
    X = rng.random((400, 4)).astype(np.float32)
    C = X[:6].copy()
    step = ablate.lloyd_step(X, C)
    # the slow way: nearest centre by brute force, then each centre to the mean of its points
    nearest = ((X[:, None, :] - C[None]) ** 2).sum(-1).argmin(axis=1)
    moved = np.array([X[nearest == k].mean(axis=0) for k in range(6)], dtype=np.float32)
    assert step["objective_after_one_step"] == pytest.approx(ablate.kmeans_objective(X, moved), rel=1e-6)
    assert step["relative_decrease"] > 0 and step["empty_words"] == 0
    moved_nearest = ((X[:, None, :] - moved[None]) ** 2).sum(-1).argmin(axis=1)
    assert step["reassigned_share"] == pytest.approx(np.mean(moved_nearest != nearest))
    converged, _ = ablate.learn_sklearn(X, 6, 0, 300, 0.0)
    at_fixed_point = ablate.lloyd_step(X, converged)
    assert at_fixed_point["reassigned_share"] == 0.0
    assert abs(at_fixed_point["relative_decrease"]) < 1e-6


def test_learn_records_iterations_and_the_tol0_continuation_does_not_raise_the_objective(reference, tmp_path):
    folder, cache = reference
    out = tmp_path / "learn"
    assert (
        ablate.main(
            [
                "learn",
                "--reference",
                str(folder),
                "--cache-dir",
                str(cache),
                "--method",
                "sklearn",
                "--continue-to",
                "100",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads((out / "record.json").read_text())
    first = record["codebooks"]["codebook"]
    # the same sample and k-means as the build: the reference's own codebook, bit for bit
    assert first["max_abs_diff_to_reference_codebook"] == 0.0
    assert 1 <= first["n_iter"] <= load_feature_set(folder).config.codebook.n_iter
    np.testing.assert_array_equal(np.load(out / "codebook.npy"), load_feature_set(folder).codebook())
    if "codebook-tol0" in record["codebooks"]:  # only when tol=1e-4 stopped before 100 iterations
        more = record["codebooks"]["codebook-tol0"]
        assert more["n_iter"] > first["n_iter"]
        assert more["objective"] <= first["objective"] * (1 + 1e-6)  # Lloyd never raises the energy


def test_evaluate_against_itself_gives_zero_paired_differences(tmp_path):
    rng = np.random.default_rng(0)
    n_classes, per_class, d = 3, 110, 12
    y = np.repeat(np.arange(n_classes), per_class)
    X = rng.random((y.size, d)).astype(np.float32) + np.eye(n_classes, d, dtype=np.float32)[y] * 0.5
    X /= X.sum(axis=1, keepdims=True)
    rows = tmp_path / "rows"
    rows.mkdir()
    np.save(rows / "X.npy", X)
    np.save(rows / "y.npy", y)
    first = tmp_path / "first.json"
    assert ablate.main(["evaluate", "--rows", str(rows), "--repeats", "2", "--out", str(first)]) == 0
    assert (
        ablate.main(
            [
                "evaluate",
                "--rows",
                str(rows),
                "--repeats",
                "2",
                "--reference-result",
                str(first),
                "--out",
                str(tmp_path / "second.json"),
            ]
        )
        == 0
    )
    second = json.loads((tmp_path / "second.json").read_text())["cells"]
    assert set(second) == {name for name, *_ in ablate.CELLS}
    for cell in second.values():
        assert cell["diffs"] == [0.0, 0.0]
        assert 50.0 < cell["mean"] <= 100.0  # separable classes: far above chance (33 %)


def test_bad_folders_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        ablate.main(["rows", "--reference", str(tmp_path), "--pooling", "faithful", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "no manifest.json there" in capsys.readouterr().err


@pytest.mark.vlfeat
def test_vlfeat_kmeans_on_the_same_sample_reaches_a_comparable_objective():
    """VLFeat (phow recipe: Elkan, 50 iterations, k-means++) reaches a Lloyd fixed point:
    scikit-learn's Lloyd iterations started from VLFeat's centres leave them where they are.
    (The two libraries' k-means++ draws differ, so their local minima may differ: the
    objectives are compared in BENCHMARKS.md, not here.)"""
    rng = np.random.default_rng(0)
    centres = rng.random((20, 16)).astype(np.float32) * 4
    X = (centres[rng.integers(0, 20, 4000)] + 0.3 * rng.standard_normal((4000, 16))).astype(np.float32)
    vlfeat = ablate.learn_vlfeat(X, 20, "vlfeat-phow")
    assert vlfeat.shape == (20, 16) and vlfeat.dtype == np.float32
    refined, n_iter = ablate.learn_sklearn(X, 20, 0, 100, 0.0, init=vlfeat)
    assert n_iter <= 2
    np.testing.assert_allclose(refined, vlfeat, atol=1e-4)
    assert ablate.kmeans_objective(X, refined) == pytest.approx(ablate.kmeans_objective(X, vlfeat), rel=1e-5)
