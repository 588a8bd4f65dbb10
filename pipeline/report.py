"""Reports of an evaluation or an experiment: JSON, markdown, the confusion plot, console text.

:func:`write_report` writes into one folder

``report.json``
    :meth:`Evaluation.to_dict() <classify_images.pipeline.evaluation.Evaluation.to_dict>`.
``report.md``
    the accuracies, sizes, timings and parameters, and one table row per class.
``confusion.png``
    the row-normalised confusion matrix (rows: true class).

and :func:`write_experiment` writes ``experiment.json``.  Every file goes through
:func:`~classify_images.pipeline.atomic.atomic_write`.  The ``*_text`` functions give
the lines the command line (and the demo) print, :func:`build_text` included.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from typing import TYPE_CHECKING

from .atomic import atomic_write, atomic_write_json
from .evaluation import EXPERIMENT_NOTE, Evaluation, Experiment, TrainingResult

if TYPE_CHECKING:
    from .build import BuildResult

__all__ = [
    "build_text",
    "write_report",
    "write_experiment",
    "plot_confusion",
    "markdown_report",
    "training_text",
    "evaluation_text",
    "experiment_text",
]


def markdown_report(evaluation: Evaluation) -> str:
    """``report.md``: headline numbers, then one row per class."""
    report = evaluation.to_dict()
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


def plot_confusion(confusion: np.ndarray, class_names: list[str], path: str | os.PathLike) -> None:
    """Row-normalised confusion matrix as a PNG (matplotlib's Agg backend, no display needed)."""
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
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, dpi=100, format="png")
    plt.close(fig)


def write_report(evaluation: Evaluation, out_dir: str | os.PathLike) -> Path:
    """Write ``report.json``, ``report.md`` and ``confusion.png`` into ``out_dir`` (created if needed)."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "report.json", evaluation.to_dict())
    with atomic_write(out_dir / "report.md", "w") as handle:
        handle.write(markdown_report(evaluation))
    plot_confusion(evaluation.confusion, evaluation.class_names, out_dir / "confusion.png")
    return out_dir


def write_experiment(experiment: Experiment, out_dir: str | os.PathLike) -> Path:
    """Write ``experiment.json`` into ``out_dir`` (created if needed); returns the file."""
    path = Path(out_dir) / "experiment.json"
    atomic_write_json(path, experiment.to_dict())
    return path


def build_text(result: "BuildResult", skipped: list[dict], timings: dict[str, float], *, max_listed: int = 10) -> str:
    """What a build made: sizes, the first ``max_listed`` skipped files with their reason, time per stage."""
    lines = [
        f"feature set: {result.path}{'  (reused: already up to date)' if result.reused else ''}",
        f"  classes: {result.n_classes}   images: {result.n_images}   train: {result.n_train}   "
        f"test: {result.n_test}   skipped: {result.n_skipped}   dimensions: {result.n_features}",
    ]
    lines += [f"  skipped {entry['path']}: {entry['reason']}" for entry in skipped[:max_listed]]
    if len(skipped) > max_listed:
        lines.append(f"  … {len(skipped) - max_listed} more skipped files listed in {result.path / 'manifest.json'}")
    lines.append("  time per stage (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    return "\n".join(lines)


def training_text(training: TrainingResult, model_path: str | os.PathLike) -> str:
    """One line: what was trained, on how much, how fast, and where it was saved."""
    return (f"trained {training.classifier} on {training.n_samples} images × {training.n_features} dims "
            f"in {training.train_seconds:.2f} s -> {model_path}")


def evaluation_text(evaluation: Evaluation, report_dir: str | os.PathLike) -> str:
    """The accuracy table: the mean per-class accuracy, one line per class, the timings."""
    report = evaluation.to_dict()
    width = max(len(name) for name in evaluation.class_names)
    lines = [f"{evaluation.classifier}: mean per-class accuracy {100 * evaluation.mean_per_class_accuracy:.2f} % "
             f"on {evaluation.n_test} test images ({len(evaluation.class_names)} classes)"]
    lines += [f"  {name:<{width}}  {100 * rate:6.2f} %" for name, rate in report["per_class_accuracy"].items()]
    lines.append(f"  training {report['train_seconds']} s, testing {report['test_seconds']} s; "
                 f"report: {report_dir}/report.md")
    return "\n".join(lines)


def experiment_text(experiment: Experiment) -> str:
    """One line per run, then the mean ± standard deviation."""
    lines = [f"  seed {run.seed}: {100 * run.mean_per_class_accuracy:.2f} %  "
             f"(train {run.train_seconds:.2f} s, test {run.test_seconds:.2f} s)" for run in experiment.runs]
    lines.append(f"{experiment.classifier}: {100 * experiment.mean:.2f} ± {100 * experiment.std:.2f} % "
                 f"mean per-class accuracy over {len(experiment.runs)} splits ({EXPERIMENT_NOTE})")
    return "\n".join(lines)
