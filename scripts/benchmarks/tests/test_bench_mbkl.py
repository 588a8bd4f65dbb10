"""bench_mbkl's Step-1 memo (issue 11's gap study) gives the plain MBKL fit."""

from __future__ import annotations

import numpy as np
from bench_mbkl import _Step1Memo

from classify_images.classifiers import MBKL
from tests.test_mbkl_thresholds import _sparse_histograms


def test_bench_step1_memo_gives_the_plain_fit():
    X, y = _sparse_histograms(seed=4, n=150, d=30)
    _Step1Memo._memo.clear()
    _Step1Memo(n_stumps=600, C=1.0, C_kernel=10.0, theta_exponent=0.0, random_state=0).fit(X, y)  # fills the memo
    memo = _Step1Memo(n_stumps=600, C=10.0, C_kernel=10.0, theta_exponent=0.0, random_state=0).fit(X, y)
    assert len(_Step1Memo._memo) == 1  # the second fit reused Steps 0-1
    plain = MBKL(n_stumps=600, C=10.0, C_kernel=10.0, theta_exponent=0.0, random_state=0).fit(X, y)
    for name in MBKL._fitted_arrays:
        np.testing.assert_array_equal(getattr(memo, name), getattr(plain, name))
    _Step1Memo._memo.clear()
