"""A light build: what the stage cache keeps per encoder, and the Fisher encoder's one-pass
chunked posteriors against the obvious whole-array computation."""

import os
from pathlib import Path

import numpy as np
import pytest

from classify_images.coding import FisherEncoder
from classify_images.coding import fisher as fisher_module
from classify_images.coding._fisher_kernels import accumulate_posterior_statistics
from classify_images.coding.encoders import encoder_class, encoder_kinds
from classify_images.coding.fisher import gmm_posteriors, pyramid_atoms
from classify_images.coding.normalize import l2_normalize_rows, signed_sqrt
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._encoder_helpers import random_layout, small_config
from .test_fisher import thresholded


def _entries(cache: Path, stage: str) -> int:
    """Stage-cache entries of one stage function (joblib: one folder per call)."""
    return sum(len(subfolders) for folder, subfolders, _ in os.walk(cache) if Path(folder).name == stage)


def test_encoders_whose_item_is_the_row_are_not_cached():
    keeps = {kind: encoder_class(kind).caches_item for kind in encoder_kinds()}
    assert keeps["fisher"] is False and keeps["vlad"] is False
    assert keeps["kmeans"] and keeps["sparse"] and keeps["llc"]


@pytest.mark.parametrize(
    ("codebook", "cached"),
    [
        ({"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30}, False),
        ({"kind": "kmeans", "size": 8, "n_samples": 3000}, True),
    ],
)
def test_the_stage_cache_keeps_an_encoding_only_when_the_encoder_says_so(tmp_path, small_dataset, codebook, cached):
    config = small_config(codebook, {"levels": [1, 2]}, "none" if codebook["kind"] == "fisher" else "l2")
    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache")
    n_rows = result.n_train + result.n_test
    assert _entries(tmp_path / "cache", "image_encoding") == (n_rows if cached else 0)
    # the other stages still are: the checks one entry per group of images, the codebook
    groups = {file_fingerprint(path)[:2] for path in small_dataset.rglob("*") if path.is_file()}
    assert _entries(tmp_path / "cache", "check_image_group") == len(groups) <= result.n_images
    assert _entries(tmp_path / "cache", "check_image") == 0
    assert _entries(tmp_path / "cache", "learn_codebook") == 1


@pytest.mark.parametrize("keep", [False, True])
def test_the_descriptor_sample_is_cached_with_the_descriptors_only(tmp_path, small_dataset, keep):
    """``sift.cache_descriptors = false`` (the Fisher configs): no per-image descriptors and no
    per-image sample in the cache; the codebook is, and a second build reads it (learns nothing)."""
    from classify_images.pipeline.settings.config import validate_config

    raw = small_config(
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30}, {"levels": [1]}, "none"
    ).to_dict()
    raw["sift"]["cache_descriptors"] = keep
    config = validate_config(raw)
    first = build_feature_set(small_dataset, tmp_path / "a", config, cache_dir=tmp_path / "cache")
    assert (_entries(tmp_path / "cache", "descriptor_sample") > 0) is keep
    assert (_entries(tmp_path / "cache", "image_descriptors") > 0) is keep
    assert _entries(tmp_path / "cache", "learn_codebook") == 1
    second = build_feature_set(small_dataset, tmp_path / "b", config, cache_dir=tmp_path / "cache")
    assert _entries(tmp_path / "cache", "learn_codebook") == 1
    a, b = load_feature_set(first.path), load_feature_set(second.path)
    np.testing.assert_array_equal(a.X_train, b.X_train)


def test_grouped_checks_are_the_single_checks_and_are_read_back_whatever_the_paths(tmp_path, small_dataset):
    from classify_images.pipeline.extraction.stages import (
        StageCache,
        check_group_of,
        check_image,
        check_image_group,
        group_checks,
    )

    paths = sorted(str(p) for p in small_dataset.rglob("*") if p.is_file())
    broken = Path(paths[0])
    broken.write_bytes(b"not an image")
    paths_by_fingerprint = {file_fingerprint(p): p for p in paths}
    fingerprints = sorted(paths_by_fingerprint)
    singles = [check_image(paths_by_fingerprint[f], f, 96, 16) for f in fingerprints]
    grouped = group_checks(check_image_group([paths_by_fingerprint[f] for f in fingerprints], fingerprints, 96, 16))
    assert grouped == singles and not grouped[fingerprints.index(file_fingerprint(broken))]["ok"]
    assert all(c["ok"] for f, c in zip(fingerprints, grouped) if f != file_fingerprint(broken))
    # through the cache: one entry per group, keyed by content (a moved dataset keeps it)
    cache = StageCache(tmp_path / "cache")
    group = [f for f in fingerprints if check_group_of(f) == check_group_of(fingerprints[1])]
    first = cache.check_image_group([paths_by_fingerprint[f] for f in group], group, 96, 16)
    assert group_checks(first) == [singles[fingerprints.index(f)] for f in group]
    assert cache.check_image_group.func.check_call_in_cache([], group, 96, 16, **cache.check_image_group.keywords)


def _obvious_fisher(encoder: FisherEncoder, descriptors, cells, n_cells):
    """The improved Fisher vector from the float64 posteriors of every descriptor at once and
    per-cell sums over the descriptors of each cell (no atoms, no chunks, no float32)."""
    x = (np.asarray(descriptors, np.float64) - encoder.pca_mean) @ encoder.pca_components.T
    gamma = thresholded(
        gmm_posteriors(x, encoder.weights, encoder.means, encoder.variances), encoder.posterior_threshold
    )
    K, D = encoder.n_components, encoder.n_dims
    counts, s0, s1, s2 = np.zeros(n_cells), np.zeros((n_cells, K)), np.zeros((n_cells, K, D)), np.zeros((n_cells, K, D))
    for level in cells:
        for cell in np.unique(level):
            members = level == cell
            counts[cell] = members.sum()
            s0[cell] = gamma[members].sum(axis=0)
            s1[cell] = gamma[members].T @ x[members]
            s2[cell] = gamma[members].T @ (x[members] ** 2)
    vectors = encoder._cell_vectors(counts, s0[:, :, None], s1, s2)
    return l2_normalize_rows(l2_normalize_rows(signed_sqrt(vectors)).ravel())


@pytest.mark.parametrize("threshold", [1e-4, 0.0])
def test_chunked_fisher_encoding_equals_the_obvious_computation(monkeypatch, threshold):
    """Tolerance: float32 projection and log-densities against float64 throughout; max
    |difference| ≤ 2e-5 on unit vectors whose typical entry is 1e-2, relative L2 ≤ 1e-4.  Both
    paths: the compiled sparse pass (threshold > 0) and the dense product (threshold 0)."""
    rng = np.random.default_rng(0)
    K, D, P, n = 16, 8, 32, 2600
    weights = rng.random(K) + 0.2
    model = {
        "pca_mean": rng.normal(size=P),
        "pca_components": np.linalg.qr(rng.normal(size=(P, D)))[0].T,
        "weights": weights / weights.sum(),
        "means": rng.normal(size=(K, D)),
        "variances": rng.random((K, D)) + 0.3,
    }
    encoder = FisherEncoder(model, posterior_threshold=threshold)
    descriptors = rng.normal(size=(n, P)) + model["pca_mean"]
    x, y, shape = random_layout(rng, n)
    levels = (1, 2, "3x1")
    cells = pyramid_cells(x, y, shape, levels)
    expected = _obvious_fisher(encoder, descriptors, cells, n_pyramid_cells(levels))
    _, bounds, _ = pyramid_atoms(cells, n_pyramid_cells(levels))
    for chunk in (64, 1000, 100000):  # atoms of ~325 descriptors: several chunks each, one, and all
        monkeypatch.setattr(fisher_module, "POSTERIOR_CHUNK", chunk)
        got = encoder.encode(descriptors, cells, n_pyramid_cells(levels))
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert np.abs(got - expected).max() <= 2e-5
        assert np.linalg.norm(got - expected) <= 1e-4 * np.linalg.norm(expected)
    assert np.diff(bounds).max() > 64


def _obvious_posterior_statistics(log_joint, moments, threshold):
    """sum_i gamma_ik [x_i, x_i^2, 1] with the posteriors of each row from its log-joint densities,
    those below ``threshold`` times the row's largest 0 and the rest renormalised (float64)."""
    gamma = np.exp(log_joint.astype(np.float64) - log_joint.max(axis=1, keepdims=True))
    return thresholded(gamma, threshold).T @ moments.astype(np.float64)


@pytest.mark.parametrize("threshold", [1e-4, 1e-3])
def test_compiled_posterior_statistics_equal_the_obvious_sums(threshold):
    """The compiled sparse pass (adding to what the statistics hold) = the dense NumPy formula,
    to float64 rounding; most posteriors are cut, and every row keeps its largest."""
    rng = np.random.default_rng(1)
    log_joint = (rng.normal(size=(300, 64)) * 6.0).astype(np.float32)
    log_joint[5] = -1e30  # far from every component: the largest entry still gives posterior 1
    log_joint[6, :] = 2.0  # every component equally likely: all kept, 1/64 each
    moments = rng.normal(size=(300, 17)).astype(np.float32)
    start = rng.normal(size=(64, 17))
    statistics = start.copy()
    accumulate_posterior_statistics(log_joint, moments, np.float32(np.log(threshold)), statistics)
    expected = start + _obvious_posterior_statistics(log_joint, moments, threshold)
    np.testing.assert_allclose(statistics, expected, rtol=1e-9, atol=1e-9)
    kept = (log_joint.astype(np.float64) - log_joint.max(axis=1, keepdims=True)) >= np.log(threshold)
    assert 1.0 < kept.sum(axis=1).mean() < 32  # the cut drops most entries, not all
    every = start + _obvious_posterior_statistics(log_joint, moments, 0.0)
    assert np.abs(every - expected).max() > 1e-6  # and it changes the sums


FISHER = {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30}


def test_float16_rows_and_mirrors_in_the_npy_layout(tmp_path, small_dataset):
    """``rows="float16"`` stores float16 rows (and mirrors) in the npy layout, read back as float32
    within float16's rounding (relative 2^-11) of the float32 build's rows."""
    from classify_images.pipeline.extraction.augment import rows_and_mirrors
    from classify_images.pipeline.settings.config import validate_config
    from classify_images.pipeline.storage.feature_store import load_feature_set

    raw = small_config(FISHER, {"levels": [1, "3x1"]}, "none").to_dict()
    raw["augment"] = {"flip_train": True, "flip_test": "average"}
    config = validate_config(raw)
    light = build_feature_set(small_dataset, tmp_path / "light", config, cache_dir=tmp_path / "cache", rows="float16")
    exact = build_feature_set(small_dataset, tmp_path / "exact", config, cache_dir=tmp_path / "cache", rows="float32")
    for name in ("X_train", "X_test", "X_train_flip", "X_test_flip"):
        assert np.load(tmp_path / "light" / f"{name}.npy", mmap_mode="r").dtype == np.float16
        assert np.load(tmp_path / "exact" / f"{name}.npy", mmap_mode="r").dtype == np.float32
    fs, reference = load_feature_set(light.path), load_feature_set(exact.path)
    assert fs.row_encoding == "float16" and reference.row_encoding == "float32" and fs.layout == "npy"
    for split in ("train", "test"):
        got, want = fs._dense(split), reference._dense(split)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2.0**-11, atol=6e-8)  # float16: 11 significant bits
        np.testing.assert_allclose(
            np.asarray(fs.mirrors(split), np.float32), reference.mirrors(split), rtol=2.0**-11, atol=6e-8
        )
    blocks = [block for block, _ in fs.iter_row_blocks("test", 2)]
    assert all(block.dtype == np.float32 for block in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks), fs.X_test)
    both = rows_and_mirrors(fs, np.arange(len(fs.y_train)))
    assert both.dtype == np.float32 and both.shape == (2 * len(fs.y_train), fs.n_features)
    np.testing.assert_array_equal(both[: len(fs.y_train)], fs.X_train)
    again = build_feature_set(small_dataset, tmp_path / "light", config, cache_dir=tmp_path / "cache", rows="float16")
    assert again.reused  # the float16 set is up to date
    default = build_feature_set(small_dataset, tmp_path / "light", config, cache_dir=tmp_path / "cache")
    assert not default.reused  # the default (int8) is another set
    assert load_feature_set(default.path).row_encoding == "int8"
    assert np.load(tmp_path / "light" / "X_test_flip.npy", mmap_mode="r").dtype == np.uint8
    assert build_feature_set(small_dataset, tmp_path / "light", config, cache_dir=tmp_path / "cache").reused


def test_a_manifest_announcing_another_row_dtype_is_one_line(tmp_path, small_dataset):
    import json

    from classify_images.pipeline.storage.feature_store import FeatureSetError, load_feature_set

    build_feature_set(small_dataset, tmp_path / "fs", small_config(FISHER, {"levels": [1]}, "none"), cache_dir=None)
    manifest = json.loads((tmp_path / "fs" / "manifest.json").read_text())
    assert manifest["rows"] == "int8"  # the default for Fisher vectors
    for value, message in (
        ("float32", r"X_train.npy is uint8 \(\d+, 88\), the manifest announces float32 \(\d+, 64\)"),
        ("int4", r"X_train.npy is uint8 \(\d+, 88\), the manifest announces uint8 \(\d+, 36\)"),
        ("pq8", "'rows' must be one of"),
    ):
        (tmp_path / "fs" / "manifest.json").write_text(json.dumps({**manifest, "rows": value}))
        with pytest.raises(FeatureSetError, match=message):
            load_feature_set(tmp_path / "fs")


def test_a_build_that_cannot_fit_the_disk_stops_before_encoding_in_one_line(tmp_path, small_dataset, monkeypatch):
    from collections import namedtuple

    from classify_images.pipeline.storage import room
    from classify_images.pipeline.storage.room import NotEnoughRoomError, feature_set_bytes, human_bytes

    assert feature_set_bytes(10, 262144, "float16", mirrors=True) == 10 * 2 * 2 * 262144
    assert feature_set_bytes(10, 262144, "pq8", mirrors=False) == 10 * 262144 // 8
    assert human_bytes(4.7e9) == "4.7 GB"
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(room.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 5000, 5000))
    config = small_config(FISHER, {"levels": [1]}, "none")
    with pytest.raises(NotEnoughRoomError, match=r"needs .* of disk and .* has 5.0 kB free"):
        build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=None)
    assert not (tmp_path / "fs").exists()


def test_packed_rows_short_of_their_slots_are_built_until_the_rows_written_project_past_the_free_disk(
    tmp_path, small_dataset, monkeypatch, caplog
):
    """Packed 8-bit rows take what their codes need: a disk with less than the slots is not refused
    before the encoding (a warning says so), and the build stops in one line once the rows
    written, projected to all the rows, need more than is free."""
    from collections import namedtuple

    from classify_images.pipeline.extraction import build_steps
    from classify_images.pipeline.storage import room
    from classify_images.pipeline.storage.room import DISK_MARGIN, NotEnoughRoomError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(room.shutil, "disk_usage", lambda path: usage(10**12, 0, DISK_MARGIN + 1))
    monkeypatch.setattr(build_steps, "DISK_CHECK_EVERY", 1)
    config = small_config(FISHER, {"levels": [1]}, "none")
    with (
        caplog.at_level("WARNING"),
        pytest.raises(
            NotEnoughRoomError,
            match=r"fs: the feature set's \d+ rows \(64 dims, int8\) need about .* of disk at the [0-9.]+ bits a value "
            r"of the first 1 rows: .* more and 67.1 MB to spare, and .* has 67.1 MB free: free some space",
        ),
    ):
        build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=None)
    assert "take up to" in caplog.text and "checked again as the rows are written" in caplog.text
    assert not (tmp_path / "fs").exists() and not list(tmp_path.glob(".fs.*"))
    # Room for the projection: the same build completes.
    monkeypatch.setattr(room.shutil, "disk_usage", lambda path: usage(10**12, 0, 10**10))
    build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=None)
    assert len(load_feature_set(tmp_path / "fs").y_train) > 0


def test_written_rows_watch_projects_the_blocks_written_to_all_the_rows(tmp_path, monkeypatch):
    """The projection is the file's occupied blocks times rows / rows written; the build stops
    when the rest plus the margin exceeds the free disk, not before."""
    from collections import namedtuple

    from classify_images.pipeline.storage import room
    from classify_images.pipeline.storage.room import DISK_MARGIN, NotEnoughRoomError, WrittenRowsWatch

    path = tmp_path / "rows.npy"
    with open(path, "wb") as handle:
        handle.truncate(1 << 20)  # a slot file; only the rows written take blocks
        os.pwrite(handle.fileno(), b"\x01" * 8192, 0)
    written = os.stat(path).st_blocks * 512
    assert written > 0
    usage = namedtuple("usage", "total used free")
    watch = WrittenRowsWatch(tmp_path / "fs", [path], n_rows=10, n_features=1024, what="the rows")
    monkeypatch.setattr(room.shutil, "disk_usage", lambda p: usage(10**12, 0, DISK_MARGIN + 4 * written))
    watch.check(2)  # 10 / 2 x written in all: 4 x written more, exactly what is free
    watch.check(0)  # nothing written: nothing to project
    monkeypatch.setattr(room.shutil, "disk_usage", lambda p: usage(10**12, 0, DISK_MARGIN + 4 * written - 1))
    with pytest.raises(
        NotEnoughRoomError, match=r"the rows need about .* at the [0-9.]+ bits a value of the first 2 rows"
    ):
        watch.check(2)


def test_a_build_that_cannot_fit_the_memory_stops_before_encoding_in_one_line(tmp_path, small_dataset, monkeypatch):
    from classify_images.pipeline.storage import room
    from classify_images.pipeline.storage.room import NotEnoughRoomError, build_memory_bytes

    assert build_memory_bytes(2, 262144, 256) == room.PARENT_BYTES + 2 * room.WORKER_BYTES + 258 * 4 * 262144
    monkeypatch.setattr(room, "available_memory", lambda: 100 << 20)
    with pytest.raises(
        NotEnoughRoomError, match=r"with 2 workers on this machine needs about .* of memory and 104.9 MB"
    ):
        build_feature_set(small_dataset, tmp_path / "fs", small_config(FISHER, {"levels": [1]}, "none"), n_jobs=2)
    assert not (tmp_path / "fs").exists()
    monkeypatch.setattr(room, "available_memory", lambda: None)  # unknown: nothing is checked
    build_feature_set(small_dataset, tmp_path / "fs", small_config(FISHER, {"levels": [1]}, "none"))
