"""Calibrated probabilities (classifiers/calibration.py): Platt's fit against a slow direct
minimisation, every classifier against scikit-learn's ``CalibratedClassifierCV`` on the same
folds, ``predict_proba`` only on a calibrated estimator, model files, and the command line
(``train --probability``, ``predict --proba``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.optimize import minimize
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification

from classify_images.classifiers import MBKL, HIKnSVM, PmSVM, QuadraticHingeSVC
from classify_images.classifiers.calibration import CalibrationError, calibrate, fit_platt, platt_probabilities
from classify_images.pipeline.interfaces.cli import main

from .conftest import FIXTURE_IMAGES, build_fixture_feature_set


def _data(n_classes: int, n: int = 120, seed: int = 0):
    X, y = make_classification(n, 12, n_informative=6, n_classes=n_classes, n_clusters_per_class=1, random_state=seed)
    return X - X.min(), y  # non-negative: the additive-kernel classifiers refuse negative values


def _platt_by_hand(f: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """Platt's objective written out term by term, minimised by Nelder-Mead (no gradient)."""
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    targets = [(n_pos + 1) / (n_pos + 2) if p else 1 / (n_neg + 2) for p in positive]

    def objective(ab):
        total = 0.0
        for fi, t in zip(f, targets):
            z = ab[0] * fi + ab[1]  # p = 1 / (1 + exp(z))
            log_p = -math.log1p(math.exp(z)) if z < 30 else -z
            log_not_p = -math.log1p(math.exp(-z)) if z > -30 else z
            total -= t * log_p + (1 - t) * log_not_p
        return total

    result = minimize(
        objective, [0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}
    )
    return float(result.x[0]), float(result.x[1])


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_platt_fit_equals_a_slow_direct_minimisation(scale):
    rng = np.random.default_rng(0)
    positive = rng.random(80) < 0.3
    f = scale * (rng.normal(size=80) + 1.5 * positive)  # scale 100: the rescaled path
    a, b = fit_platt(f, positive)
    a_ref, b_ref = _platt_by_hand(f, positive)
    assert_allclose([a, b], [a_ref, b_ref], rtol=1e-4, atol=1e-6)
    assert a < 0  # larger decision values, more likely positive


@pytest.mark.parametrize(
    "estimator",
    [QuadraticHingeSVC(), PmSVM(random_state=0), HIKnSVM(random_state=0), MBKL(random_state=0)],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("n_classes", [2, 4])
def test_every_classifier_equals_sklearn_calibrated_classifier_cv(estimator, n_classes):
    """Same folds (stratified, 5, no shuffle), same sigmoid, same normalisation as
    ``CalibratedClassifierCV(method="sigmoid", ensemble=False)``."""
    X, y = _data(n_classes)
    ours = calibrate(estimator.fit(X, y), X, y)
    reference = CalibratedClassifierCV(estimator, method="sigmoid", ensemble=False, cv=5).fit(X, y)
    proba = ours.predict_proba(X)
    assert proba.shape == (len(y), n_classes)
    assert_allclose(proba.sum(axis=1), 1.0)
    assert_allclose(proba, reference.predict_proba(X), atol=1e-6)
    assert ours.platt_.shape == (1 if n_classes == 2 else n_classes, 2)


def test_probabilities_rank_as_the_decision_values_of_two_classes_and_normalise_otherwise():
    platt = np.array([[-2.0, 0.5]])
    scores = np.array([-1.0, 0.0, 2.0])
    proba = platt_probabilities(scores, platt)
    assert_allclose(proba[:, 1], 1 / (1 + np.exp(-2.0 * scores + 0.5)))
    assert_allclose(proba.sum(axis=1), 1.0)
    # three problems whose sigmoids all give 0 (underflow): the uniform distribution
    assert_allclose(platt_probabilities(np.full((1, 3), 1e6), np.tile([[1.0, 0.0]], (3, 1))), [[1 / 3] * 3])


def test_predict_proba_only_on_a_calibrated_estimator_and_a_new_fit_drops_the_calibration():
    X, y = _data(3)
    estimator = QuadraticHingeSVC().fit(X, y)
    assert not hasattr(estimator, "predict_proba")
    calibrate(estimator, X, y, folds=3)
    assert hasattr(estimator, "predict_proba") and estimator.platt_folds_ == 3
    estimator.fit(X, y)
    assert not hasattr(estimator, "predict_proba")


def test_too_few_rows_per_class_for_the_folds_is_one_clear_error():
    X, y = _data(3, n=30)
    y[:] = np.r_[np.zeros(26), np.ones(2), 2 * np.ones(2)]
    estimator = QuadraticHingeSVC().fit(X, y)
    with pytest.raises(CalibrationError, match="at least 5 training images per class; class 1 has 2"):
        calibrate(estimator, X, y)
    with pytest.raises(CalibrationError, match="at least 2 folds"):
        calibrate(estimator, X, y, folds=1)


def test_model_file_keeps_the_calibration_and_refuses_a_tampered_one(tmp_path):
    from classify_images.pipeline.training.model_file import ModelFileError, load_model, read_model_meta, save_model

    X, y = _data(3)
    estimator = calibrate(PmSVM(random_state=0).fit(X, y), X, y)
    path = save_model(tmp_path / "m.npz", estimator)
    loaded, meta = load_model(path)
    assert_allclose(loaded.predict_proba(X), estimator.predict_proba(X))
    assert meta["probability"]["folds"] == 5 and read_model_meta(path)["probability"] is not None
    plain = save_model(tmp_path / "plain.npz", PmSVM(random_state=0).fit(X, y))
    assert not hasattr(load_model(plain)[0], "predict_proba") and read_model_meta(plain)["probability"] is None

    with np.load(path) as archive:
        arrays = dict(archive)
    for key, value, message in [
        ("model/platt_", np.full((3, 2), np.nan), "NaN"),
        ("model/platt_", np.zeros((2, 2)), "shape"),
        ("model/platt_folds_", np.array(1), "fold count"),
    ]:
        tampered = tmp_path / "tampered.npz"
        np.savez(tampered, **{**arrays, key: value})
        with pytest.raises(ModelFileError, match=message):
            load_model(tampered)


# ---------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def feature_set(tmp_path_factory):
    return build_fixture_feature_set(tmp_path_factory.mktemp("calibration"))


def test_train_probability_then_predict_proba(tmp_path, feature_set, capsys):
    model = tmp_path / "model.npz"
    assert main(["train", str(feature_set), "--classifier", "linear", "--probability", "--out", str(model)]) == 0
    assert "Platt scaling on the decision values of 5 held-out folds" in capsys.readouterr().out
    images = sorted((FIXTURE_IMAGES / "flower").iterdir())[:3]
    assert main(["predict", str(model), *map(str, images), "--proba", "--top-k", "4", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["scores"].startswith("calibrated probabilities")
    for prediction in document["predictions"]:
        values = [entry["probability"] for entry in prediction["top"]]
        assert values == sorted(values, reverse=True) and all(0 <= v <= 1 for v in values)
        assert abs(sum(values) - 1) < 1e-5  # all four classes shown
    assert main(["predict", str(model), str(images[0]), "--proba", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "path,rank,class,probability"
    from classify_images import load_model  # the Python API: the loaded pipeline has predict_proba

    loaded = load_model(model)
    proba = loaded.predict_proba([str(p) for p in images])
    first = document["predictions"][0]["top"][0]
    assert abs(proba[0, list(loaded.classes_).index(first["class"])] - first["probability"]) < 1e-6


def test_probability_errors_are_one_line(tmp_path, feature_set, capsys):
    plain = tmp_path / "plain.npz"
    assert main(["train", str(feature_set), "--classifier", "linear", "--out", str(plain)]) == 0
    capsys.readouterr()
    image = str(next((FIXTURE_IMAGES / "china").iterdir()))
    cases = [
        (["predict", str(plain), image, "--proba"], "holds no calibrated probabilities"),
        (
            [
                "train",
                str(feature_set),
                "--classifier",
                "linear",
                "--probability",
                "--calibration-folds",
                "1",
                "--out",
                str(tmp_path / "a.npz"),
            ],
            "--calibration-folds must be at least 2",
        ),
        (
            [
                "train",
                str(feature_set),
                "--classifier",
                "linear",
                "--calibration-folds",
                "3",
                "--out",
                str(tmp_path / "b.npz"),
            ],
            "add --probability",
        ),
        (
            [
                "train",
                str(feature_set),
                "--classifier",
                "linear",
                "--probability",
                "--calibration-folds",
                "6",
                "--out",
                str(tmp_path / "c.npz"),
            ],
            "at least 6 training images per class",
        ),
        (
            [
                "train",
                str(feature_set),
                "--classifier",
                "nsvm",
                "--probability",
                "--streaming",
                "--out",
                str(tmp_path / "d.npz"),
            ],
            "drop --streaming",
        ),
    ]
    for argv, message in cases:
        argv = [*argv, "-q"]  # (without -q the steps done before the error print first, on their own lines)
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
