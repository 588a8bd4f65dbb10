"""End-to-end feature building on real images: layout, manifest, caching, atomicity, bad input."""

import json
import shutil

import numpy as np
import pytest

from classify_images.coding import encode as encode_module
from classify_images.coding import encoders as encoders_module
from classify_images.pipeline.extraction import stages
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.settings.dataset import DatasetError
from classify_images.pipeline.storage.feature_store import FeatureSetError, load_feature_set

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG


def _config(**changes):
    raw = json.loads(json.dumps(SMALL_CONFIG))
    for dotted, value in changes.items():
        table, key = dotted.split("__")
        raw.setdefault(table, {})[key] = value
    return validate_config(raw)


def test_build_layout_and_manifest(tmp_path):
    dataset = tmp_path / "data"
    shutil.copytree(FIXTURE_IMAGES, dataset)
    shutil.copytree(FIXTURE_IMAGES / "china", dataset / "BACKGROUND_Google")  # Caltech-101's clutter class
    out = tmp_path / "fs"
    result = build_feature_set(dataset, out, _config(), cache_dir=tmp_path / "cache")
    fs = load_feature_set(out)
    assert fs.class_names == ["china", "digit_0", "digit_1", "flower"]  # background excluded
    assert result.n_train == 20 and result.n_test == 20 and result.n_skipped == 0
    assert fs.X_train.shape == (20, 16 * 5) and fs.X_train.dtype == np.float32
    assert isinstance(fs.X_train, np.memmap)
    np.testing.assert_allclose(np.asarray(fs.X_train).sum(1), 1.0, rtol=1e-5)  # l1 histograms
    assert np.bincount(fs.y_train).tolist() == [5, 5, 5, 5]
    split = fs.manifest["split"]
    assert len(split["train"]) == 20 and not set(split["train"]) & set(split["test"])
    assert fs.codebook().shape == (16, 128)
    assert set(fs.manifest["timings"]) >= {"check", "codebook", "encode+pool"}


def test_rebuild_is_cached_and_pooling_change_reuses_codes(tmp_path, small_dataset, monkeypatch):
    cache = tmp_path / "cache"
    out = tmp_path / "fs"
    first = build_feature_set(small_dataset, out, _config(), cache_dir=cache)
    X1 = np.array(load_feature_set(out).X_test)

    again = build_feature_set(small_dataset, out, _config(), cache_dir=cache)
    assert again.reused

    # Changing only pooling/normalisation must not recompute descriptors or codes.
    def forbidden(*args, **kwargs):
        raise AssertionError("descriptors recomputed although cached")

    monkeypatch.setattr(stages, "compute_descriptors", forbidden)
    monkeypatch.setattr(encode_module, "vq_encode", forbidden)
    changed = build_feature_set(
        small_dataset, tmp_path / "fs2", _config(pooling__method="max", normalization__method="l2"), cache_dir=cache
    )
    assert not changed.reused and changed.n_features == first.n_features
    X2 = np.asarray(load_feature_set(tmp_path / "fs2").X_test)
    np.testing.assert_allclose(np.linalg.norm(X2, axis=1), 1.0, rtol=1e-5)
    monkeypatch.undo()

    # Same config, no cache: the same numbers (determinism).
    build_feature_set(small_dataset, tmp_path / "fs3", _config(), cache_dir=None)
    np.testing.assert_array_equal(np.asarray(load_feature_set(tmp_path / "fs3").X_test), X1)


def test_implementation_version_invalidates_its_stage_only(tmp_path, small_dataset, monkeypatch):
    from classify_images.coding import pooling
    from classify_images.features import dsift

    cache, config = tmp_path / "cache", _config()
    first = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=cache)
    manifest = load_feature_set(tmp_path / "fs").manifest
    assert manifest["implementation_versions"] == stages.implementation_versions()
    calls = []
    compute = stages.compute_descriptors
    monkeypatch.setattr(stages, "compute_descriptors", lambda *a: calls.append(1) or compute(*a))

    # A new pooling implementation: the feature set is rebuilt, from cached codes.
    monkeypatch.setattr(pooling, "IMPLEMENTATION_VERSION", pooling.IMPLEMENTATION_VERSION + 1)
    rebuilt = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=cache)
    assert not rebuilt.reused and calls == []
    assert load_feature_set(tmp_path / "fs").config_hash != manifest["config_hash"]

    # A new dense SIFT implementation: the descriptors are recomputed, not read from the cache.
    monkeypatch.setattr(dsift, "IMPLEMENTATION_VERSION", dsift.IMPLEMENTATION_VERSION + 1)
    build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=cache)
    assert len(calls) >= first.n_train + first.n_test


def test_sparse_coding_max_pooling_path(tmp_path, small_dataset):
    config = _config(
        codebook__kind="sparse",
        codebook__size=32,
        codebook__n_iter=30,
        pooling__method="max",
        normalization__method="l2",
    )
    build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache")
    X = np.asarray(load_feature_set(tmp_path / "fs").X_train)
    assert X.shape == (15, 32 * 5) and (X >= 0).all()
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-5)


def _write_bad_files(root, sample_jpeg):
    cls = root / "flower"
    (cls / "zero.jpg").write_bytes(b"")
    (cls / "text.jpg").write_text("this is not an image")
    data = sample_jpeg.read_bytes()
    (cls / "truncated.jpg").write_bytes(data[: len(data) // 2])
    import cv2

    cv2.imwrite(str(cls / "tiny.png"), np.full((8, 8), 128, np.uint8))
    return {"flower/zero.jpg", "flower/text.jpg", "flower/truncated.jpg", "flower/tiny.png"}


def test_unreadable_images_are_skipped_counted_and_listed(tmp_path, small_dataset, capsys):
    bad = _write_bad_files(small_dataset, small_dataset / "china" / sorted((small_dataset / "china").iterdir())[0].name)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[dataset]\ntrain_per_class = 5\ntest_per_class = 5\n[image]\nmax_side = 96\n"
        "[codebook]\nsize = 16\nn_samples = 3000\nn_iter = 20\n[pooling]\nlevels = [1, 2]\n"
    )
    status = main(
        [
            "build-features",
            str(small_dataset),
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "fs"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "-q",
        ]
    )
    assert status == 0
    output = capsys.readouterr().out
    assert "skipped: 4" in output
    manifest = load_feature_set(tmp_path / "fs").manifest
    listed = {entry["path"]: entry["reason"] for entry in manifest["skipped"]}
    assert set(listed) == bad
    assert all(reason for reason in listed.values())
    assert not bad & set(manifest["split"]["train"] + manifest["split"]["test"])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root / "missing", "does not exist"),
        (lambda root: _single_class(root), "single class"),
        (lambda root: _empty_class(root), "no images"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path, small_dataset, capsys, make, message):
    target = make(small_dataset)
    status = main(["build-features", str(target), "--out", str(tmp_path / "fs"), "-q", "--no-cache"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def _single_class(root):
    for name in ("china", "digit_1"):
        shutil.rmtree(root / name)
    return root


def _empty_class(root):
    (root / "empty_class").mkdir()
    return root


def test_too_few_images_for_train_per_class(tmp_path, small_dataset, capsys):
    status = main(
        [
            "build-features",
            str(small_dataset),
            "--train-per-class",
            "30",
            "--out",
            str(tmp_path / "fs"),
            "-q",
            "--no-cache",
        ]
    )
    assert status == 2
    assert "lower --train-per-class to at most 11" in capsys.readouterr().err


def test_bad_config_value_on_command_line(tmp_path, small_dataset, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[pooling]\nmethod = "median"\n')
    assert main(["build-features", str(small_dataset), "--config", str(cfg), "-q", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "pooling.method" in err and len(err.strip().splitlines()) == 1


def test_interrupted_build_leaves_previous_set_and_resumes(tmp_path, small_dataset, monkeypatch):
    cache, out = tmp_path / "cache", tmp_path / "fs"
    build_feature_set(small_dataset, out, _config(), cache_dir=cache)
    before = (out / "manifest.json").read_text()

    calls = {"n": 0}
    real = encoders_module.spatial_pyramid_pool

    def dying(*args, **kwargs):  # the user presses Ctrl-C during encode + pool
        calls["n"] += 1
        if calls["n"] > 10:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(encoders_module, "spatial_pyramid_pool", dying)
    with pytest.raises(KeyboardInterrupt):
        build_feature_set(small_dataset, out, _config(pooling__levels=[1, 2, 3]), cache_dir=cache)
    monkeypatch.undo()
    assert (out / "manifest.json").read_text() == before  # the old, complete set is intact
    assert not list(tmp_path.glob(".fs.partial-*"))  # no half-written folder left
    resumed = build_feature_set(small_dataset, out, _config(pooling__levels=[1, 2, 3]), cache_dir=cache)
    assert resumed.n_features == 16 * 14
    fresh = build_feature_set(small_dataset, tmp_path / "fresh", _config(pooling__levels=[1, 2, 3]), cache_dir=None)
    np.testing.assert_array_equal(
        np.asarray(load_feature_set(out).X_train), np.asarray(load_feature_set(fresh.path).X_train)
    )


def test_incomplete_feature_set_is_refused(tmp_path, small_dataset):
    out = tmp_path / "fs"
    build_feature_set(small_dataset, out, _config(), cache_dir=tmp_path / "cache")
    (out / "manifest.json").unlink()
    with pytest.raises(FeatureSetError, match="not a complete feature set"):
        load_feature_set(out)


def test_featurize_new_images_matches_stored_rows(tmp_path, small_dataset):
    out = tmp_path / "fs"
    build_feature_set(small_dataset, out, _config(), cache_dir=tmp_path / "cache")
    fs = load_feature_set(out)
    paths = [str(small_dataset / p) for p in fs.test_paths[:3]] + [str(tmp_path / "nope.jpg")]
    X, status = FeatureExtractor.from_feature_set(fs).transform_images(paths)
    assert [s["ok"] for s in status] == [True, True, True, False]
    np.testing.assert_allclose(X, np.asarray(fs.X_test[:3]), rtol=1e-6)


def test_class_with_all_images_unreadable(tmp_path, small_dataset):
    for f in (small_dataset / "digit_1").iterdir():
        f.write_bytes(b"")
    with pytest.raises(DatasetError, match="smallest: 0; each class needs one training and one test image") as err:
        build_feature_set(small_dataset, tmp_path / "fs", _config(), cache_dir=None)
    assert "at most -1" not in str(err.value)
