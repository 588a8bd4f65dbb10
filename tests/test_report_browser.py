"""report.html of a small run, opened in a real browser (headless Chromium).

Marked ``browser``: deselected by the README's default test run (it needs the system
browser, like the ``realdata`` tests need the datasets), run by ``.ci/run`` with
``-m browser`` after ``apt-get install chromium``.  Without Chromium the test FAILS with the
install instruction: it never skips.
"""

from __future__ import annotations

import csv
import json

import pytest

from classify_images.pipeline.interfaces.cli import main

from ._browser import BrowserMissing, chromium_binary, open_page
from .conftest import build_fixture_feature_set

pytestmark = pytest.mark.browser

PROBE = """JSON.stringify({
  images: Array.from(document.images).map(i => ({id: i.id, complete: i.complete, width: i.naturalWidth})),
  rows: Object.fromEntries(Array.from(document.querySelectorAll('table[id]')).map(
      t => [t.id, t.querySelectorAll('tbody tr').length])),
  hover: document.querySelectorAll('.confusion svg rect title').length,
  headline: document.getElementById('headline').textContent,
  bars: Array.from(document.querySelectorAll('#per-class .bar')).map(b => b.getBoundingClientRect().width),
  confusionBox: (() => { const r = document.getElementById('confusion').getBoundingClientRect();
                         return [r.width, r.height]; })(),
  overlayBox: (() => { const r = document.querySelector('.confusion svg').getBoundingClientRect();
                       return [r.width, r.height]; })(),
})"""


def _browser() -> None:
    try:
        chromium_binary()
    except BrowserMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """build-features, train, evaluate and experiment on the fixture images, through the CLI."""
    root = tmp_path_factory.mktemp("browser")
    fs = build_fixture_feature_set(root)
    assert main(["train", str(fs), "--classifier", "pmsvm", "--out", str(root / "m.npz")]) == 0
    assert main(["evaluate", str(fs), str(root / "m.npz"), "--out", str(root / "evaluation")]) == 0
    assert (
        main(["experiment", str(fs), "--classifier", "linear", "--repeats", "2", "--out", str(root / "experiment")])
        == 0
    )
    return root


@pytest.mark.parametrize("report", ["evaluation", "experiment"])
def test_report_renders_in_chromium(small_run, report, tmp_path):
    _browser()
    folder = small_run / report
    summary = json.loads((folder / "report.json").read_text())
    with open(folder / "predictions.csv", newline="") as handle:
        predictions = list(csv.DictReader(handle))
    n_wrong = sum(row["correct"] == "False" for row in predictions)

    seen = open_page(folder / "report.html", PROBE, screenshot=tmp_path / "page.png")
    assert seen["errors"] == [], seen["errors"]
    page = json.loads(seen["value"])
    # every image loads
    assert page["images"] and all(img["complete"] and img["width"] > 0 for img in page["images"]), page["images"]
    assert sum(img["id"] == "confusion" for img in page["images"]) == 1
    assert len(page["images"]) == 1 + min(n_wrong, 48)  # the confusion matrix + one thumbnail per mistake shown
    # the tables have the expected rows
    n_classes = len(summary["class_names"])
    assert page["rows"]["per-class"] == n_classes
    assert page["rows"].get("confused", 0) == len(summary["most_confused"])
    assert page["rows"]["versions"] == len(summary["versions"])
    if report == "experiment":
        assert page["rows"]["runs"] == 2 and "±" in page["headline"]
    confusion = summary["confusion"]
    assert page["hover"] == sum(1 for row in confusion for count in row if count)
    # the bars are drawn (widths follow the accuracies, worst first) and the hover layer covers the image
    assert page["bars"] == sorted(page["bars"])
    assert page["confusionBox"][0] > 100 and page["overlayBox"] == page["confusionBox"]
    assert (tmp_path / "page.png").read_bytes()[:4] == b"\x89PNG"
