"""Nothing that the pipeline computes changes unnoticed: feature sets, the features of new
images and every classifier's trained model are compared with the values that
``tests/_digests.py`` recorded in ``tests/data/golden_digests.json``.

A change that is meant to alter the numbers bumps the owning module's
``IMPLEMENTATION_VERSION`` and records the values anew (``python -m tests._digests --write``
and ``--write-real DATASETS``), saying so in its commit.  Labels must match exactly and float
arrays within a small relative tolerance of their norm (``tests/_digests.py``): the recorded
values come from one machine's BLAS, numba and OpenCV, and a processor or library build that
rounds differently changes the last bits, not the results.  Whether the arrays were also
bit-identical is printed (``pytest -s -n 0``: in this process, not in xdist workers).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ._digests import (
    FIXTURE_CONFIGS,
    FIXTURE_IMAGES,
    GOLDEN,
    RTOL,
    array_sketch,
    compare_digests,
    compare_sketches,
    compute_digests,
    processor_signature,
    real_configs,
)

#: Mean per-class accuracy a real-data classifier may move by on another processor, where its
#: codebook is another local optimum (20 test images: one image is 5 points).
ACCURACY_TOLERANCE = 0.15


def _check(got: dict, expected: dict, name: str) -> None:
    differences, identical = compare_digests(got, expected)
    assert not differences, f"config {name} changed:\n" + "\n".join(differences)
    print(f"{name}: {'bit-identical' if identical else 'equal within tolerance'} to the recorded values")


@pytest.mark.parametrize("name", sorted(FIXTURE_CONFIGS))
def test_fixture_digests_unchanged(tmp_path, name):
    expected = json.loads(GOLDEN.read_text())["fixture"][name]
    got = compute_digests(FIXTURE_IMAGES, {name: FIXTURE_CONFIGS[name]}, tmp_path)[name]
    _check(got, expected, name)


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["scspm", "bof-spm"])
def test_caltech_mini_digests_unchanged(tmp_path, caltech_mini, name):
    """On the processor kind they were recorded on, every value within rounding.  Elsewhere the
    learnt codebook is another local optimum (``processor_signature``), so only what does not
    depend on it is compared — labels, shapes, accuracies within ``ACCURACY_TOLERANCE`` — and the
    test then reports itself skipped, naming both processors, rather than passed."""
    golden = json.loads(GOLDEN.read_text())
    expected = golden["caltech101-mini"][name]
    got = compute_digests(caltech_mini, {name: real_configs()[name]}, tmp_path)[name]
    recorded_on, here = golden.get("caltech101-mini-processor"), processor_signature()
    if here == recorded_on:
        _check(got, expected, name)
        return
    for part in ("y_train", "y_test"):
        assert got["features"][part] == expected["features"][part], f"{name}: {part} changed"
    for part in ("X_train", "X_test", "codebook"):
        assert got["features"][part]["shape"] == expected["features"][part]["shape"], f"{name}: {part} shape changed"
    moved = {run: (got["accuracy"][run], accuracy) for run, accuracy in expected["accuracy"].items()
             if abs(got["accuracy"][run] - accuracy) > ACCURACY_TOLERANCE}
    assert not moved, f"{name}: accuracy (got, recorded) moved by more than {ACCURACY_TOLERANCE}: {moved}"
    pytest.skip(f"{name}: values recorded on {recorded_on}, this is {here}: the codebook differs beyond rounding "
                f"there, so only labels, shapes and accuracies (±{ACCURACY_TOLERANCE}) were compared")


def test_sketch_comparison_sees_real_changes_and_tolerates_rounding():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 300)).astype(np.float32)
    recorded = {"a": array_sketch(a), "labels": array_sketch(np.arange(40))}
    rounding = a * np.float32(1 + 1e-6)  # last-bit differences
    assert compare_sketches({"a": array_sketch(rounding), "labels": array_sketch(np.arange(40))}, recorded,
                            RTOL["features"]) == ([], False)
    one_entry = a.copy()
    one_entry[7, 123] += 0.05 * np.abs(a).max()  # one changed value among 12 000
    assert compare_sketches({"a": array_sketch(one_entry), "labels": recorded["labels"]}, recorded, RTOL["features"])[0]
    swapped = np.arange(40)
    swapped[[0, 1]] = swapped[[1, 0]]
    assert compare_sketches({"a": recorded["a"], "labels": array_sketch(swapped)}, recorded, RTOL["features"])[0]
    assert compare_sketches({"a": array_sketch(a[:, :299]), "labels": recorded["labels"]}, recorded, RTOL["features"])[0]
