"""The report of an evaluation and of an experiment: report.html, report.json, predictions.csv.

The page is parsed with the standard library's HTML parser here; ``tests/test_report_browser.py``
opens it in a real browser.
"""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from classify_images.pipeline.interfaces.report import write_report
from classify_images.pipeline.interfaces.report_html import class_order, confusion_figure
from classify_images.pipeline.training.evaluation import Evaluation, Predictions

from .conftest import FIXTURE_IMAGES


class _Page(HTMLParser):
    """Rows of every table (by id), the images, and the hover titles of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, int] = {}
        self.images: list[dict] = []
        self.titles = 0
        self._table = None
        self._in_tbody = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("id")
            self.rows[self._table] = 0
        elif tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._in_tbody:
            self.rows[self._table] += 1
        elif tag == "img":
            self.images.append(attrs)
        elif tag == "title":
            self.titles += 1

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_tbody = False


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def synthetic_evaluation(n_classes: int = 5, per_class: int = 6, seed: int = 0, image_root: Path = FIXTURE_IMAGES):
    """An evaluation whose test images are real files (the fixture images, reused)."""
    rng = np.random.default_rng(seed)
    files = sorted(str(p) for p in image_root.rglob("*") if p.suffix.lower() in {".jpg", ".png", ".jpeg"})
    y_true = np.repeat(np.arange(n_classes), per_class)
    scores = rng.normal(size=(y_true.size, n_classes))
    scores[np.arange(y_true.size), y_true] += rng.uniform(0, 2.5, n_classes)[y_true]
    y_pred = np.argmax(scores, axis=1)
    confusion = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(confusion, (y_true, y_pred), 1)
    names = [f"class-{k:03d}" for k in range(n_classes)]
    paths = [files[i % len(files)] for i in range(y_true.size)]
    rates = np.diag(confusion) / confusion.sum(axis=1)
    return Evaluation(
        "pmsvm",
        {"C": "auto"},
        "features/synthetic",
        "f" * 40,
        100 * n_classes,
        int(y_true.size),
        64,
        names,
        confusion,
        1.5,
        0.25,
        float(rates.mean()),
        predictions=Predictions.from_scores(paths, y_true, y_pred, scores),
        config={"codebook": {"kind": "kmeans", "size": 16}},
        versions={"python": "3", "numpy": "2"},
        date="2026-11-24T08:00:00+00:00",
    )


def test_most_confused_pairs_are_the_largest_off_diagonal_cells():
    evaluation = synthetic_evaluation(n_classes=9, per_class=10)
    pairs = evaluation.most_confused(limit=1000)
    off = evaluation.confusion.copy()
    np.fill_diagonal(off, 0)
    assert len(pairs) == np.count_nonzero(off)
    assert [p["count"] for p in pairs] == sorted(off[off > 0].tolist(), reverse=True)
    names = evaluation.class_names
    for pair in pairs:
        i, j = names.index(pair["true"]), names.index(pair["predicted"])
        assert i != j and off[i, j] == pair["count"] and pair["rate"] == pair["count"] / 10


def test_report_files_agree(tmp_path):
    evaluation = synthetic_evaluation()
    out = write_report(evaluation, tmp_path)
    report = json.loads((out / "report.json").read_text())
    for key in ("most_confused", "misclassified", "config", "versions", "date", "per_class_accuracy"):
        assert report[key] == json.loads(json.dumps(evaluation.to_dict()[key]))
    assert report["predictions"] == "predictions.csv"
    with open(out / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == evaluation.n_test
    wrong = [row for row in rows if row["correct"] == "False"]
    assert len(wrong) == evaluation.n_test - np.trace(evaluation.confusion)
    assert all(row["true"] != row["predicted"] for row in wrong)
    misclassified = report["misclassified"]
    assert [m["score_predicted"] for m in misclassified] == sorted(
        (m["score_predicted"] for m in misclassified), reverse=True
    )


def test_report_html_content(tmp_path):
    evaluation = synthetic_evaluation()
    page = _parse(write_report(evaluation, tmp_path) / "report.html")
    n = len(evaluation.class_names)
    assert page.rows["per-class"] == n
    assert page.rows["confused"] == len(evaluation.most_confused())
    assert page.rows["versions"] == 2
    n_wrong = evaluation.n_test - int(np.trace(evaluation.confusion))
    gallery = [img for img in page.images if img.get("src", "").startswith("data:image/jpeg;base64,")]
    assert len(gallery) == min(n_wrong, 48) > 0
    confusion = [img for img in page.images if img.get("id") == "confusion"]
    assert len(confusion) == 1 and confusion[0]["src"].startswith("data:image/png;base64,")
    assert page.titles == 1 + np.count_nonzero(evaluation.confusion)  # the page title + one per non-zero cell
    text = (tmp_path / "report.html").read_text()
    assert "http://" not in text and "https://" not in text  # self-contained: nothing fetched


def test_per_class_rows_are_worst_first(tmp_path):
    evaluation = synthetic_evaluation(n_classes=7)
    order = class_order(evaluation)
    rates = evaluation.per_class_accuracy[order]
    assert np.all(np.diff(rates) >= 0)
    text = (write_report(evaluation, tmp_path) / "report.html").read_text()
    positions = [text.index(f"<td>{evaluation.class_names[k]}</td>") for k in order]
    assert positions == sorted(positions)


@pytest.mark.parametrize("n_classes", [15, 101])
def test_confusion_png_stays_a_readable_size(n_classes):
    evaluation = synthetic_evaluation(n_classes=n_classes, per_class=3)
    figure = confusion_figure(evaluation.confusion, evaluation.class_names, class_order(evaluation))
    assert figure.width <= 1200 and figure.height <= 1000
    left, top, right, bottom = figure.box
    assert 0 <= left < right <= figure.width and 0 <= top < bottom <= figure.height
    assert (right - left) / n_classes >= 5  # a cell is at least 5 px: hoverable


def test_unreadable_gallery_image_is_a_text_not_a_broken_image(tmp_path):
    evaluation = synthetic_evaluation()
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    predictions = evaluation.predictions
    paths = [str(broken)] * len(predictions.paths)
    evaluation = Evaluation(
        **{
            **evaluation.__dict__,
            "predictions": Predictions(paths, predictions.y_true, predictions.y_pred, predictions.scores),
        }
    )
    page = _parse(write_report(evaluation, tmp_path / "rep") / "report.html")
    assert [img.get("id") for img in page.images] == ["confusion"]
    assert "image not readable" in (tmp_path / "rep" / "report.html").read_text()


def test_experiment_report(tmp_path, capsys):
    """``experiment`` writes the page with the runs table and mean ± std, and experiment.json."""
    from classify_images.pipeline.interfaces.report import write_experiment
    from classify_images.pipeline.storage.feature_store import FeatureSet
    from classify_images.pipeline.training.evaluation import run_experiment

    rng = np.random.default_rng(0)
    files = sorted(str(p.relative_to(FIXTURE_IMAGES)) for p in FIXTURE_IMAGES.rglob("*.*"))
    y = np.repeat(np.arange(3), 8)
    X = (rng.random((3, 6))[y] + rng.normal(0, 0.4, (24, 6))).astype(np.float32)
    train = np.r_[0:4, 8:12, 16:20]
    test = np.setdiff1d(np.arange(24), train)
    manifest = {
        "class_names": ["a", "b", "c"],
        "config_hash": "c" * 40,
        "config": {"x": 1},
        "dataset": {"root": str(FIXTURE_IMAGES)},
        "split": {
            "train": [files[i] for i in train],
            "test": [files[i] for i in test],
            "train_per_class": 4,
            "test_per_class": None,
        },
    }
    fs = FeatureSet(tmp_path, manifest, X[train], X[test], y[train], y[test])
    experiment = run_experiment(fs, "linear", {}, 3)
    write_experiment(experiment, tmp_path / "out")
    write_report(experiment.first, tmp_path / "out", experiment=experiment)
    page = _parse(tmp_path / "out" / "report.html")
    assert page.rows["runs"] == 3 and page.rows["per-class"] == 3
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["experiment"]["mean"] == pytest.approx(experiment.mean) and len(report["experiment"]["runs"]) == 3
    assert report["mean_per_class_accuracy"] == experiment.runs[0].mean_per_class_accuracy
    with open(tmp_path / "out" / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(Path(row["path"]).exists() for row in rows)  # paths of the re-split are real files
    markdown = (tmp_path / "out" / "report.md").read_text()
    headline = markdown.split("## ")[0]  # report.md leads with the experiment, not with its first split
    assert headline.startswith("# Experiment: linear")
    assert f"{100 * experiment.mean:.2f} ± {100 * experiment.std:.2f} %" in headline
    assert all(f"seed {run.seed}: {100 * run.mean_per_class_accuracy:.2f} %" in headline for run in experiment.runs)
    assert f"training time: {round(experiment.runs[0].train_seconds, 4)} s" in markdown
    # every split's per-class rates, and their mean ± std per class (page, report.md, report.json)
    rates = np.array([run.per_class_accuracy for run in experiment.runs])
    assert rates.shape == (3, 3)
    np.testing.assert_array_equal(rates[0], experiment.first.per_class_accuracy)
    mean, std = rates.mean(axis=0), rates.std(axis=0, ddof=1)
    per_class = report["experiment"]["per_class_accuracy"]
    assert list(per_class) == ["a", "b", "c"]
    for k, name in enumerate("abc"):
        assert per_class[name] == {"mean": pytest.approx(mean[k]), "std": pytest.approx(std[k])}
        assert [r["per_class_accuracy"][name] for r in report["experiment"]["runs"]] == list(rates[:, k])
        assert f"| {name} | {100 * rates[0, k]:.2f} | {100 * mean[k]:.2f} ± {100 * std[k]:.2f} |" in markdown
    text = (tmp_path / "out" / "report.html").read_text()
    assert "<th>mean ± std, 3 splits</th>" in text
    for k in range(3):
        assert f'<td class="num">{100 * mean[k]:.1f} ± {100 * std[k]:.1f} %</td>' in text
    for run in experiment.runs:  # every split's accuracy and top-1 accuracy in the runs table
        assert (
            f'<td class="num">{run.seed}</td><td class="num">{100 * run.mean_per_class_accuracy:.2f} %</td>'
            f'<td class="num">{100 * run.top_k_accuracy[1]:.2f} %</td>'
        ) in text
    assert json.loads((tmp_path / "out" / "experiment.json").read_text())["per_class_accuracy"] == per_class


def test_missing_browser_says_what_to_install(monkeypatch, tmp_path):
    """The browser tests fail (not skip) with the install command when Chromium is absent."""
    from ._browser import BrowserMissing, chromium_binary

    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserMissing, match="apt-get install chromium"):
        chromium_binary()


def test_evaluate_help_names_every_report_file(tmp_path):
    """``evaluate --help`` lists the files ``write_report`` writes."""
    from classify_images.pipeline.interfaces.cli import build_parser

    written = sorted(path.name for path in write_report(synthetic_evaluation(), tmp_path).iterdir())
    description = build_parser()._subparsers._group_actions[0].choices["evaluate"].description
    assert written and all(name in description for name in written), (written, description)


# ------------------------------------------------------------------ report polish (issue 25, point 10)
def _with(evaluation: Evaluation, **changes) -> Evaluation:
    return Evaluation(**{**evaluation.__dict__, **changes})


def _ids(text: str) -> set[str]:
    import re

    return set(re.findall(r'\sid="([^"]+)"', text))


def test_header_names_the_classifier_without_empty_params(tmp_path):
    """``linear`` alone when every parameter is at its default; ``key=value`` for those set."""
    plain = _with(synthetic_evaluation(), classifier="linear", params={})
    text = (write_report(plain, tmp_path / "a") / "report.html").read_text()
    header = text[text.index('id="headline"') : text.index("Per-class accuracy")]
    assert "{}" not in header and "<code>" not in header
    assert '<b id="classifier">linear</b> (every parameter at its default;' in header
    tuned = _with(synthetic_evaluation(), classifier="linear", params={"C": 10.0, "loss": "hinge"})
    text = (write_report(tuned, tmp_path / "b") / "report.html").read_text()
    header = text[text.index('id="headline"') : text.index("Per-class accuracy")]
    assert "<code>C=10.0, loss=&quot;hinge&quot;</code>" in header and "{" not in header
    markdown = (tmp_path / "b" / "report.md").read_text()
    assert '- parameters: `C=10.0, loss="hinge"`' in markdown


def test_provenance_link_points_to_the_classifier_parameters(tmp_path):
    evaluation = _with(synthetic_evaluation(), classifier="linear", params={"C": 10.0})
    text = (write_report(evaluation, tmp_path) / "report.html").read_text()
    assert 'all in <a href="#classifier-parameters">Provenance</a>' in text
    assert "classifier-parameters" in _ids(text)
    target = text.index('id="classifier-parameters"')
    assert text.index('id="provenance"') < target < text.index('id="params"')  # inside Provenance, before the table
    params = text[text.index('id="params"') : text.index('id="pipeline-config"')]
    assert '<td>C</td><td class="changed">10.0</td>' in params  # every parameter, the set ones marked
    assert "<td>max_iter</td>" in params


def test_percent_cells_do_not_wrap(tmp_path):
    import re

    from classify_images.pipeline.interfaces.report_html import _CSS

    rule = re.search(r"td\.num\{([^}]*)\}", _CSS).group(1)
    assert "white-space:nowrap" in rule
    text = (write_report(synthetic_evaluation(), tmp_path) / "report.html").read_text()
    percents = re.findall(r"<td([^>]*)>[^<]*\d %</td>", text)
    assert percents and all('class="num"' in attrs for attrs in percents)


def test_config_is_shown_as_tables_of_the_keys_that_apply(tmp_path):
    from classify_images.pipeline.settings.config import PipelineConfig

    config = PipelineConfig.from_dict(
        {"codebook": {"kind": "kmeans", "size": 16}}
    ).to_dict()  # as a manifest records it
    assert "soft_beta" in config["codebook"] and "cache_descriptors" in config["sift"]
    evaluation = _with(synthetic_evaluation(), config=config)
    text = (write_report(evaluation, tmp_path) / "report.html").read_text()
    assert '<pre id="config">' not in text and "&quot;codebook&quot;" not in text
    block = text[text.index('id="pipeline-config"') :]
    page = _parse(tmp_path / "report.html")
    semantic = PipelineConfig.from_dict(config).to_dict(semantic_only=True)
    for table, values in semantic.items():
        assert f"<caption>[{table}]</caption>" in block
        assert page.rows[f"config-{table}"] == sum(value is not None for value in values.values())
    assert "soft_beta" not in block and "cache_descriptors" not in block  # keys that do not apply
    assert '<td>size</td><td class="changed">16</td><td class="muted">1024</td>' in block  # differs from the default
    assert '<td>levels</td><td class="">1, 2, 4</td>' in block  # readable lists


def test_gallery_thumbnails_link_to_the_full_image(tmp_path):
    from urllib.parse import unquote

    evaluation = synthetic_evaluation()
    out = write_report(evaluation, tmp_path / "deep" / "report")
    text = (out / "report.html").read_text()
    gallery = text[text.index('id="gallery"') :]
    import re

    links = re.findall(r'<a href="([^"]+)"><img src="data:image/jpeg;base64,', gallery)
    n_wrong = evaluation.n_test - int(np.trace(evaluation.confusion))
    assert len(links) == min(n_wrong, 48) > 0
    for href in links:
        assert not href.startswith(("/", "file:"))  # relative to the report
        assert (out / unquote(href)).resolve().is_file()
    assert "http://" not in text and "https://" not in text


def test_top_k_accuracy_in_report_and_console(tmp_path):
    from classify_images.pipeline.interfaces.report import evaluation_text

    evaluation = synthetic_evaluation(n_classes=7)
    top = evaluation.top_k_accuracy
    assert list(top) == [1, 3, 5] and top[1] == pytest.approx(evaluation.overall_accuracy)
    assert top[1] <= top[3] <= top[5]
    out = write_report(evaluation, tmp_path)
    report = json.loads((out / "report.json").read_text())
    assert report["top_k_accuracy"] == {str(k): v for k, v in top.items()}
    numbers = " / ".join(f"{100 * v:.2f}" for v in top.values())
    assert f'<span id="top-k">top-1 / top-3 / top-5 accuracy {numbers} %</span>' in (out / "report.html").read_text()
    assert f"- top-5 accuracy: {100 * top[5]:.2f} %" in (out / "report.md").read_text()
    assert f"top-1 / top-3 / top-5 accuracy: {numbers} %" in evaluation_text(evaluation, out)


def test_class_names_stay_escaped(tmp_path):
    evaluation = synthetic_evaluation()
    names = ["<b>bold</b>", 'say "hi"', "a&b", "x", "y"]
    evaluation = _with(evaluation, class_names=names)
    text = (write_report(evaluation, tmp_path) / "report.html").read_text()
    assert "<b>bold</b>" not in text and "&lt;b&gt;bold&lt;/b&gt;" in text and "a&amp;b" in text
