"""bench_fisher_encoder's VLFeat comparison on a tiny synthetic problem (marker ``vlfeat``)."""

from __future__ import annotations

import numpy as np
import pytest
from bench_fisher_encoder import _against_vlfeat

from classify_images.coding import FisherEncoder


@pytest.mark.vlfeat
def test_against_vlfeat_times_both_and_they_agree():
    try:
        import cyvlfeat  # noqa: F401
    except ImportError:
        pytest.fail("the vlfeat tests need cyvlfeat built against libvlfeat-dev (see .ci/run)")
    rng = np.random.default_rng(0)
    K, D, P = 4, 3, 6
    model = {
        "pca_mean": rng.normal(size=P),
        "pca_components": np.linalg.qr(rng.normal(size=(P, P)))[0][:D],
        "weights": np.full(K, 1.0 / K),
        "means": rng.normal(size=(K, D)),
        "variances": rng.uniform(0.5, 2, (K, D)),
    }
    images, layouts = [], []
    for _ in range(2):
        n = 200
        images.append((rng.normal(size=(n, P)).astype(np.float32),))
        cells = np.stack([np.zeros(n, dtype=np.int64), 1 + rng.integers(4, size=n), 5 + rng.integers(3, size=n)])
        cells[1, :4], cells[2, :3] = np.arange(1, 5), np.arange(5, 8)  # every cell holds a descriptor
        layouts.append(cells)
    result = _against_vlfeat(FisherEncoder(model), model, images, layouts, repeats=1)
    assert result["one_cell_max_abs_difference"] < 1e-4
    assert set(result["ms_per_image"]) == {
        "ours, one cell",
        "vl_fisher, one cell",
        "ours, pyramid (8 cells)",
        "vl_fisher, pyramid (one call per cell)",
    }
    assert result["ratio_one_cell"] > 0 and result["ratio_pyramid"] > 0
