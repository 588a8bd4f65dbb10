"""Tests of the real-setting rows of studies/ablate_features.py (issue 11): their overrides,
their baselines, the ``nsvm-m<margin>`` cell and the paired differences of ``--table``."""

from __future__ import annotations

import ablate_features as A
import bench_config_table as table
import numpy as np
import pytest

from classify_images.classifiers.hik_nsvm import HIKnSVM
from classify_images.features.preprocess import resize_max_side
from classify_images.pipeline.settings.config import load_config

nsvm_margin = table.nsvm_margin


def test_merged_overrides_combines_tables_and_later_keys_win():
    first = {"sift": {"step": 3, "smoothing": "phow"}}
    second = {"sift": {"step": 6}, "pooling": {"level_normalization": "l1"}}
    merged = A.merged_overrides(first, second)
    assert merged == {"sift": {"step": 6, "smoothing": "phow"}, "pooling": {"level_normalization": "l1"}}
    assert first == {"sift": {"step": 3, "smoothing": "phow"}}  # inputs untouched


def test_every_real_row_is_a_valid_configuration():
    for name, overrides in A.REAL_ROWS.items():
        config = load_config("hik-nsvm", overrides)
        assert config.sift.step == 3, name


def test_step3_rows_change_what_they_say():
    base = load_config("hik-nsvm")
    sample = load_config("hik-nsvm", A.REAL_ROWS["5e5 samples"])
    original = load_config("hik-nsvm", A.REAL_ROWS["5e5 samples, original image size"])
    phow = load_config("hik-nsvm", A.REAL_ROWS["5e5 samples, original image size, vl_phow dense SIFT"])
    faithful = load_config(
        "hik-nsvm", A.REAL_ROWS["5e5 samples, original image size, vl_phow dense SIFT, per-level L1"]
    )
    assert sample.codebook.n_samples == 500_000 and sample.image == base.image and sample.sift == base.sift
    assert original.image.max_side > base.image.max_side and original.sift == base.sift
    assert original.codebook == sample.codebook
    assert phow.image == original.image and phow.codebook == original.codebook and phow.pooling == base.pooling
    assert (
        phow.sift.smoothing,
        phow.sift.window_size,
        phow.sift.bin_centres,
        phow.sift.grid_alignment,
        phow.sift.low_contrast,
    ) == ("phow", 1.5, "integer", "centre", "zero")
    assert faithful.sift == phow.sift and faithful.pooling.level_normalization == "l1"


def test_original_size_cap_never_shrinks_a_scene15_sized_image():
    image = np.zeros((392, 260), dtype=np.float32)  # 15-Scenes' largest side is 392 px
    assert resize_max_side(image, A.ORIGINAL_IMAGE_SIZE["image"]["max_side"]).shape == (392, 260)


def test_baselines_differ_from_their_row_only_on_the_descriptor_side():
    assert A.REAL_BASELINES
    for name, baselines in A.REAL_BASELINES.items():
        row = load_config("hik-nsvm", A.REAL_ROWS[name])
        for baseline in baselines:
            assert baseline in A.REAL_ROWS, (name, baseline)
            other = load_config("hik-nsvm", A.REAL_ROWS[baseline])
            assert other.pooling == row.pooling and other.normalization == row.normalization, (name, baseline)
            assert other != row


def _cell(accuracies, seeds=(0, 1, 2)):
    return {
        "runs": [{"seed": s, "accuracy": a} for s, a in zip(seeds, accuracies)],
        "mean": 100 * float(np.mean(accuracies)),
        "std": 100 * float(np.std(accuracies, ddof=1)),
        "train_seconds": 1.0,
    }


def test_paired_difference_by_split():
    mean, std = A.paired_difference(_cell([0.82, 0.83, 0.81]), _cell([0.80, 0.80, 0.80]))
    assert mean == pytest.approx(2.0)
    assert std == pytest.approx(1.0)
    with pytest.raises(ValueError, match="splits"):
        A.paired_difference(_cell([0.8, 0.8, 0.8]), _cell([0.8, 0.8, 0.8], seeds=(0, 1, 3)))


def test_table_pairs_each_row_with_its_baselines(capsys):
    base, original = "5e5 samples", "5e5 samples, original image size"
    phow = "5e5 samples, original image size, vl_phow dense SIFT"
    results = {
        "real rows": {
            base: {"cells": {"nsvm": _cell([0.80, 0.81, 0.82])}},
            original: {"cells": {"nsvm": _cell([0.81, 0.81, 0.83])}},
            phow: {"cells": {"nsvm": _cell([0.83, 0.84, 0.84]), "pmsvm-hi": _cell([0.8, 0.8, 0.8])}},
        }
    }
    A.print_real_table(results)
    lines = {
        line.split(" | ")[0].lstrip("| ") + "/" + line.split(" | ")[1]: line
        for line in capsys.readouterr().out.splitlines()[2:]
    }
    assert "| — |" in lines[f"{base}/nsvm"]
    assert f"+0.67 ± 0.58 vs {base} |" in lines[f"{original}/nsvm"]
    assert f"+2.67 ± 0.58 vs {base}; +2.00 ± 1.00 vs {original} |" in lines[f"{phow}/nsvm"]
    assert "| — |" in lines[f"{phow}/pmsvm-hi"]  # no baseline cell for that classifier


def test_nsvm_margin_cell_names():
    A.check_real_classifiers(["nsvm", "nsvm-m0.02", "pmsvm-hi", "linear"])
    for bad in ("nsvm-mauto", "nsvm-m", "svm"):
        with pytest.raises(SystemExit, match="--classifiers: unknown cell"):
            A.check_real_classifiers([bad])


def test_nsvm_margin_swaps_only_the_nsvm_cell_and_restores_it():
    default = table._estimator
    with nsvm_margin(0.02):
        assert isinstance(table._estimator("nsvm"), HIKnSVM) and table._estimator("nsvm").margin == 0.02
        assert table._estimator("pmsvm-hi").get_params() == default("pmsvm-hi").get_params()
    assert table._estimator is default
    with pytest.raises(RuntimeError), nsvm_margin(0.5):
        raise RuntimeError
    assert table._estimator is default
