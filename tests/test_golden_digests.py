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


#: The real-data values computed in this process, by config (both tests below use them).
_CALTECH_DIGESTS: dict[str, dict] = {}


@pytest.fixture
def caltech_digests(caltech_mini, tmp_path_factory):
    """``digests(name)``: the real-data values of a config, computed once per test process."""

    def get(name: str) -> dict:
        if name not in _CALTECH_DIGESTS:
            _CALTECH_DIGESTS[name] = compute_digests(
                caltech_mini, {name: real_configs()[name]}, tmp_path_factory.mktemp(name)
            )[name]
        return _CALTECH_DIGESTS[name]

    return get


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["scspm", "bof-spm"])
def test_caltech_mini_labels_shapes_and_accuracies_unchanged(caltech_digests, name):
    """What does not depend on the learnt codebook, on any processor: the labels exactly, the
    shapes, and each classifier's accuracy within ``ACCURACY_TOLERANCE``."""
    expected = json.loads(GOLDEN.read_text())["caltech101-mini"][name]
    got = caltech_digests(name)
    for part in ("y_train", "y_test"):
        assert got["features"][part] == expected["features"][part], f"{name}: {part} changed"
    for part in ("X_train", "X_test", "codebook"):
        assert got["features"][part]["shape"] == expected["features"][part]["shape"], f"{name}: {part} shape changed"
    moved = {
        run: (got["accuracy"][run], accuracy)
        for run, accuracy in expected["accuracy"].items()
        if abs(got["accuracy"][run] - accuracy) > ACCURACY_TOLERANCE
    }
    assert not moved, f"{name}: accuracy (got, recorded) moved by more than {ACCURACY_TOLERANCE}: {moved}"


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["scspm", "bof-spm"])
def test_caltech_mini_digests_unchanged(caltech_digests, name):
    """Every value within rounding — on a processor kind whose values were recorded
    (``python -m tests._digests --write-real DATASETS`` adds this machine's kind).  On another kind
    the codebook learnt from thousands of real descriptors is another local optimum
    (``processor_signature``): no exact comparison can be made there, and it is reported skipped,
    naming the kinds recorded (the test above still runs)."""
    exact, here = json.loads(GOLDEN.read_text()).get("caltech101-mini-exact", {}), processor_signature()
    if here not in exact:
        pytest.skip(
            f"{name}: exact values recorded on {', '.join(sorted(exact)) or 'no processor'}, this is {here}: "
            "the learnt codebook differs beyond rounding between processor kinds; record this kind with "
            "python -m tests._digests --write-real DATASETS"
        )
    _check(caltech_digests(name), exact[here][name], name)


def test_sketch_comparison_sees_real_changes_and_tolerates_rounding():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 300)).astype(np.float32)
    recorded = {"a": array_sketch(a), "labels": array_sketch(np.arange(40))}
    rounding = a * np.float32(1 + 1e-6)  # last-bit differences
    assert compare_sketches(
        {"a": array_sketch(rounding), "labels": array_sketch(np.arange(40))}, recorded, RTOL["features"]
    ) == ([], False)
    one_entry = a.copy()
    one_entry[7, 123] += 0.05 * np.abs(a).max()  # one changed value among 12 000
    assert compare_sketches({"a": array_sketch(one_entry), "labels": recorded["labels"]}, recorded, RTOL["features"])[0]
    swapped = np.arange(40)
    swapped[[0, 1]] = swapped[[1, 0]]
    assert compare_sketches({"a": recorded["a"], "labels": array_sketch(swapped)}, recorded, RTOL["features"])[0]
    assert compare_sketches({"a": array_sketch(a[:, :299]), "labels": recorded["labels"]}, recorded, RTOL["features"])[
        0
    ]
