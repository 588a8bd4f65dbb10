"""Horizontal flips (``[augment]``): stored mirrored rows, training on them, test-time averaging."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from classify_images.pipeline.extraction.augment import averaged_decision_function, rows_and_mirrors
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import load_config, stage_hash, validate_config
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import FeatureSetError, load_feature_set
from classify_images.pipeline.training import evaluation

from .conftest import REPO, SMALL_CONFIG, write_config_toml

AUGMENTED = {
    **SMALL_CONFIG,
    "dataset": {"train_per_class": 4, "test_per_class": 4, "seed": 0},
    "augment": {"flip_train": True, "flip_test": "average"},
}
PLAIN = {name: table for name, table in AUGMENTED.items() if name != "augment"}


def _synthetic_image(rng: np.random.Generator, label: int) -> np.ndarray:
    """A 72 × 88 grey image, not left-right symmetric: a class-specific ramp, a bar and noise."""
    h, w = 72, 88
    y, x = np.mgrid[:h, :w]
    image = 40 + 120 * ((x * (label + 1) + y * (2 - label)) % 37) / 37 + rng.normal(0, 18, (h, w))
    image[:, 8 + 10 * label : 16 + 10 * label] = 250  # a bar off the centre: the mirror differs
    return np.clip(image, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """3 classes × 8 synthetic PNG images, and the mirrored file of each (outside the dataset)."""
    root = tmp_path_factory.mktemp("augment")
    rng = np.random.default_rng(0)
    for label, name in enumerate(("a", "b", "c")):
        (root / "data" / name).mkdir(parents=True)
        (root / "mirrors" / name).mkdir(parents=True)
        for k in range(8):
            image = _synthetic_image(rng, label)
            cv2.imwrite(str(root / "data" / name / f"{k}.png"), image)
            cv2.imwrite(str(root / "mirrors" / name / f"{k}.png"), np.ascontiguousarray(image[:, ::-1]))
    return root


@pytest.fixture(scope="module")
def built(dataset):
    """The plain and the augmented feature sets of ``dataset`` (one stage cache)."""
    out = {}
    for name, config in (("plain", PLAIN), ("augmented", AUGMENTED)):
        toml = write_config_toml(dataset / f"{name}.toml", config)
        assert (
            main(
                [
                    "build-features",
                    str(dataset / "data"),
                    "--config",
                    str(toml),
                    "--out",
                    str(dataset / f"fs-{name}"),
                    "--cache-dir",
                    str(dataset / "cache"),
                    "-q",
                ]
            )
            == 0
        )
        out[name] = load_feature_set(dataset / f"fs-{name}")
    return out


def test_configs_without_augment_keep_their_hashes():
    shipped = sorted(
        path
        for path in (REPO / "classify_images" / "configs").glob("*.toml")  # single-channel configs without flips
        if not {"[augment]", "[[channel]]"} & set(path.read_text(encoding="utf-8").splitlines())
    )
    assert len(shipped) >= 10
    for path in shipped:
        config = load_config(path)
        assert "augment" not in config.to_dict(semantic_only=True)
        explicit = load_config(path, {"augment": {"flip_train": False, "flip_test": "none"}})
        assert stage_hash(explicit, list(explicit.to_dict())) == stage_hash(config, list(config.to_dict()))
        assert explicit.sift_params() == config.sift_params()
        flipped = load_config(path, {"augment": {"flip_train": True}})
        assert stage_hash(flipped, list(flipped.to_dict())) != stage_hash(config, list(config.to_dict()))


def test_augment_keys_are_checked():
    with pytest.raises(ValueError, match="augment.flip_test"):
        validate_config({"augment": {"flip_test": "max"}})
    with pytest.raises(ValueError, match="unknown key augment.flips"):
        validate_config({"augment": {"flips": True}})


def test_the_rows_do_not_change_and_a_mirror_row_is_the_row_of_the_mirrored_file(dataset, built):
    plain, augmented = built["plain"], built["augmented"]
    assert not plain.has_mirrors and augmented.has_mirrors
    assert augmented.manifest["split"] == plain.manifest["split"]
    for part in ("train", "test"):
        np.testing.assert_array_equal(np.asarray(augmented.rows[part]), np.asarray(plain.rows[part]))
    extractor = FeatureExtractor.from_feature_set(augmented)
    for part, paths in (("train", augmented.train_paths), ("test", augmented.test_paths)):
        mirrors = augmented.mirrors(part)
        for row, relative in enumerate(paths):
            mirrored_file = str(dataset / "mirrors" / relative)
            np.testing.assert_allclose(
                mirrors[row], extractor.vector(mirrored_file, file_fingerprint(mirrored_file)), rtol=0, atol=1e-6
            )
            assert not np.array_equal(mirrors[row], augmented.rows[part][row])


def test_pooled_rows_gather_the_pooled_rows_in_the_order_asked(built):
    fs = built["augmented"]
    pooled = np.concatenate([fs.X_train, fs.X_test])
    pooled_mirrors = np.concatenate([fs.mirrors("train"), fs.mirrors("test")])
    index = np.random.default_rng(3).permutation(len(pooled))[:17]
    np.testing.assert_array_equal(fs.pooled_rows(index), pooled[index])
    np.testing.assert_array_equal(fs.pooled_rows(index, mirrored=True), pooled_mirrors[index])


def test_experiment_splits_never_leak_a_mirror(built, monkeypatch, tmp_path):
    """Over many seeds: the mirrors a split trains on are exactly its training images' mirrors, and
    the mirrors averaged at test time exactly its test images' (never a training row)."""
    import shutil

    # rows tagged with their image: column 0 holds the pooled index + 1 (mirror: negated)
    shutil.copytree(built["augmented"].path, tmp_path / "fs")
    source = built["augmented"]
    offset = {"train": 0, "test": len(source.y_train)}
    for part in ("train", "test"):
        for name, sign in ((f"X_{part}", 1), (f"X_{part}_flip", -1)):
            tagged = np.zeros((len(source.rows[part]), source.n_features), dtype=np.float32)
            tagged[:, 0] = sign * (1 + offset[part] + np.arange(len(tagged)))
            tagged[:, 1:] = np.asarray(source.rows[part])[:, 1:]
            np.save(tmp_path / "fs" / f"{name}.npy", tagged)
    fs = load_feature_set(tmp_path / "fs")

    def images(rows, sign):
        if isinstance(rows, evaluation.PooledRows):  # test rows are scored block by block: gather them here
            rows = rows.feature_set.pooled_rows(rows.indices, mirrored=rows.mirrored)
        tags = sign * np.asarray(rows)[:, 0]
        assert (tags >= 1).all()
        return set((tags - 1).astype(int).tolist())

    seen = []
    train, score = evaluation.train_classifier, evaluation._evaluation
    # the training rows then their mirrors, in one array (y: the images' labels)
    monkeypatch.setattr(
        evaluation,
        "train_classifier",
        lambda *a, **k: k["mirrored"] and seen.append((a[2][: len(a[3])], a[2][len(a[3]) :])) or train(*a, **k),
    )
    monkeypatch.setattr(evaluation, "_evaluation", lambda *a, **k: seen.append((a[4], k["X_mirror"])) or score(*a, **k))
    experiment = evaluation.run_experiment(fs, "linear", {}, 12)
    assert len(experiment.runs) == 12 and len(seen) == 24
    splits = set()
    for (X_train, M_train), (X_test, M_test) in zip(seen[::2], seen[1::2]):
        train_images, test_images = images(X_train, 1), images(X_test, 1)
        assert len(train_images) == len(X_train) and not train_images & test_images
        assert images(M_train, -1) == train_images
        assert images(M_test, -1) == test_images
        splits.add(frozenset(train_images))
    assert len(splits) > 6  # the seeds do re-split


def test_the_shipped_flip_config_shares_the_fisher_cache():
    """``fisher-flip`` is ``fisher`` plus ``[augment]``: the same stage keys, so it reuses a ``fisher`` cache."""
    plain, flipped = (
        load_config(REPO / "classify_images" / "configs" / "fisher.toml"),
        load_config(REPO / "classify_images" / "configs" / "fisher-flip.toml"),
    )
    assert flipped.augment.flip_train and flipped.augment.flip_test == "average"
    assert flipped.sift_params() == plain.sift_params()
    assert flipped.to_dict(semantic_only=True)["codebook"] == plain.to_dict(semantic_only=True)["codebook"]


def test_averaging_is_the_mean_of_the_two_decision_functions(built, tmp_path):
    fs = built["augmented"]
    model = tmp_path / "m.npz"
    assert main(["train", str(fs.path), "--classifier", "linear", "--param", "C=auto", "--out", str(model), "-q"]) == 0
    from classify_images.pipeline.training.model_file import load_model

    classifier, meta = load_model(model)
    assert meta["extractor"]["config"]["augment"] == {"flip_train": True, "flip_test": "average"}
    assert classifier.n_features_in_ == fs.n_features
    result = evaluation.evaluate_model(classifier, meta, fs)
    expected = 0.5 * (classifier.decision_function(fs.X_test) + classifier.decision_function(fs.mirrors("test")))
    np.testing.assert_allclose(result.predictions.scores, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(result.predictions.y_pred, np.argmax(expected, axis=1))
    assert not np.allclose(expected, classifier.decision_function(fs.X_test))  # the mirrors do count


def test_training_uses_the_mirrors_as_more_rows(built):
    fs = built["augmented"]
    stacked = rows_and_mirrors(fs, np.arange(len(fs.y_train)))  # one array: the rows, then their mirrors
    np.testing.assert_array_equal(stacked, np.concatenate([fs.X_train, fs.mirrors("train")]))
    flipped = evaluation.train_classifier("linear", {}, stacked, fs.y_train, mirrored=True)
    reference = evaluation.train_classifier(
        "linear", {}, np.concatenate([fs.X_train, fs.mirrors("train")]), np.concatenate([fs.y_train, fs.y_train])
    )
    assert flipped.n_samples == 2 * len(fs.y_train) and flipped.n_mirrors == len(fs.y_train)
    np.testing.assert_allclose(
        flipped.estimator.decision_function(fs.X_test),
        reference.estimator.decision_function(fs.X_test),
        rtol=1e-10,
        atol=1e-10,
    )


def test_cli_round_trip_and_predict_averages_with_the_mirror(dataset, built, tmp_path, capsys):
    from classify_images.pipeline.interfaces.image_features import MirrorAveragedPipeline, load_image_model
    from classify_images.pipeline.interfaces.workflows import predict_images

    fs = built["augmented"]
    model = tmp_path / "m.npz"
    assert main(["train", str(fs.path), "--classifier", "linear", "--param", "C=auto", "--out", str(model), "-q"]) == 0
    assert main(["evaluate", str(fs.path), str(model), "--out", str(tmp_path / "rep"), "-q"]) == 0
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["n_test"] == len(fs.y_test)
    assert (
        main(
            [
                "experiment",
                str(fs.path),
                "--classifier",
                "linear",
                "--repeats",
                "2",
                "--out",
                str(tmp_path / "exp"),
                "-q",
            ]
        )
        == 0
    )
    images = [str(dataset / "data" / p) for p in fs.test_paths[:3]]
    capsys.readouterr()
    assert main(["predict", str(model), *images, "--top-k", "1"]) == 0
    printed = capsys.readouterr().out
    assert all(p in printed for p in images)

    pipeline = load_image_model(model)
    assert isinstance(pipeline, MirrorAveragedPipeline)
    mirrored = [str(dataset / "mirrors" / p) for p in fs.test_paths[:3]]
    classifier, features = pipeline[-1], pipeline[0]
    expected = 0.5 * (
        classifier.decision_function(features.transform(images))
        + classifier.decision_function(features.transform(mirrored))
    )
    np.testing.assert_allclose(pipeline.decision_function(images), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(pipeline.predict(images), classifier.classes_[np.argmax(expected, axis=1)])
    np.testing.assert_allclose(features.transform_mirrored(images), features.transform(mirrored), rtol=0, atol=1e-6)
    rows, skipped = predict_images(pipeline, images, top_k=len(classifier.classes_))
    assert not skipped
    for (_path, ranked), scores in zip(rows, expected):
        by_class = dict(ranked)
        np.testing.assert_allclose([by_class[c] for c in classifier.classes_], scores, rtol=1e-6, atol=1e-6)


def test_a_feature_set_without_mirrors_is_a_one_line_error(built, tmp_path, capsys):
    plain = built["plain"]
    with pytest.raises(FeatureSetError, match="no mirrored rows.*flip_train = true"):
        plain.mirrors("train", "[augment] flip_train = true")
    with pytest.raises(FeatureSetError, match="no mirrored rows"):
        plain.pooled_rows(np.arange(3), mirrored=True)
    # a manifest that says [augment] but lost its mirrors: the files are missing, one line
    import shutil

    damaged = tmp_path / "fs"
    shutil.copytree(built["augmented"].path, damaged)
    (damaged / "X_test_flip.npy").unlink()
    assert main(["experiment", str(damaged), "--classifier", "linear", "--repeats", "1", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "X_test_flip.npy" in err and len(err.splitlines()) == 1


def test_options_that_cannot_use_mirrors_are_refused_by_name(dataset, built, tmp_path, capsys):
    toml = write_config_toml(tmp_path / "aug.toml", AUGMENTED)
    assert (
        main(
            [
                "build-features",
                str(dataset / "data"),
                "--config",
                str(toml),
                "--out",
                str(tmp_path / "fs"),
                "--store",
                "sharded",
                "--no-cache",
                "-q",
            ]
        )
        == 2
    )
    assert "[augment]" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                str(built["augmented"].path),
                "--classifier",
                "linear",
                "--streaming",
                "--block-rows",
                "4",
                "--out",
                str(tmp_path / "m.npz"),
                "-q",
            ]
        )
        == 2
    )
    assert "flip_train" in capsys.readouterr().err


def test_averaged_decision_function_checks_the_mirrors_match():
    class Stub:
        def decision_function(self, X):
            return X.sum(axis=1)

    X, M = np.arange(6.0).reshape(3, 2), np.ones((3, 2))
    np.testing.assert_array_equal(averaged_decision_function(Stub(), X, M), (X.sum(axis=1) + 2) / 2)
    np.testing.assert_array_equal(averaged_decision_function(Stub(), X, None), X.sum(axis=1))
    with pytest.raises(ValueError, match="2 mirrored rows for 3 rows"):
        averaged_decision_function(Stub(), X, M[:2])


def test_without_C_the_model_uses_the_mirrors_as_the_search_chose(built, tmp_path):
    """No C given: C and the use of the stored mirrors are chosen on the training images; the model
    file's config says the chosen use, and evaluate and predict follow it (not the config's)."""
    fs = built["augmented"]
    model = tmp_path / "m.npz"
    assert main(["train", str(fs.path), "--classifier", "linear", "--out", str(model), "-q"]) == 0
    from classify_images.pipeline.interfaces.image_features import MirrorAveragedPipeline, load_image_model
    from classify_images.pipeline.training.model_file import load_model

    classifier, meta = load_model(model)
    flips = meta["search"]["flips"]
    assert meta["extractor"]["config"]["augment"] == flips
    assert classifier.n_features_in_ == fs.n_features
    result = evaluation.evaluate_model(classifier, meta, fs)
    plain = classifier.decision_function(fs.X_test)
    expected = (
        0.5 * (plain + classifier.decision_function(fs.mirrors("test"))) if flips["flip_test"] == "average" else plain
    )
    np.testing.assert_allclose(result.predictions.scores, expected, rtol=1e-12, atol=1e-12)
    assert isinstance(load_image_model(model), MirrorAveragedPipeline) == (flips["flip_test"] == "average")
    # the search trained on the mirrors only if it chose to
    n_train = len(fs.y_train)
    refit = evaluation.train_classifier(
        "linear",
        {"C": meta["params"]["C"]},
        rows_and_mirrors(fs, np.arange(n_train)) if flips["flip_train"] else np.asarray(fs.X_train),
        fs.y_train,
        mirrored=flips["flip_train"],
    )
    np.testing.assert_allclose(
        refit.estimator.decision_function(fs.X_test),
        plain.reshape(refit.estimator.decision_function(fs.X_test).shape),
        rtol=1e-6,
        atol=1e-6,
    )
