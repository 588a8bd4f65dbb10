"""Screenshots of report.html in headless Chromium, to look at what users see.

Two uses::

    # screenshot existing reports
    python studies/report_screenshots.py shot REPORT_DIR OUT.png [REPORT_DIR OUT.png ...]

    # a 100-class report: a synthetic evaluation whose "test images" are real photographs
    # (15-Scenes files under 100 made-up class names), then its screenshot
    python studies/report_screenshots.py synthetic DATASET_DIR OUT_DIR OUT.png --classes 100

Needs Debian's ``chromium`` (``apt-get install chromium``); uses the DevTools client of
``tests/_browser.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from classify_images.pipeline.interfaces.report import write_report
from classify_images.pipeline.storage.provenance import library_versions
from classify_images.pipeline.training.evaluation import Evaluation, Predictions
from tests._browser import open_page

PROBE = "JSON.stringify(Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length)"


def shot(report_dir: Path, png: Path) -> None:
    seen = open_page(report_dir / "report.html", PROBE, screenshot=png)
    print(f"{png}: console errors {seen['errors'] or 'none'}, broken images {seen['value']}")


def synthetic(dataset: Path, out_dir: Path, n_classes: int, per_class: int, seed: int) -> None:
    """Evaluation of ``n_classes`` made-up classes, ``per_class`` real images each, most of them right."""
    rng = np.random.default_rng(seed)
    files = sorted(str(p) for p in dataset.rglob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
    y_true = np.repeat(np.arange(n_classes), per_class)
    difficulty = rng.uniform(1.0, 4.5, n_classes)
    scores = rng.normal(size=(y_true.size, n_classes))
    # a few look-alike pairs, so that the most-confused table has structure
    for a in range(0, n_classes - 1, 7):
        scores[y_true == a, a + 1] += 1.2
    scores[np.arange(y_true.size), y_true] += difficulty[y_true]
    y_pred = np.argmax(scores, axis=1)
    confusion = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(confusion, (y_true, y_pred), 1)
    names = [f"category_{k:03d}" for k in range(n_classes)]
    paths = [files[i] for i in rng.choice(len(files), size=y_true.size, replace=False)]
    evaluation = Evaluation(
        "pmsvm",
        {"p": -1.0},
        "synthetic (15-Scenes images under 100 made-up classes)",
        "0" * 40,
        15 * n_classes,
        int(y_true.size),
        21504,
        names,
        confusion,
        12.3,
        1.2,
        float(np.mean(np.diag(confusion) / confusion.sum(axis=1))),
        predictions=Predictions.from_scores(paths, y_true, y_pred, scores),
        config={"note": "synthetic evaluation for the report's layout at 100 classes"},
        versions=library_versions(),
        date="2026-11-24T00:00:00+00:00",
    )
    write_report(evaluation, out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_shot = sub.add_parser("shot")
    p_shot.add_argument("pairs", nargs="+", help="REPORT_DIR OUT.png, repeated")
    p_syn = sub.add_parser("synthetic")
    p_syn.add_argument("dataset", type=Path)
    p_syn.add_argument("out_dir", type=Path)
    p_syn.add_argument("png", type=Path)
    p_syn.add_argument("--classes", type=int, default=100)
    p_syn.add_argument("--per-class", type=int, default=10)
    p_syn.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "shot":
        if len(args.pairs) % 2:
            parser.error("give REPORT_DIR OUT.png pairs")
        for report_dir, png in zip(args.pairs[::2], args.pairs[1::2]):
            shot(Path(report_dir), Path(png))
    else:
        synthetic(args.dataset, args.out_dir, args.classes, args.per_class, args.seed)
        shot(args.out_dir, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
