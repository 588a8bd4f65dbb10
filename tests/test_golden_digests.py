"""Nothing that the pipeline computes changes unnoticed: feature sets, the features of new
images and every classifier's trained model are compared, bit for bit, with the digests that
``tests/_digests.py`` recorded in ``tests/data/golden_digests.json``.

A change that is meant to alter the numbers bumps the owning module's
``IMPLEMENTATION_VERSION`` and records the digests anew (``python -m tests._digests --write``
and ``--write-real DATASETS``), saying so in its commit.  The digests are of float arrays
computed with the BLAS, numba and OpenCV of the machine that recorded them; on a processor
or library build that rounds differently they may differ in the last bits, and this test
says so (it does not hide it).
"""

from __future__ import annotations

import json

import pytest

from ._digests import FIXTURE_CONFIGS, FIXTURE_IMAGES, GOLDEN, compute_digests, real_configs


@pytest.mark.parametrize("name", sorted(FIXTURE_CONFIGS))
def test_fixture_digests_unchanged(tmp_path, name):
    expected = json.loads(GOLDEN.read_text())["fixture"][name]
    got = compute_digests(FIXTURE_IMAGES, {name: FIXTURE_CONFIGS[name]}, tmp_path)[name]
    assert got["features"] == expected["features"], f"feature set of config {name} changed"
    assert got["new_images"] == expected["new_images"], f"features of new images (predict) changed for {name}"
    assert got["models"] == expected["models"], f"trained models changed on config {name}"


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["scspm", "bof-spm"])
def test_caltech_mini_digests_unchanged(tmp_path, caltech_mini, name):
    expected = json.loads(GOLDEN.read_text())["caltech101-mini"][name]
    got = compute_digests(caltech_mini, {name: real_configs()[name]}, tmp_path)[name]
    assert got == expected
