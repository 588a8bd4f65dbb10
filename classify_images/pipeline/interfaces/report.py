"""Reports of an evaluation or an experiment: HTML, JSON, CSV, markdown, the confusion plot, console text.

:func:`write_report` writes into one folder

``report.html``
    the page to look at, self-contained (:mod:`.report_html`): headline, per-class bars
    worst first, most-confused pairs, the confusion matrix with hover labels, misclassified
    test images, config, versions, date.
``report.json``
    :meth:`Evaluation.to_dict() <classify_images.pipeline.training.evaluation.Evaluation.to_dict>`
    (the same content; for an experiment also ``"experiment"``, its runs and mean ± std).
``predictions.csv``
    one row per test image: path, true and predicted class, correct, the decision values
    of the predicted and of the true class.
``report.md``
    the accuracies, sizes, timings and parameters, and one table row per class.
``confusion.png``
    the row-normalised confusion matrix (rows: true class), classes worst first.

and :func:`write_experiment` writes ``experiment.json``.  Every file goes through
:func:`~classify_images.pipeline.storage.atomic.atomic_write`.  These writers write where they are
told; the commands first check the folder with :func:`report_folder`
(:mod:`~classify_images.pipeline.storage.output_guard`: absent, empty, or a report folder of ours).  The ``*_text`` functions give
the lines the command line (and the demo) print, :func:`build_text` included.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..storage.atomic import atomic_write, atomic_write_json
from ..storage.output_guard import OutputFolder
from ..training.evaluation import EXPERIMENT_NOTE, PREDICTIONS_FILE, Evaluation, Experiment, TrainingResult
from .report_html import class_order, confusion_figure, params_text, pipeline_summary, render_html

if TYPE_CHECKING:
    from ..extraction.build import BuildResult

__all__ = [
    "REPORT_FILES",
    "EXPERIMENT_FILE",
    "report_folder",
    "build_text",
    "write_report",
    "write_experiment",
    "write_predictions",
    "plot_confusion",
    "markdown_report",
    "training_text",
    "evaluation_text",
    "experiment_text",
]


def markdown_report(evaluation: Evaluation, experiment: Experiment | None = None) -> str:
    """``report.md``: headline numbers, then one row per class.

    With ``experiment`` (whose first split ``evaluation`` is), the headline is the mean ± std
    over the splits and the per-split accuracies; the rest is the first split's, and says so.
    """
    report = evaluation.to_dict()
    seconds = {key: None if report[key] is None else round(report[key], 4) for key in ("train_seconds", "test_seconds")}
    summary = pipeline_summary(evaluation)
    facts = [
        *([f"- config: {summary['config']}"] if summary["config"] else []),
        *([f"- dataset: {summary['dataset']}"] if summary["dataset"] else []),
        *([f"- **warning:** {summary['advice']}"] if summary["advice"] else []),
    ]
    on = summary["dataset"] or report["feature_set"]  # the dataset folder, relative (not the feature set's path)
    if experiment is None:
        lines = [
            f"# Evaluation: {report['classifier']} on {on}",
            "",
            *facts,
            *([""] if facts else []),
        ]
        which = ""
    else:
        runs = experiment.runs
        lines = [
            f"# Experiment: {report['classifier']} on {on}",
            "",
            *facts,
            f"- mean per-class accuracy over {len(runs)} seeded splits: "
            f"**{100 * experiment.mean:.2f} ± {100 * experiment.std:.2f} %**",
            "- per split: " + ", ".join(f"seed {run.seed}: {100 * run.mean_per_class_accuracy:.2f} %" for run in runs),
        ]
        lines += [
            f"- top-{k} accuracy over the splits: {100 * m:.2f} ± {100 * sd:.2f} %"
            for k, (m, sd) in experiment.top_k_statistics().items()
        ]
        lines += [
            "",
            f"## Details of the first split (seed {runs[0].seed})",
            "",
        ]
        which = " (this split)"
    lines += [
        f"- mean per-class accuracy{which}: **{100 * report['mean_per_class_accuracy']:.2f} %**",
        f"- overall accuracy: {100 * report['overall_accuracy']:.2f} %",
        *[f"- top-{k} accuracy: {100 * v:.2f} %" for k, v in evaluation.top_k_accuracy.items()],
        f"- training images: {report['n_train']}, test images: {report['n_test']}, dimensions: {report['n_features']}",
        f"- training time: {seconds['train_seconds']} s, testing time: {seconds['test_seconds']} s",
        f"- parameters: {'`' + params_text(report['params']) + '`' if report['params'] else 'the defaults'}",
        *[f"- search: {line.strip()}" for line in search_lines(evaluation.search)],
        "",
    ]
    statistics = None if experiment is None or len(experiment.runs) < 2 else experiment.per_class_statistics()
    if statistics is None:
        lines += ["| class | accuracy (%) |", "|---|---:|"]
        lines += [f"| {name} | {100 * rate:.2f} |" for name, rate in report["per_class_accuracy"].items()]
    else:
        lines += [
            f"| class | accuracy, this split (%) | mean ± std over {len(experiment.runs)} splits (%) |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {name} | {100 * rate:.2f} | {100 * mean:.2f} ± {100 * std:.2f} |"
            for (name, rate), mean, std in zip(report["per_class_accuracy"].items(), *statistics)
        ]
    lines += [
        "",
        "Confusion matrix: `confusion.png` (rows: true class, normalised, worst class first). "
        "The full report: `report.html`; every test image: `predictions.csv`.",
        "",
    ]
    return "\n".join(lines)


def plot_confusion(
    confusion: np.ndarray, class_names: list[str], path: str | os.PathLike, order: np.ndarray | None = None
) -> None:
    """Row-normalised confusion matrix as a PNG (matplotlib's Agg backend, no display needed).

    The figure's size is capped and the tick labels are drawn only while legible
    (:func:`~classify_images.pipeline.interfaces.report_html.confusion_figure`).
    """
    totals = np.maximum(confusion.sum(axis=1, keepdims=True), 1)
    mean = 100 * np.mean(np.diag(confusion / totals))
    figure = confusion_figure(confusion, class_names, order, title=f"mean per-class accuracy {mean:.2f} %")
    with atomic_write(path, "wb") as handle:
        handle.write(figure.png)


def write_predictions(evaluation: Evaluation, path: str | os.PathLike) -> None:
    """``predictions.csv``: one row per test image (:meth:`Predictions.rows <classify_images.pipeline.training.evaluation.Predictions.rows>`)."""
    rows = evaluation.predictions.rows(evaluation.class_names) if evaluation.predictions is not None else []
    with atomic_write(path, "w") as handle:
        writer = csv.DictWriter(
            handle, ["path", "true", "predicted", "correct", "score_predicted", "score_true"], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)


#: The files :func:`write_report` writes.
REPORT_FILES = ("report.json", PREDICTIONS_FILE, "report.md", "confusion.png", "report.html")
#: The file :func:`write_experiment` writes.
EXPERIMENT_FILE = "experiment.json"


def report_folder(
    out_dir: str | os.PathLike, *, experiment: bool = False, run: dict | None = None, option: str = "--out"
) -> OutputFolder:
    """The output guard of a report folder (an experiment's with ``experiment``): :meth:`~.OutputFolder.check`
    it before the work, :meth:`~.OutputFolder.claim` it before :func:`write_report`."""
    names = (*REPORT_FILES, EXPERIMENT_FILE) if experiment else REPORT_FILES
    return OutputFolder(out_dir, names, "experiment" if experiment else "report", run=run, option=option)


def write_report(
    evaluation: Evaluation, out_dir: str | os.PathLike, *, experiment: Experiment | None = None, thumbnails: bool = True
) -> Path:
    """Write ``report.html``, ``report.json``, ``predictions.csv``, ``report.md`` and ``confusion.png`` into ``out_dir``.

    With ``experiment``, ``evaluation`` is its first split's and the page and
    ``report.json`` add the runs and their mean ± std.  ``thumbnails=False`` leaves the
    images out of the gallery (no image is read).
    """
    out_dir = Path(out_dir)
    payload = evaluation.to_dict()
    if experiment is not None:
        payload["experiment"] = experiment.to_dict()
    atomic_write_json(out_dir / "report.json", payload)
    write_predictions(evaluation, out_dir / PREDICTIONS_FILE)
    with atomic_write(out_dir / "report.md", "w") as handle:
        handle.write(markdown_report(evaluation, experiment))
    order = class_order(evaluation, experiment)
    mean = 100 * evaluation.mean_per_class_accuracy
    figure = confusion_figure(
        evaluation.confusion, evaluation.class_names, order, title=f"mean per-class accuracy {mean:.2f} %"
    )
    with atomic_write(out_dir / "confusion.png", "wb") as handle:
        handle.write(figure.png)
    with atomic_write(out_dir / "report.html", "w") as handle:
        handle.write(render_html(evaluation, figure, experiment=experiment, thumbnails=thumbnails, out_dir=out_dir))
    return out_dir


def write_experiment(experiment: Experiment, out_dir: str | os.PathLike) -> Path:
    """Write ``experiment.json`` into ``out_dir`` (created if needed); returns the file."""
    path = Path(out_dir) / EXPERIMENT_FILE
    atomic_write_json(path, experiment.to_dict())
    return path


def build_text(result: BuildResult, skipped: list[dict], timings: dict[str, float], *, max_listed: int = 10) -> str:
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
    """One line: what was trained, on how much, how fast, and where it was saved (and a line on
    the parameter search, if any, and its warning when the choice is on the grid's edge)."""
    images = (
        f"{training.n_samples} images"
        if not training.n_mirrors
        else f"{training.n_samples - training.n_mirrors} images + {training.n_mirrors} mirrors"
    )
    text = (
        f"trained {training.classifier} on {images} × {training.n_features} dims "
        f"in {training.train_seconds:.2f} s -> {model_path}"
    )
    return text + "".join(f"\n{line}" for line in search_lines(training.search))


def search_lines(search: dict | None) -> list[str]:
    """The parameter search's summary line and, when its choice is on the grid's edge, a warning line."""
    if search is None:
        return []
    from ...classifiers.model_selection import edge_warning, search_summary

    warning = edge_warning(search)
    return [f"  {search_summary(search)}"] + ([f"warning: {warning}"] if warning else [])


def evaluation_text(evaluation: Evaluation, report_dir: str | os.PathLike) -> str:
    """The accuracy table: the mean per-class accuracy, one line per class, the timings."""
    report = evaluation.to_dict()
    width = max(len(name) for name in evaluation.class_names)
    lines = [
        f"{evaluation.classifier}: mean per-class accuracy {100 * evaluation.mean_per_class_accuracy:.2f} % "
        f"on {evaluation.n_test} test images ({len(evaluation.class_names)} classes)"
    ]
    lines += [f"  {name:<{width}}  {100 * rate:6.2f} %" for name, rate in report["per_class_accuracy"].items()]
    top = evaluation.top_k_accuracy
    if top:
        lines.append(
            "  "
            + " / ".join(f"top-{k}" for k in top)
            + " accuracy: "
            + " / ".join(f"{100 * v:.2f}" for v in top.values())
            + " % (of all test images)"
        )
    lines.append(
        f"  training {report['train_seconds']} s, testing {report['test_seconds']} s; report: {report_dir}/report.html"
    )
    return "\n".join(lines)


def experiment_text(experiment: Experiment) -> str:
    """One line per run, then the mean ± standard deviation."""
    lines = [
        f"  seed {run.seed}: {100 * run.mean_per_class_accuracy:.2f} %  "
        f"(train {run.train_seconds:.2f} s, test {run.test_seconds:.2f} s"
        + ("" if run.chosen is None else "; chose " + ", ".join(f"{k} = {v}" for k, v in run.chosen.items()))
        + ("" if run.flips is None else ", " + ", ".join(f"{k} = {v}" for k, v in run.flips.items()))
        + ")"
        for run in experiment.runs
    ]
    warning = experiment.edge_warning()
    lines += [f"warning: {warning}"] if warning else []
    lines.append(
        f"{experiment.classifier}: {100 * experiment.mean:.2f} ± {100 * experiment.std:.2f} % "
        f"mean per-class accuracy over {len(experiment.runs)} splits ({EXPERIMENT_NOTE})"
    )
    top = experiment.top_k_statistics()
    if top:
        lines.append(
            "  "
            + ", ".join(f"top-{k} {100 * m:.2f} ± {100 * sd:.2f} %" for k, (m, sd) in top.items())
            + " (of all test images)"
        )
    return "\n".join(lines)
