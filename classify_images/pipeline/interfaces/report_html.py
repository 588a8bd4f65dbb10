"""``report.html``: one self-contained page to look at an evaluation.

The page needs no network and no other file: the confusion matrix (matplotlib PNG) and the
thumbnails of misclassified test images (made with OpenCV) are embedded as base64
``data:`` URIs, the bars are plain HTML/CSS.  It shows, in order:

1. the headline (mean per-class accuracy; mean ± std over the splits of an experiment),
   sizes, classifier and parameters, timings;
2. the per-class accuracy as bars, worst class first, with the class each is most often
   mistaken for;
3. the most-confused class pairs;
4. the row-normalised confusion matrix with the classes in the same worst-first order; the
   figure's size is capped, tick labels are drawn only while legible, and every non-zero
   cell carries its names and count as a hover label (an SVG ``<title>`` laid over the
   image, scaled with it), so it stays readable at 101 classes;
5. a gallery of misclassified test images, most confident mistakes first (thumbnail, true
   and predicted class, decision value);
6. the per-image predictions file, the pipeline config, library versions and the date.

Every function here is pure (data in, text or bytes out); :mod:`.report` writes the files.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from ..training.evaluation import PREDICTIONS_FILE, Evaluation, Experiment

__all__ = [
    "ConfusionFigure",
    "confusion_figure",
    "class_order",
    "thumbnail_data_uri",
    "image_href",
    "params_text",
    "config_tables",
    "render_html",
]

#: Largest side of the confusion figure, inches (at 100 dpi: pixels / 100).
MAX_FIGURE_INCHES = 10.0
#: Smallest tick-label font (points) drawn; below it the labels are left to the hover text.
MIN_LABEL_POINTS = 5.5
#: With more classes than this, the per-class table scrolls inside a box of ~30 rows.
SCROLL_ROWS = 40
#: Longer side of a gallery thumbnail, pixels.
THUMBNAIL_SIDE = 144


def class_order(evaluation: Evaluation, experiment: Experiment | None = None) -> np.ndarray:
    """Class indices sorted by per-class accuracy, worst first (classes without test images last):
    of an ``experiment``'s splits, by the mean over them (one split is not the class's rank)."""
    rates = evaluation.per_class_accuracy
    statistics = None if experiment is None or len(experiment.runs) < 2 else experiment.per_class_statistics()
    if statistics is not None:
        rates = statistics[0]
    return np.argsort(np.where(np.isnan(rates), np.inf, rates), kind="stable")


def pipeline_summary(evaluation: Evaluation) -> dict[str, str | None]:
    """What the report's header says of the pipeline: ``config`` (the shipped config the feature set
    was built with, by its settings, or "own settings"), ``dataset`` (its folder relative to the
    current one when below it, else its name) and ``advice`` (a classifier poorly suited to the
    features: :func:`~classify_images.pipeline.settings.recommendation.pairing_warning`)."""
    from ..settings.config import read_any_config
    from ..settings.defaults import RECOMMENDED_CONFIG
    from ..settings.recommendation import pairing_warning, shipped_config_name

    config_text, advice = None, None
    if evaluation.config:
        name = shipped_config_name(evaluation.config)
        config_text = (
            "own settings (see Pipeline config)"
            if name is None
            else name + (" (the recommended pipeline)" if name == RECOMMENDED_CONFIG else "")
        )
        try:
            advice = pairing_warning(read_any_config(evaluation.config, source="report"), evaluation.classifier)
        except (ValueError, TypeError):
            advice = None
    return {"config": config_text, "dataset": dataset_display(evaluation.dataset), "advice": advice}


def dataset_display(root: str | None) -> str | None:
    """A dataset folder as the header shows it: relative to the current folder when below it, else its name."""
    if not root:
        return None
    try:
        relative = os.path.relpath(root)
    except ValueError:  # another drive (Windows)
        relative = root
    return relative if not relative.startswith("..") and not os.path.isabs(relative) else Path(root).name


class ConfusionFigure:
    """The confusion PNG and where its cells are, for the hover labels.

    Attributes
    ----------
    png : bytes
    width, height : int
        Size of the PNG in pixels.
    box : tuple of float
        ``(left, top, right, bottom)`` of the matrix in image pixels (origin top left).
    """

    def __init__(self, png: bytes, width: int, height: int, box: tuple[float, float, float, float]) -> None:
        self.png, self.width, self.height, self.box = png, width, height, box


def confusion_figure(
    confusion: np.ndarray, class_names: Sequence[str], order: np.ndarray | None = None, title: str | None = None
) -> ConfusionFigure:
    """Row-normalised confusion matrix (rows: true class) as a PNG of capped size.

    ``order`` permutes rows and columns alike (the diagonal stays the diagonal).  The
    figure grows with the number of classes up to :data:`MAX_FIGURE_INCHES`; tick labels
    are drawn only when their font would be at least :data:`MIN_LABEL_POINTS`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(class_names)
    order = np.arange(n) if order is None else np.asarray(order)
    matrix = confusion[np.ix_(order, order)]
    normalised = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    names = [class_names[k] for k in order]
    size = min(MAX_FIGURE_INCHES, max(4.0, 0.3 * n + 2.5))
    fig, ax = plt.subplots(figsize=(size + 1.2, size), dpi=100)
    image = ax.imshow(normalised, vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02, label="fraction of the true class")
    fig.tight_layout()
    cell_points = ax.get_window_extent().height / fig.dpi * 72.0 / max(n, 1)
    # every class labelled if the font is legible, else every step-th class at the smallest legible font
    step = max(1, int(np.ceil(MIN_LABEL_POINTS / (0.8 * cell_points))))
    font = min(9.0, 0.8 * cell_points * step)
    ticks = np.arange(0, n, step)
    ax.set_xticks(ticks, [names[k] for k in ticks], rotation=90, fontsize=font)
    ax.set_yticks(ticks, [names[k] for k in ticks], fontsize=font)
    every = "" if step == 1 else f"; every {_ordinal(step)} class labelled, hover a cell in report.html for its names"
    ax.set_xlabel(f"predicted class ({n} classes, worst first{every})")
    ax.set_ylabel("true class")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.canvas.draw()
    width, height = (int(v) for v in fig.canvas.get_width_height())
    extent = ax.get_window_extent()
    box = (float(extent.x0), float(height - extent.y1), float(extent.x1), float(height - extent.y0))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return ConfusionFigure(buffer.getvalue(), width, height, box)


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def thumbnail_data_uri(path: str, side: int = THUMBNAIL_SIDE, *, max_pixels: int | None = None) -> str | None:
    """A JPEG thumbnail (longer side ``side``) of the image at ``path`` as a ``data:`` URI; None if
    unreadable, not a regular file (a FIFO is not waited on) or above ``max_pixels`` — decoded by
    :func:`~classify_images.features.preprocess.load_bgr`, with the guards the features have
    (``max_pixels`` None: the default cap)."""
    import cv2

    from ...features.preprocess import DEFAULT_MAX_PIXELS, ImageReadError, load_bgr

    try:
        image = load_bgr(path, max_pixels=DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels)
    except (ImageReadError, OSError):
        return None
    h, w = image.shape[:2]
    scale = side / max(h, w)
    if scale < 1.0:
        image = cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 82])
    return "data:image/jpeg;base64," + base64.b64encode(encoded.tobytes()).decode("ascii") if ok else None


# ------------------------------------------------------------------ HTML pieces
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#222}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.headline{font-size:2.6em;font-weight:600;margin:.1em 0}.muted{color:#666}.small{font-size:.85em}
table{border-collapse:collapse;font-size:.9em}td,th{padding:2px 8px;text-align:left;vertical-align:middle}
th{border-bottom:1px solid #bbb}tr:nth-child(even) td{background:#f7f7f7}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.bar{height:12px;background:#3b75af;border-radius:2px}.barbox{width:320px;background:#e8e8e8;border-radius:2px}
.bar.low{background:#c8553d}.bar.mid{background:#e0a030}
.confusion{position:relative;display:inline-block;max-width:100%}.confusion img{display:block;max-width:100%;height:auto}
.confusion svg{position:absolute;left:0;top:0;width:100%;height:100%}.confusion rect{fill:transparent}
.confusion rect:hover{stroke:#f33;stroke-width:2;fill:rgba(255,255,255,.15)}
.gallery{display:flex;flex-wrap:wrap;gap:10px}.card{width:156px;border:1px solid #ddd;border-radius:4px;padding:5px;font-size:.8em;overflow-wrap:anywhere}
.card img{display:block;margin:0 auto 4px;max-width:144px;max-height:144px}.true{color:#2a7a2a}.pred{color:#b02a2a}
.scroll{max-height:560px;overflow-y:auto;display:inline-block;border:1px solid #ddd}
.scroll thead th{position:sticky;top:0;background:#fff}
pre{background:#f4f4f4;padding:8px;overflow:auto;font-size:.8em;max-height:360px}
.config{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start}.config caption{text-align:left;font-weight:600}
.config td.changed{font-weight:600}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pct(rate: float) -> str:
    return "–" if rate is None or np.isnan(rate) else f"{100 * rate:.1f} %"


def _pct_std(mean: float, std: float) -> str:
    return "–" if mean is None or np.isnan(mean) else f"{100 * mean:.1f} ± {100 * std:.1f} %"


def _changed_params(classifier: str, params: dict) -> dict:
    """The parameters that differ from the classifier's defaults (all of them if it is unknown)."""
    from ...classifiers.registry import ClassifierParameterError, classifier_class

    try:
        defaults = classifier_class(classifier)().get_params()
    except ClassifierParameterError:
        return dict(params)
    return {k: v for k, v in params.items() if k not in defaults or defaults[k] != v}


def _all_params(classifier: str, params: dict) -> dict:
    """Every parameter of the classifier: its defaults, overridden by ``params`` (``params`` alone if unknown)."""
    from ...classifiers.registry import ClassifierParameterError, classifier_class

    try:
        defaults = classifier_class(classifier)().get_params()
    except ClassifierParameterError:
        defaults = {}
    return {**defaults, **params}


def params_text(params: dict) -> str:
    """``key=value`` pairs (values as JSON), sorted, comma-separated; empty for no parameters."""
    return ", ".join(f"{key}={json.dumps(value, sort_keys=True)}" for key, value in sorted(params.items()))


def _headline(evaluation: Evaluation, experiment: Experiment | None) -> str:
    n_classes = len(evaluation.class_names)
    if experiment is not None and len(experiment.runs) > 1:
        headline = f"{100 * experiment.mean:.2f} ± {100 * experiment.std:.2f} %"
        sub = (
            f"mean per-class accuracy over {len(experiment.runs)} seeded splits "
            f"(seeds {experiment.runs[0].seed}–{experiment.runs[-1].seed}); the details below are those of "
            f"seed {experiment.runs[0].seed} ({100 * evaluation.mean_per_class_accuracy:.2f} %)"
        )
    else:
        headline = f"{100 * evaluation.mean_per_class_accuracy:.2f} %"
        sub = "mean per-class accuracy"
    train = "–" if evaluation.train_seconds is None else f"{evaluation.train_seconds:.2f} s"
    changed = params_text(_changed_params(evaluation.classifier, evaluation.params))
    params = (
        f" <code>{_e(changed)}</code> (other parameters at their defaults;"
        if changed
        else " (every parameter at its default;"
    )
    return (
        f'<p class="headline" id="headline">{_e(headline)}</p><p>{_e(sub)}; overall accuracy '
        f"{100 * evaluation.overall_accuracy:.2f} %{_top_k_text(evaluation, experiment)}.</p>"
        f'<p class="muted">{n_classes} classes · {evaluation.n_train} training and {evaluation.n_test} test images · '
        f'{evaluation.n_features} dimensions · classifier <b id="classifier">{_e(evaluation.classifier)}</b>'
        f'{params} all in <a href="#classifier-parameters">Provenance</a>) · training {train}, '
        f"testing {evaluation.test_seconds:.2f} s</p>{_search_html(evaluation, experiment)}"
    )


def _search_html(evaluation: Evaluation, experiment: Experiment | None = None) -> str:
    """A paragraph on the cross-validated parameter choice (and its edge warning: of any split of an
    experiment), if there was one."""
    if evaluation.search is None:
        return ""
    from ...classifiers.model_selection import edge_warning, search_summary

    warning = (
        edge_warning(evaluation.search) if experiment is None or len(experiment.runs) < 2 else experiment.edge_warning()
    )
    which = (
        ""
        if experiment is None or len(experiment.runs) < 2
        else f"Split of seed {experiment.runs[0].seed} (every split's choice: the Splits table): "
    )
    return (
        f'<p id="search">{_e(which + search_summary(evaluation.search))}'
        + (f"<br><b>warning:</b> {_e(warning)}" if warning else "")
        + "</p>"
    )


def _top_k_text(evaluation: Evaluation, experiment: Experiment | None) -> str:
    """``; top-1 / top-3 / top-5 accuracy a / b / c %`` (mean ± std over the splits of an experiment)."""
    if experiment is not None and len(experiment.runs) > 1 and experiment.top_k_statistics():
        stats = experiment.top_k_statistics()
        return (
            '; <span id="top-k">'
            + ", ".join(f"top-{k} accuracy {100 * m:.2f} ± {100 * sd:.2f} %" for k, (m, sd) in stats.items())
            + "</span>"
        )
    top = evaluation.top_k_accuracy
    if not top:
        return ""
    return (
        '; <span id="top-k">'
        + " / ".join(f"top-{k}" for k in top)
        + " accuracy "
        + " / ".join(f"{100 * v:.2f}" for v in top.values())
        + " %</span>"
    )


def _pipeline_html(summary: dict[str, str | None]) -> str:
    """The header line naming the config and the dataset folder, and the pairing advice if any."""
    facts = []
    if summary["config"] is not None:
        facts.append(f'config <b id="config-name">{_e(summary["config"])}</b>')
    if summary["dataset"] is not None:
        facts.append(f'dataset <code id="dataset">{_e(summary["dataset"])}</code>')
    text = f'<p class="muted" id="pipeline">{" · ".join(facts)}</p>' if facts else ""
    if summary["advice"]:
        text += f'<p id="advice"><b>warning:</b> {_e(summary["advice"])}</p>'
    return text


def _runs_table(experiment: Experiment | None) -> str:
    if experiment is None:
        return ""
    ks = sorted(experiment.top_k_statistics())
    chosen = sorted({key for run in experiment.runs for key in (run.chosen or {})})  # every split's own choice
    rows = "".join(
        f'<tr><td class="num">{run.seed}</td><td class="num">{100 * run.mean_per_class_accuracy:.2f} %</td>'
        + "".join(f'<td class="num">{100 * run.top_k_accuracy[k]:.2f} %</td>' for k in ks)
        + "".join(f'<td class="num">{_e(str((run.chosen or {}).get(key, "–")))}</td>' for key in chosen)
        + f'<td class="num">{run.train_seconds:.2f}</td><td class="num">{run.test_seconds:.2f}</td></tr>'
        for run in experiment.runs
    )
    top_k = "".join(f"<th>top-{k} accuracy</th>" for k in ks)
    chosen_header = "".join(f"<th>{_e(key)} chosen</th>" for key in chosen)
    return (
        '<h2>Splits</h2><table id="runs"><thead><tr><th>seed</th><th>mean per-class accuracy</th>'
        f"{top_k}{chosen_header}<th>train s</th><th>test s</th></tr></thead><tbody>{rows}</tbody></table>"
        f'<p class="small muted">{_e(experiment.to_dict()["note"])}</p>'
    )


def _per_class_table(evaluation: Evaluation, order: np.ndarray, experiment: Experiment | None = None) -> str:
    rates = evaluation.per_class_accuracy
    statistics = None if experiment is None or len(experiment.runs) < 2 else experiment.per_class_statistics()
    confusion = evaluation.confusion
    totals = confusion.sum(axis=1)
    rows = []
    for rank, k in enumerate(order, start=1):
        rate = rates[k]
        off = confusion[k].copy()
        off[k] = 0
        mistaken = f"{_e(evaluation.class_names[int(np.argmax(off))])} ({int(off.max())})" if off.max() > 0 else ""
        width = 0.0 if np.isnan(rate) else 100.0 * rate
        level = "low" if width < 50 else "mid" if width < 75 else ""
        rows.append(
            f'<tr><td class="num">{rank}</td><td>{_e(evaluation.class_names[k])}</td>'
            f'<td><div class="barbox"><div class="bar {level}" style="width:{width:.1f}%"></div></div></td>'
            f'<td class="num">{_pct(rate)}</td>'
            + ("" if statistics is None else f'<td class="num">{_pct_std(statistics[0][k], statistics[1][k])}</td>')
            + f'<td class="num">{int(totals[k])}</td><td>{mistaken}</td></tr>'
        )
    scroll = len(order) > SCROLL_ROWS
    note = f'<p class="small muted">{len(order)} classes: the table scrolls (worst first).</p>' if scroll else ""
    if statistics is not None:
        first = experiment.runs[0].seed
        note += (
            f'<p class="small muted">Order: the mean over the {len(experiment.runs)} splits, worst first; '
            f"bars, test images and mistakes: the split of seed {first}; "
            f"mean ± std: over the {len(experiment.runs)} splits (sample standard deviation).</p>"
        )
        header = f"<th>seed {first}</th><th></th><th>mean ± std, {len(experiment.runs)} splits</th>"
    else:
        header = "<th>accuracy</th><th></th>"
    return (
        f'<h2>Per-class accuracy, worst first</h2>{note}<div class="{"scroll" if scroll else ""}">'
        f'<table id="per-class"><thead><tr><th>#</th><th>class</th>{header}'
        "<th>test images</th><th>most often predicted instead</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _confused_table(evaluation: Evaluation, limit: int) -> str:
    pairs = evaluation.most_confused(limit)
    if not pairs:
        return "<h2>Most-confused pairs</h2><p>No test image was misclassified.</p>"
    rows = "".join(
        f'<tr><td>{_e(p["true"])}</td><td>{_e(p["predicted"])}</td><td class="num">{p["count"]}</td>'
        f'<td class="num">{_pct(p["rate"])}</td></tr>'
        for p in pairs
    )
    return (
        '<h2>Most-confused pairs</h2><table id="confused"><thead><tr><th>true class</th><th>predicted as</th>'
        f"<th>images</th><th>of the true class</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _confusion_block(evaluation: Evaluation, order: np.ndarray, figure: ConfusionFigure) -> str:
    left, top, right, bottom = figure.box
    n = len(order)
    cw, ch = (right - left) / n, (bottom - top) / n
    matrix = evaluation.confusion[np.ix_(order, order)]
    totals = np.maximum(matrix.sum(axis=1), 1)
    names = [evaluation.class_names[k] for k in order]
    cells = []
    for i, j in zip(*np.nonzero(matrix)):
        label = f"true {names[i]} → predicted {names[j]}: {matrix[i, j]} ({100 * matrix[i, j] / totals[i]:.0f} %)"
        cells.append(
            f'<rect x="{left + j * cw:.1f}" y="{top + i * ch:.1f}" width="{cw:.2f}" height="{ch:.2f}">'
            f"<title>{_e(label)}</title></rect>"
        )
    data = base64.b64encode(figure.png).decode("ascii")
    return (
        '<h2>Confusion matrix</h2><p class="small muted">Rows: true class, columns: predicted class, both in the '
        "order of the table above (worst first); each row is normalised by the class's test images. "
        "Hover a cell for its classes and count. Also saved as <code>confusion.png</code>.</p>"
        f'<div class="confusion"><img id="confusion" alt="confusion matrix" width="{figure.width}" '
        f'height="{figure.height}" src="data:image/png;base64,{data}">'
        f'<svg viewBox="0 0 {figure.width} {figure.height}" preserveAspectRatio="none">{"".join(cells)}</svg></div>'
    )


def image_href(path: str, out_dir: str | os.PathLike | None = None) -> str:
    """A link to the image ``path`` from a page in ``out_dir``: relative when both are local
    paths on one drive, else a ``file:`` URI (or the path itself, if relative and no ``out_dir``)."""
    image = Path(path)
    if out_dir is not None:
        try:
            relative = os.path.relpath(image.resolve(), Path(out_dir).resolve())
        except ValueError:  # another drive (Windows)
            relative = None
        if relative is not None:
            return quote(Path(relative).as_posix())
    return image.resolve().as_uri() if image.is_absolute() else quote(image.as_posix())


def _gallery(evaluation: Evaluation, limit: int, thumbnails: bool, out_dir: str | os.PathLike | None = None) -> str:
    wrong = evaluation.misclassified(limit)
    total = (
        0
        if evaluation.predictions is None
        else int(np.sum(evaluation.predictions.y_true != evaluation.predictions.y_pred))
    )
    if not wrong:
        return "<h2>Misclassified test images</h2><p>None.</p>"
    cards = []
    for row in wrong:
        uri = thumbnail_data_uri(row["path"]) if thumbnails else None
        href = _e(image_href(row["path"], out_dir))
        picture = (
            f'<a href="{href}"><img src="{uri}" alt="{_e(row["path"])}" title="{_e(row["path"])}"></a>'
            if uri
            else f'<p class="muted">(image not readable: <a href="{href}">{_e(row["path"])}</a>)</p>'
        )
        cards.append(
            f'<div class="card">{picture}<span class="true">true: {_e(row["true"])}</span><br>'
            f'<span class="pred">predicted: {_e(row["predicted"])}</span><br>'
            f'<span class="muted">score {row["score_predicted"]:+.3f} (true class {row["score_true"]:+.3f})</span></div>'
        )
    return (
        f'<h2>Misclassified test images</h2><p class="small muted">The {len(wrong)} most confident mistakes '
        f"of {total} (largest decision value of the predicted class first); click a thumbnail for the image. Scores are decision values, not "
        f'probabilities. Every test image: <a href="{PREDICTIONS_FILE}">{PREDICTIONS_FILE}</a>.</p>'
        f'<div class="gallery" id="gallery">{"".join(cards)}</div>'
    )


def config_tables(config: dict | None) -> list[tuple[str, list[tuple[str, Any, Any]]]]:
    """The keys of a pipeline config that apply, per table: ``[(table, [(key, value, default), …]), …]``.

    :meth:`PipelineConfig.to_dict(semantic_only=True)
    <classify_images.pipeline.settings.config.PipelineConfig.to_dict>` (no other encoder's keys, no
    option that changes no number); ``default`` is the value the key takes when not set (None
    if unknown).  A config that does not read as a pipeline config is shown as recorded.
    """
    if not config:
        return []
    from ..settings.config import ConfigError, PipelineConfig

    try:
        values = PipelineConfig.from_dict(config, source="report").to_dict(semantic_only=True)
        defaults = PipelineConfig().to_dict(semantic_only=True)
    except (ConfigError, TypeError, ValueError):
        values, defaults = config, {}
    tables = []
    for name, table in values.items():
        if not isinstance(table, dict):
            table = {"": table}
        known = defaults.get(name, {})
        tables.append((name, [(key, value, known.get(key)) for key, value in table.items() if value is not None]))
    return tables


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value)
    return "true" if value is True else "false" if value is False else str(value)


def _config_block(config: dict | None) -> str:
    tables = config_tables(config)
    if not tables:
        return '<h3 id="pipeline-config">Pipeline config</h3><p id="config">(not recorded)</p>'
    blocks = []
    for name, rows in tables:
        cells = "".join(
            f'<tr><td>{_e(key)}</td><td class="{"changed" if default is not None and value != default else ""}">'
            f'{_e(_value(value))}</td><td class="muted">'
            f"{'' if default is None or value == default else _e(_value(default))}</td></tr>"
            for key, value, default in rows
        )
        blocks.append(
            f'<table id="config-{_e(name)}"><caption>[{_e(name)}]</caption><thead><tr><th>key</th>'
            f"<th>value</th><th>default</th></tr></thead><tbody>{cells}</tbody></table>"
        )
    return (
        '<h3 id="pipeline-config">Pipeline config</h3><p class="small muted">The keys that apply to this '
        "feature set, one table per config table; values in bold differ from the default shown next to them.</p>"
        f'<div class="config" id="config">{"".join(blocks)}</div>'
    )


def _provenance(evaluation: Evaluation) -> str:
    versions = evaluation.versions or {}
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in versions.items())
    changed = _changed_params(evaluation.classifier, evaluation.params)
    params = "".join(
        f'<tr><td>{_e(k)}</td><td class="{"changed" if k in changed else ""}">'
        f"{_e(json.dumps(v, sort_keys=True, default=str))}</td></tr>"
        for k, v in sorted(_all_params(evaluation.classifier, evaluation.params).items())
    )
    params_table = (
        f'<p class="small muted">Values in bold are set; the others are the defaults.</p>'
        f'<table id="params"><thead><tr><th>parameter</th><th>value</th></tr></thead><tbody>{params}'
        "</tbody></table>"
        if params
        else '<p id="params">(no parameters)</p>'
    )
    return (
        f'<h2 id="provenance">Provenance</h2><p>Date: <span id="date">{_e(evaluation.date or "not recorded")}</span> '
        f"· feature set <code>{_e(evaluation.feature_set)}</code> (config hash "
        f"<code>{_e(evaluation.config_hash[:12])}</code>)</p>"
        f'<table id="versions"><thead><tr><th>component</th><th>version</th></tr></thead><tbody>{rows}</tbody></table>'
        f'<h3 id="classifier-parameters">Classifier parameters</h3>{params_table}' + _config_block(evaluation.config)
    )


def render_html(
    evaluation: Evaluation,
    figure: ConfusionFigure,
    *,
    experiment: Experiment | None = None,
    max_pairs: int = 20,
    max_gallery: int = 48,
    thumbnails: bool = True,
    out_dir: str | os.PathLike | None = None,
) -> str:
    """The whole page (a string); ``figure`` is :func:`confusion_figure` in :func:`class_order`.

    ``out_dir``, the folder the page goes to, makes the gallery's links to the full images
    relative to it (:func:`image_href`)."""
    order = class_order(evaluation, experiment)
    summary = pipeline_summary(evaluation)
    title = f"{evaluation.classifier} on {summary['dataset'] or evaluation.feature_set}"
    if summary["config"] is not None and not summary["config"].startswith("own settings"):
        title = f"{summary['config'].split(' (')[0]} + {title}"  # fisher-flip-rootsift + linear on my-photos
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        + _pipeline_html(summary)
        + _headline(evaluation, experiment)
        + _runs_table(experiment)
        + _per_class_table(evaluation, order, experiment)
        + _confused_table(evaluation, max_pairs)
        + _confusion_block(evaluation, order, figure)
        + _gallery(evaluation, max_gallery, thumbnails, out_dir)
        + _provenance(evaluation)
        + "</body></html>\n"
    )
