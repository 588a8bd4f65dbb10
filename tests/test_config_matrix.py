"""Every shipped config × every registered classifier that applies, end to end (issue 22, section 2).

For each config of ``configs/`` (``named_configs()``), shrunk to the fixture images by this
test, and each classifier of the registry (``registry.CLASSIFIERS``) — both discovered, so a
new config file or a newly registered classifier is covered without editing this file (the
default run takes every config with the linear SVM and every classifier on two configs; the
other cells are marked ``slow`` and run by ``.ci/run``):

1. ``classify-images run`` (in-process) writes a feature set, a model file and a report;
2. ``classify-images predict``, in a subprocess whose current folder holds only the model
   file, classifies a few images (exit 0, one result per image; it runs while this process
   does steps 3 and 4);
3. ``classify_images.load_model(model).predict(paths)`` gives the same classes;
4. the model's ``ImageFeatures`` transforms the feature set's test images into its stored rows.

A classifier applies to a config unless it declares that it needs non-negative input (the
``positive_only`` input tag of its estimator) and the config's built features hold a negative
value; for those cells ``run`` must refuse with its one-line "needs non-negative features"
error and write no model.  Each config's features are built once (by ``build-features``) and
copied into each cell's run folder, where ``run`` finds them up to date and reuses them.

Besides the cells, per config: ``ImageFeatures(config).fit(train images)`` (no stage cache)
gives the feature set's codebook and rows again, so the transformer is checked even when a
model file cannot be written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from classify_images.classifiers import registry
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import CHANNEL_TABLE, CLASSIFIER_TABLE, named_configs

from .conftest import FIXTURE_IMAGES

#: The shrunk learners stop before converging (e.g. a GMM after 5 EM iterations): expected here.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

CONFIGS = sorted(named_configs())
CLASSIFIERS = sorted(registry.CLASSIFIERS)
#: Configs every classifier runs on in the default test run: non-negative rows (every classifier
#: trains) and signed rows (the classifiers needing non-negative input refuse in one line).
EVERY_CLASSIFIER_ON = ("bof-spm", "fisher")


def _cells():
    """Every (config, classifier): in the default run every config with the linear SVM and every
    classifier on :data:`EVERY_CLASSIFIER_ON`; the rest of the cross product is marked ``slow``
    (deselected by default, run by ``.ci/run`` with ``-m slow``)."""
    for config in CONFIGS:
        for classifier in CLASSIFIERS:
            core = classifier == "linear" or config in EVERY_CLASSIFIER_ON
            yield pytest.param(config, classifier, id=f"{config}-{classifier}", marks=() if core else pytest.mark.slow)


#: Feature rows recomputed from a model file or by ``ImageFeatures`` against the stored ones
#: (and a refitted codebook against the stored one).  On one machine they are equal bit for bit
#: today; the tolerance leaves room for the last-bit differences of another processor's BLAS
#: or vector units (issue 22, "Any x86-64").
RTOL, ATOL = 1e-5, 1e-6

#: The fixture size: 4 classes x (4 training + 2 test) images of at most 64 px, few small
#: descriptors, a small codebook learnt in a few iterations.  ``(table, key) -> value``;
#: ``ALWAYS`` keys are set whether the shipped config has them or not (their defaults are
#: paper-sized), the others only when the shipped config sets them.
ALWAYS = {
    ("dataset", "train_per_class"): 4,
    ("dataset", "test_per_class"): 2,
    ("image", "max_side"): 64,
    ("codebook", "size"): 16,
    ("codebook", "n_samples"): 1000,
    ("codebook", "n_iter"): 5,
}
IF_SET = {
    ("sift", "step"): lambda value: max(int(value), 8),
    ("codebook", "pca_dims"): lambda value: min(int(value), 16),
    ("codebook", "n_neighbors"): lambda value: min(int(value), ALWAYS[("codebook", "size")]),
    ("codebook", "soft_neighbors"): lambda value: min(int(value), ALWAYS[("codebook", "size")]),
}
#: Test images per class given to ``predict``.
PREDICTED_PER_CLASS = 1


def shrunk_config(name: str) -> dict:
    """The shipped config ``name`` with its sizes cut to the fixture's; kind, pooling and
    normalisation untouched.  Its ``[classifier]`` table is dropped: each cell names its own."""
    config = tomllib.loads(named_configs()[name].read_text(encoding="utf-8"))
    config.pop(CLASSIFIER_TABLE, None)
    # [[channel]] tables: [dataset] and [image] at the top, the other tables inside each channel
    holders = config.get(CHANNEL_TABLE, [config])
    for (table, key), value in ALWAYS.items():
        for holder in [config] if table in ("dataset", "image") else holders:
            holder.setdefault(table, {})[key] = value
    for (table, key), shrink in IF_SET.items():
        for holder in holders:
            if key in holder.get(table, {}):
                holder[table][key] = shrink(holder[table][key])
    return config


def _toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # bool, int, float, str: the same spelling in TOML


def write_toml(path: Path, config: dict) -> Path:
    lines = []
    for table, values in config.items():
        for entry in values if table == CHANNEL_TABLE else [values]:  # [[channel]]: an array of tables
            lines.append(f"[[{table}]]" if table == CHANNEL_TABLE else f"[{table}]")
            lines += [f"{json.dumps(str(key))} = {_toml_value(value)}" for key, value in entry.items()]
            lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    assert tomllib.loads(path.read_text(encoding="utf-8")) == config  # what we meant is what is read
    return path


def requires_non_negative(classifier: str) -> bool:
    """What the estimator declares: scikit-learn's ``positive_only`` input tag."""
    return bool(registry.classifier_class(classifier)().__sklearn_tags__().input_tags.positive_only)


class Built:
    """One config's shrunk TOML, its feature set (built once) and the stage cache."""

    def __init__(self, root: Path, name: str) -> None:
        from classify_images.pipeline.storage.feature_store import load_feature_set

        self.name, self.root = name, root
        root.mkdir(parents=True)
        self.config = write_toml(root / f"{name}.toml", shrunk_config(name))
        self.cache = root / "cache"
        self.features = root / "features"
        assert (
            main(
                [
                    "build-features",
                    str(FIXTURE_IMAGES),
                    "--config",
                    str(self.config),
                    "--rows",
                    "float32",  # exact rows: the cells compare the estimator's and predict's rows with them
                    "--out",
                    str(self.features),
                    "--cache-dir",
                    str(self.cache),
                    "-q",
                ]
            )
            == 0
        )
        self.feature_set = fs = load_feature_set(self.features)
        dataset_root = Path(fs.manifest["dataset"]["root"])
        self.train_paths = [str(dataset_root / p) for p in fs.train_paths]
        self.test_paths = [str(dataset_root / p) for p in fs.test_paths]
        self.signed = bool((np.asarray(fs.X_train) < 0).any() or (np.asarray(fs.X_test) < 0).any())

    def predicted_images(self) -> list[str]:
        """A few test images: the first ``PREDICTED_PER_CLASS`` of each class."""
        picked, per_class = [], {}
        for path in self.test_paths:
            label = Path(path).parent.name
            if per_class.get(label, 0) < PREDICTED_PER_CLASS:
                per_class[label] = per_class.get(label, 0) + 1
                picked.append(path)
        return picked


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(name)``: the config's :class:`Built`, made on first use and shared by its cells."""
    root = tmp_path_factory.mktemp("matrix")
    done: dict[str, Built | Exception] = {}

    def get(name: str) -> Built:
        if name not in done:
            try:
                done[name] = Built(root / name, name)
            except Exception as exc:  # every cell of a config that cannot be built fails with its error
                done[name] = exc
                raise
        if isinstance(done[name], Exception):
            raise done[name]
        return done[name]

    return get


#: Configs whose ``predict`` already ran in a new process (once per config is enough).
_PREDICTED_IN_A_NEW_PROCESS: set[str] = set()


class _Finished:
    """An in-process ``predict`` with the interface of the subprocess the other cells use."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self._output = returncode, (stdout, stderr)

    def communicate(self, timeout=None):
        return self._output

    def kill(self):
        pass


def _model_alone(model: Path, folder: Path) -> Path:
    """A copy of ``model`` alone in the new folder ``folder``."""
    folder.mkdir()
    alone = Path(shutil.copy(model, folder / "model.npz"))
    assert sorted(p.name for p in folder.iterdir()) == ["model.npz"]
    return alone


def _start_predict_in_empty_folder(model: Path, folder: Path, images: list[str]) -> tuple[subprocess.Popen, Path]:
    """``classify-images predict`` started in a new process whose current folder holds only a copy
    of ``model`` (it runs while the test does steps 3 and 4 in this process)."""
    alone = _model_alone(model, folder)
    env = {**os.environ, "CLASSIFY_IMAGES_CACHE": str(folder.parent / "predict-cache")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "classify_images.pipeline.interfaces.cli",
            "predict",
            "model.npz",
            *images,
            "--top-k",
            "1",
            "--format",
            "json",
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, alone


@pytest.mark.parametrize(("config", "classifier"), list(_cells()))
def test_run_predict_and_reload(config, classifier, built, tmp_path, capsys, monkeypatch):
    from classify_images import ImageFeatures, load_model

    b = built(config)
    out = tmp_path / "run"
    shutil.copytree(b.features, out / "features")  # built once; run finds it up to date
    # --force: the run folder holding a copied features/ is not proven ours (no marker); the copy is
    # a feature set of ours all the same, so it is reused, not replaced
    argv = [
        "run",
        str(FIXTURE_IMAGES),
        "--config",
        str(b.config),
        "--rows",
        "float32",  # as the shared build stored them
        "--classifier",
        classifier,
        "--out",
        str(out),
        "--cache-dir",
        str(b.cache),
        "-q",
        "--force",
    ]
    capsys.readouterr()

    if requires_non_negative(classifier) and b.signed:
        # not applicable: the classifier declares it needs non-negative input and these features are signed
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "needs non-negative features" in err and len(err.strip().splitlines()) == 1, err
        assert not (out / "model.npz").exists()
        return

    # 1. run: feature set (reused), model file, report
    assert main(argv) == 0, capsys.readouterr().err
    assert (out / "features" / "manifest.json").read_text() == (b.features / "manifest.json").read_text()  # reused
    model = out / "model.npz"
    assert model.is_file()
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["classifier"] == classifier
    assert 0.0 <= report["mean_per_class_accuracy"] <= 1.0

    # 2. predict from the model file alone, in an empty folder: in a new process for the first
    # cell of each config (nothing of this process helps it), in this process for the others (a
    # Python start-up costs ~2 CPU-s) — checked below, once it has finished
    images = b.predicted_images()
    in_new_process = config not in _PREDICTED_IN_A_NEW_PROCESS
    _PREDICTED_IN_A_NEW_PROCESS.add(config)
    if in_new_process:
        process, alone = _start_predict_in_empty_folder(model, tmp_path / "alone", images)
    else:
        alone = _model_alone(model, tmp_path / "alone")
        capsys.readouterr()  # what run printed
        with monkeypatch.context() as here:
            here.chdir(alone.parent)
            code = main(["predict", "model.npz", *images, "--top-k", "1", "--format", "json"])
        stdout, stderr = capsys.readouterr()
        process = _Finished(code, stdout, stderr)
    try:
        # 3. the Python API on the same file
        loaded = load_model(alone)
        api_classes = [str(c) for c in loaded.predict(images)]

        # 4. the model's ImageFeatures makes the feature set's rows
        features = loaded[0]
        assert isinstance(features, ImageFeatures)
        assert features.n_features_out_ == b.feature_set.n_features
        np.testing.assert_allclose(
            features.transform(b.test_paths), np.asarray(b.feature_set.X_test), rtol=RTOL, atol=ATOL
        )
    finally:
        try:
            stdout, stderr = process.communicate(timeout=1800)
        except subprocess.TimeoutExpired:
            process.kill()  # ours, by its handle
            stdout, stderr = process.communicate()

    assert process.returncode == 0, stderr
    predictions = json.loads(stdout)["predictions"]
    assert len(predictions) == len(images), stdout
    for entry, image in zip(predictions, images):
        assert Path(entry["path"]).parts[-2:] == Path(image).parts[-2:], (entry["path"], image)
        assert len(entry["top"]) == 1
    cli_classes = [entry["top"][0]["class"] for entry in predictions]
    assert set(cli_classes) <= set(b.feature_set.class_names)
    assert api_classes == cli_classes  # step 3 gives the classes of step 2


@pytest.mark.parametrize("config", CONFIGS)
def test_image_features_fit_transform_equal_the_feature_set(config, built):
    """``ImageFeatures`` fitted anew (no stage cache) on the feature set's training images gives its
    codebook and its rows: the estimator and ``build-features`` compute the same features."""
    from classify_images import ImageFeatures

    b = built(config)
    fs = b.feature_set
    features = ImageFeatures(str(b.config), cache_dir=False).fit(b.train_paths)
    assert features.n_features_out_ == fs.n_features
    stored = fs.codebook()
    if isinstance(stored, dict):  # an encoder's fitted state as named arrays (e.g. a GMM and a PCA)
        assert isinstance(features.codebook_, dict) and sorted(features.codebook_) == sorted(stored)
        for key in stored:
            np.testing.assert_allclose(features.codebook_[key], stored[key], rtol=RTOL, atol=ATOL, err_msg=key)
    else:
        np.testing.assert_allclose(features.codebook_, stored, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(features.transform(b.train_paths), np.asarray(fs.X_train), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(features.transform(b.test_paths), np.asarray(fs.X_test), rtol=RTOL, atol=ATOL)
