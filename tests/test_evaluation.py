"""Evaluation (classify_images/pipeline/training/evaluation.py) and reports (classify_images/pipeline/interfaces/report.py).

The confusion matrix and the mean per-class accuracy come from ``sklearn.metrics``; the
reference functions below are the hand-written code they replaced, and the tests check
that the numbers are the same, bit for bit, in every case a feature set can produce.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix

from classify_images.pipeline.interfaces.report import evaluation_text, experiment_text, write_experiment, write_report
from classify_images.pipeline.storage.feature_store import FeatureSet
from classify_images.pipeline.training.evaluation import (
    EXPERIMENT_NOTE,
    Evaluation,
    mean_per_class_accuracy,
    per_class_accuracy,
    run_experiment,
    train_classifier,
)


def reference_confusion(y_true, y_pred, n_classes):
    """The hand-written confusion matrix the pipeline used before ``sklearn.metrics``."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)), 1)
    return matrix


def reference_mean_per_class_accuracy(y_true, y_pred, n_classes):
    """NaN-mean of the row-normalised diagonal (NaN: a class with no test image)."""
    confusion = reference_confusion(y_true, y_pred, n_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.nanmean(np.diag(confusion) / confusion.sum(axis=1).astype(np.float64)))


def _random_predictions(rng, n_classes, n_per_class, *, never_predicted=()):
    y_true = np.repeat(np.arange(n_classes), n_per_class)
    y_pred = np.where(rng.random(y_true.size) < 0.6, y_true, rng.integers(0, n_classes, y_true.size))
    for label in never_predicted:
        y_pred[y_pred == label] = (label + 1) % n_classes
    return y_true, y_pred


@pytest.mark.parametrize("n_classes", [2, 3, 7, 8, 15, 102])
def test_metrics_equal_the_hand_written_ones_bit_for_bit(n_classes):
    """Every class has test images (as in every feature set), some classes are never predicted."""
    rng = np.random.default_rng(n_classes)
    for trial in range(200):
        n_per_class = rng.integers(1, 12, n_classes)
        never = rng.choice(n_classes, size=min(2, n_classes - 1), replace=False) if trial % 2 else ()
        y_true, y_pred = _random_predictions(rng, n_classes, n_per_class, never_predicted=never)
        expected = reference_confusion(y_true, y_pred, n_classes)
        got = confusion_matrix(y_true, y_pred, labels=np.arange(n_classes))
        assert got.dtype == np.int64 and np.array_equal(got, expected)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a never-predicted class raises no warning
            assert mean_per_class_accuracy(y_true, y_pred) == reference_mean_per_class_accuracy(
                y_true, y_pred, n_classes
            )


def test_class_without_test_images_does_not_count():
    """Class 2 has no test image (and is predicted once, class 3 never): it is left out, no warning."""
    y_true = np.array([0, 0, 0, 1, 1, 3, 3, 3])
    y_pred = np.array([0, 0, 1, 1, 2, 0, 1, 1])
    rates = per_class_accuracy(confusion_matrix(y_true, y_pred, labels=np.arange(4)))
    np.testing.assert_array_equal(rates[[0, 1, 3]], [2 / 3, 1 / 2, 0.0])
    assert np.isnan(rates[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = mean_per_class_accuracy(y_true, y_pred, n_classes=4)
    assert got == reference_mean_per_class_accuracy(y_true, y_pred, 4) == (2 / 3 + 1 / 2 + 0.0) / 3


def test_classes_without_test_images_many_classes_same_value_to_rounding():
    """With 8 classes or more and a class without test images, NumPy's pairwise sum groups the
    terms differently (the NaN-mean sums a zero in the absent class's place): same value up to
    the last bits.  Feature sets never have such a class (``split_indices`` refuses it)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n_classes = int(rng.integers(8, 40))
        y_true, y_pred = _random_predictions(rng, n_classes, rng.integers(0, 6, n_classes))
        if y_true.size == 0:
            continue
        expected = reference_mean_per_class_accuracy(y_true, y_pred, n_classes)
        assert mean_per_class_accuracy(y_true, y_pred) == pytest.approx(expected, rel=1e-14, abs=0)


# ----------------------------------------------------------- on a feature set
CLASS_NAMES = ["circles", "lines", "dots"]


@pytest.fixture(scope="module")
def feature_set(tmp_path_factory):
    rng = np.random.default_rng(0)
    centres = rng.random((3, 6)).astype(np.float32) * 2

    def rows(n_per_class):
        y = np.repeat(np.arange(3), n_per_class)
        return (centres[y] + rng.normal(0, 0.6, (y.size, 6))).astype(np.float32), y.astype(np.int64)

    (X_train, y_train), (X_test, y_test) = rows(8), rows(6)
    manifest = {
        "class_names": CLASS_NAMES,
        "config_hash": "c" * 40,
        "split": {
            "train": [f"tr{i}" for i in range(24)],
            "test": [f"te{i}" for i in range(18)],
            "train_per_class": 8,
            "test_per_class": None,
        },
    }
    return FeatureSet(tmp_path_factory.mktemp("fs"), manifest, X_train, X_test, y_train, y_test)


@pytest.fixture(scope="module")
def evaluation(feature_set):
    from classify_images.pipeline.training.evaluation import evaluate_model

    training = train_classifier("linear", {"C": 1.0}, feature_set.X_train, feature_set.y_train)
    meta = {
        "classifier": "linear",
        "params": training.estimator.get_params(),
        "train_seconds": 0.5,
        "feature_set": {"config_hash": feature_set.config_hash, "n_features": feature_set.n_features},
    }
    return training, evaluate_model(training.estimator, meta, feature_set)


def test_training_result(feature_set, evaluation):
    training, _ = evaluation
    assert (training.classifier, training.n_samples, training.n_features) == ("linear", 24, 6)
    assert training.train_seconds >= 0 and training.estimator.classes_.tolist() == [0, 1, 2]
    assert training.to_dict() == {
        "classifier": "linear",
        "params": {"C": 1.0},
        "n_samples": 24,
        "n_mirrors": 0,
        "n_features": 6,
        "train_seconds": round(training.train_seconds, 4),
        "search": None,
    }


def test_evaluation_numbers(feature_set, evaluation):
    training, result = evaluation
    predicted = training.estimator.predict(feature_set.X_test)
    confusion = reference_confusion(feature_set.y_test, predicted, 3)
    np.testing.assert_array_equal(result.confusion, confusion)
    report = result.to_dict()
    assert list(report) == [
        "classifier",
        "params",
        "feature_set",
        "config_hash",
        "n_train",
        "n_test",
        "n_features",
        "mean_per_class_accuracy",
        "overall_accuracy",
        "top_k_accuracy",
        "per_class_accuracy",
        "class_names",
        "confusion",
        "train_seconds",
        "test_seconds",
        "most_confused",
        "misclassified",
        "predictions",
        "config",
        "search",
        "versions",
        "date",
    ]
    assert report["mean_per_class_accuracy"] == reference_mean_per_class_accuracy(feature_set.y_test, predicted, 3)
    assert report["overall_accuracy"] == np.trace(confusion) / confusion.sum()
    # top-k accuracy: only k below the 3 classes (top-3 of 3 classes is always 1); top-1 is the overall accuracy
    assert list(report["top_k_accuracy"]) == ["1"]
    assert report["top_k_accuracy"]["1"] == pytest.approx(report["overall_accuracy"])
    assert report["per_class_accuracy"] == {name: confusion[k, k] / 6 for k, name in enumerate(CLASS_NAMES)}
    assert (report["n_train"], report["n_test"], report["n_features"], report["train_seconds"]) == (24, 18, 6, 0.5)
    assert report["confusion"] == confusion.tolist() and report["class_names"] == CLASS_NAMES


def test_model_for_another_feature_set_is_refused(feature_set, evaluation):
    from classify_images.pipeline.training.evaluation import evaluate_model
    from classify_images.pipeline.training.model_file import ModelFileError

    training, _ = evaluation
    meta = {"classifier": "linear", "params": {}, "feature_set": {"config_hash": "d" * 40, "n_features": 6}}
    with pytest.raises(ModelFileError, match="re-train the model on this feature set"):
        evaluate_model(training.estimator, meta, feature_set)


def test_write_report(tmp_path, evaluation):
    _, result = evaluation
    out = write_report(result, tmp_path / "rep")
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(result.to_dict()))
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# Evaluation: linear on ") and "| dots |" in markdown
    assert (out / "confusion.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in out.iterdir()) == [
        "confusion.png",
        "predictions.csv",
        "report.html",
        "report.json",
        "report.md",
    ]  # no temporaries
    text = evaluation_text(result, out).splitlines()
    assert text[0].startswith("linear: mean per-class accuracy") and len(text) == 3 + len(CLASS_NAMES)
    assert text[-2].startswith("  top-1 accuracy: ")  # 3 classes: only top-1 (top-3 of 3 is always 100 %)


def test_evaluation_of_a_class_without_test_images_in_the_report(tmp_path):
    confusion = np.array([[3, 1, 0], [0, 0, 0], [1, 0, 2]])
    result = Evaluation("linear", {}, "fs", "c" * 40, 6, 7, 4, ["a", "b", "c"], confusion, None, 0.01, 0.7)
    report = result.to_dict()
    assert np.isnan(report["per_class_accuracy"]["b"]) and report["overall_accuracy"] == 5 / 7
    write_report(result, tmp_path)
    assert "| b | nan |" in (tmp_path / "report.md").read_text()


def test_run_experiment(tmp_path, feature_set):
    experiment = run_experiment(feature_set, "linear", {}, 3, first_seed=4)
    assert [run.seed for run in experiment.runs] == [4, 5, 6]
    accuracies = [run.mean_per_class_accuracy for run in experiment.runs]
    assert experiment.mean == np.mean(accuracies) and experiment.std == np.std(accuracies, ddof=1)
    path = write_experiment(experiment, tmp_path / "x")
    saved = json.loads(Path(path).read_text())
    assert list(saved) == [
        "classifier",
        "params",
        "feature_set",
        "config_hash",
        "repeats",
        "runs",
        "mean",
        "std",
        "top_k_accuracy",
        "per_class_accuracy",
        "note",
    ]
    assert list(saved["per_class_accuracy"]) == CLASS_NAMES and list(saved["top_k_accuracy"]) == ["1"]
    assert list(saved["runs"][0]["per_class_accuracy"]) == CLASS_NAMES
    assert saved["repeats"] == 3 and saved["note"] == EXPERIMENT_NOTE and saved["runs"][0]["seed"] == 4
    assert "±" in experiment_text(experiment).splitlines()[-1]
    single = run_experiment(feature_set, "linear", {}, 1)
    assert single.std == 0.0 and single.mean == single.runs[0].mean_per_class_accuracy


def test_testing_time_excludes_the_first_call_compilation():
    """The timed ``decision_function`` runs after one untimed call on a single row (numba's
    compilation on the first call in a process is not testing time), and the scores are those
    of the whole matrix."""
    from classify_images.pipeline.training import evaluation as module

    class Spy:
        classes_ = np.array(["a", "b", "c"])

        def __init__(self):
            self.calls = []

        def decision_function(self, X):
            self.calls.append(len(X))
            return np.asarray(X, dtype=np.float64)[:, :3]

    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    spy = Spy()
    predicted, scores, seconds = module._timed_decisions(spy, X, ["a", "b", "c"])
    assert spy.calls == [1, 4] and seconds >= 0
    np.testing.assert_array_equal(scores, X) and np.testing.assert_array_equal(predicted, [2, 2, 2, 2])
    spy.calls.clear()
    module._timed_decisions(spy, X[:0], ["a", "b", "c"])
    assert spy.calls == [0]  # nothing to warm up on an empty matrix


def test_top_k_accuracy_by_hand():
    """Top-k from the decision values: the true class among the k largest, every image counts."""
    from classify_images.pipeline.training.evaluation import top_k_accuracy

    rng = np.random.default_rng(3)
    scores = rng.normal(size=(40, 7))
    y = rng.integers(0, 7, 40)
    scores[:, 6] = -np.inf  # a class the classifier never saw ranks last
    ranks = np.sum(scores > scores[np.arange(40), y][:, None], axis=1)  # classes scored above the true one
    top = top_k_accuracy(y, scores)
    assert list(top) == [1, 3, 5]
    for k in (1, 3, 5):
        assert top[k] == pytest.approx(np.mean(ranks < k))
    assert list(top_k_accuracy(y % 4, scores[:, :4])) == [1, 3]  # k below the number of classes only
    two = top_k_accuracy(np.array([0, 1, 1]), np.array([[1.0, -1.0], [0.5, -0.5], [-2.0, 2.0]]))
    assert two == {1: pytest.approx(2 / 3)}
