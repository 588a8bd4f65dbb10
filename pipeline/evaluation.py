"""Training, evaluation and reports: mean per-class accuracy, confusion, timings.

The metric (DESIGN.md §3) is the mean per-class accuracy: the mean of the
diagonal of the row-normalised confusion matrix, so that every class counts
equally whatever its number of test images.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..classifiers.persistence import check_model_matches
from ..classifiers.registry import make_classifier
from .dataset import split_indices
from .feature_store import FeatureSet, write_json_atomic

__all__ = [
    "confusion_matrix",
    "mean_per_class_accuracy",
    "train_classifier",
    "evaluate_model",
    "run_experiment",
    "write_report",
]


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Counts ``C[i, j]`` of test images of class ``i`` predicted as ``j`` (int64)."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)), 1)
    return matrix


def per_class_accuracy(confusion: np.ndarray) -> np.ndarray:
    """Diagonal of the row-normalised confusion matrix (NaN for a class with no test image)."""
    totals = confusion.sum(axis=1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.diag(confusion) / totals


def mean_per_class_accuracy(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int | None = None) -> float:
    """Mean over classes (with test images) of the per-class recognition rate."""
    if n_classes is None:
        n_classes = int(max(np.max(y_true), np.max(y_pred))) + 1
    return float(np.nanmean(per_class_accuracy(confusion_matrix(y_true, y_pred, n_classes))))


def train_classifier(name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray):
    """Fit classifier ``name`` with ``params``; returns ``(estimator, seconds)``."""
    estimator = make_classifier(name, params)
    start = time.perf_counter()
    estimator.fit(X, y)
    return estimator, time.perf_counter() - start


def evaluate_model(model: Any, meta: dict, feature_set: FeatureSet) -> dict:
    """Score a loaded model on the test rows of ``feature_set``.

    Raises
    ------
    ModelFileError
        The model was trained on another feature set.
    """
    check_model_matches(meta, config_hash=feature_set.config_hash, n_features=feature_set.n_features)
    X_test = np.asarray(feature_set.X_test)
    start = time.perf_counter()
    predicted = model.predict(X_test)
    test_seconds = time.perf_counter() - start
    n_classes = len(feature_set.class_names)
    confusion = confusion_matrix(feature_set.y_test, predicted, n_classes)
    rates = per_class_accuracy(confusion)
    return {
        "classifier": meta["classifier"],
        "params": meta["params"],
        "feature_set": str(feature_set.path),
        "config_hash": feature_set.config_hash,
        "n_train": int(feature_set.X_train.shape[0]),
        "n_test": int(X_test.shape[0]),
        "n_features": feature_set.n_features,
        "mean_per_class_accuracy": float(np.nanmean(rates)),
        "overall_accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
        "per_class_accuracy": {name: float(rate) for name, rate in zip(feature_set.class_names, rates)},
        "class_names": feature_set.class_names,
        "confusion": confusion.tolist(),
        "train_seconds": meta.get("train_seconds"),
        "test_seconds": round(test_seconds, 4),
    }


def run_experiment(
    feature_set: FeatureSet, name: str, params: dict[str, Any], repeats: int, *, first_seed: int = 0, progress=None
) -> dict:
    """Mean ± std of the accuracy over ``repeats`` seeded re-splits of the stored rows.

    The rows of the training and test sets are pooled and split again with
    seeds ``first_seed … first_seed + repeats - 1`` under the feature set's
    protocol (``train_per_class``, ``test_per_class``).  The codebook (and a
    min-max normalisation, if any) stays the one learnt from the first split's
    training images, so the test images of later splits were seen, unlabelled,
    by the codebook — the usual practice when reporting mean ± std, but say so.
    """
    X_all = np.concatenate([np.asarray(feature_set.X_train), np.asarray(feature_set.X_test)])
    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    split = feature_set.manifest["split"]
    n_classes = len(feature_set.class_names)
    runs = []
    seeds = range(first_seed, first_seed + repeats)
    for seed in (progress(seeds) if progress else seeds):
        train, test = split_indices(y_all, split["train_per_class"], split["test_per_class"], seed)
        estimator, train_seconds = train_classifier(name, params, X_all[train], y_all[train])
        start = time.perf_counter()
        predicted = estimator.predict(X_all[test])
        test_seconds = time.perf_counter() - start
        runs.append({
            "seed": seed,
            "mean_per_class_accuracy": mean_per_class_accuracy(y_all[test], predicted, n_classes),
            "train_seconds": round(train_seconds, 4),
            "test_seconds": round(test_seconds, 4),
        })
    accuracies = np.array([run["mean_per_class_accuracy"] for run in runs])
    return {
        "classifier": name,
        "params": params,
        "feature_set": str(feature_set.path),
        "config_hash": feature_set.config_hash,
        "repeats": repeats,
        "runs": runs,
        "mean": float(accuracies.mean()),
        "std": float(accuracies.std(ddof=1)) if repeats > 1 else 0.0,
        "note": "re-splits of the stored rows; the codebook was learnt from the first split's training images only",
    }


def _markdown_report(report: dict) -> str:
    lines = [
        f"# Evaluation: {report['classifier']} on {report['feature_set']}",
        "",
        f"- mean per-class accuracy: **{100 * report['mean_per_class_accuracy']:.2f} %**",
        f"- overall accuracy: {100 * report['overall_accuracy']:.2f} %",
        f"- training images: {report['n_train']}, test images: {report['n_test']}, dimensions: {report['n_features']}",
        f"- training time: {report['train_seconds']} s, testing time: {report['test_seconds']} s",
        f"- parameters: `{json.dumps(report['params'], sort_keys=True)}`",
        "",
        "| class | accuracy (%) |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {100 * rate:.2f} |" for name, rate in report["per_class_accuracy"].items()]
    lines += ["", "Confusion matrix: `confusion.png` (rows: true class, normalised).", ""]
    return "\n".join(lines)


def plot_confusion(confusion: np.ndarray, class_names: list[str], path: Path) -> None:
    """Row-normalised confusion matrix as a PNG (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
    normalised = confusion / totals
    size = max(4.0, 0.35 * len(class_names) + 2.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    image = ax.imshow(normalised, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(class_names)), class_names, rotation=90, fontsize=7)
    ax.set_yticks(range(len(class_names)), class_names, fontsize=7)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"mean per-class accuracy {100 * np.mean(np.diag(normalised)):.2f} %")
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def write_report(report: dict, out_dir: str | Path) -> Path:
    """Write ``report.json``, ``report.md`` and ``confusion.png`` into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "report.json", report)
    tmp = out_dir / ".report.md.tmp"
    tmp.write_text(_markdown_report(report), encoding="utf-8")
    tmp.replace(out_dir / "report.md")
    plot_confusion(np.asarray(report["confusion"]), report["class_names"], out_dir / "confusion.png")
    return out_dir
