"""``classify-images demo``: the whole pipeline on data that ships with scikit-learn.

scikit-learn bundles the UCI handwritten digits [1]_ (8×8-pixel images, 10 classes).
The demo writes them, upscaled to 64×64, as a folder of class folders, then builds
the feature set with the shipped config ``configs/digits.toml``, trains the linear
squared-hinge SVM, evaluates it and prints the accuracy table — the same library
calls the ``build-features``, ``train`` and ``evaluate`` commands make.  It prints
those equivalent commands as it goes, so that a user can re-run each step on their
own images.

References
----------
.. [1] E. Alpaydin and C. Kaynak, "Optical Recognition of Handwritten Digits",
   UCI Machine Learning Repository, 1998.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..storage.atomic import atomic_write, atomic_write_json

__all__ = ["DEMO_CONFIG", "DEMO_CLASSIFIER", "write_digits_dataset", "demo_commands", "run_demo"]

#: Name of the shipped config the demo builds its features with (``configs/digits.toml``).
DEMO_CONFIG = "digits"
#: Registered classifier the demo trains.
DEMO_CLASSIFIER = "linear"


def write_digits_dataset(root: str | Path, side: int = 64) -> Path:
    """Write scikit-learn's digits as ``root/digit_<label>/<index>.png`` (grayscale, ``side`` px).

    Existing files are kept (the write is idempotent), so a second demo run
    reuses the folder and the cache.
    """
    import cv2
    from sklearn.datasets import load_digits

    root = Path(root)
    digits = load_digits()
    for index, (image, label) in enumerate(zip(digits.images, digits.target)):
        path = root / f"digit_{label}" / f"{index:04d}.png"
        if path.exists():
            continue
        pixels = np.clip(255.0 - image * (255.0 / 16.0), 0, 255).astype(np.uint8)  # dark ink on white
        large = cv2.resize(pixels, (side, side), interpolation=cv2.INTER_CUBIC)
        with atomic_write(path, "wb") as handle:
            handle.write(cv2.imencode(".png", large)[1].tobytes())
    return root


def demo_commands(workdir: Path, *, n_jobs: int = 2, quiet: bool = False) -> list[list[str]]:
    """The ``classify-images`` arguments equivalent to the demo's three steps."""
    features, model = workdir / "features", workdir / f"model-{DEMO_CLASSIFIER}.npz"
    return [
        [
            "build-features",
            str(workdir / "digits"),
            "--config",
            DEMO_CONFIG,
            "--out",
            str(features),
            "--cache-dir",
            str(workdir / "cache"),
            "--n-jobs",
            str(n_jobs),
            *(["-q"] if quiet else []),
        ],
        ["train", str(features), "--classifier", DEMO_CLASSIFIER, "--out", str(model)],
        ["evaluate", str(features), str(model), "--out", str(workdir / "report")],
    ]


def run_demo(workdir: str | Path, *, n_jobs: int = 2, quiet: bool = False, force: bool = False) -> int:
    """Write the digits, build features, train the linear SVM, evaluate it and print the accuracy table.

    Files written under ``workdir``: ``digits/`` (images), ``cache/``, ``features/``,
    ``model-linear.npz``, ``report/`` and ``demo.json`` (the equivalent commands), and the
    marker of :mod:`~classify_images.pipeline.storage.output_guard`: ``workdir`` must be absent, empty
    or a demo folder of ours (``force``: replace those names in a folder not proven ours).

    Raises
    ------
    ConfigError, DatasetError, FeatureSetError, ModelFileError, OutputRefusedError
        As the equivalent commands would (the command line prints them as one line).
    """
    from ..execution.progress import tqdm_progress
    from ..extraction.build import build_feature_set
    from ..extraction.extractor import FeatureExtractor
    from ..settings.config import load_config
    from ..storage.feature_store import check_destination, load_feature_set
    from ..storage.output_guard import OutputFolder, check_output_file
    from ..training.evaluation import evaluate_model, train_classifier
    from ..training.model_file import load_model, save_model
    from .report import build_text, evaluation_text, report_folder, training_text, write_report

    workdir = Path(workdir)
    build, train, evaluate = commands = demo_commands(workdir, n_jobs=n_jobs, quiet=quiet)
    model_out, report_dir = train[-1], evaluate[-1]  # the --out of each command
    parts = ("digits", "cache", "features", Path(model_out).name, "report")
    folder = OutputFolder(workdir, (*parts, "demo.json"), "demo", parts=parts, option="--workdir")
    report = report_folder(report_dir, option="--workdir")
    folder.check(force)  # every output checked before any work
    check_destination(workdir / "features", workdir / "digits", force=force)
    check_output_file(model_out, "model file", force=force, option="--workdir")
    report.check(force)
    folder.claim(force)
    write_digits_dataset(workdir / "digits")

    _print_command(build)
    built = build_feature_set(
        workdir / "digits",
        workdir / "features",
        load_config(DEMO_CONFIG),
        n_jobs=n_jobs,
        cache_dir=workdir / "cache",
        progress=tqdm_progress(not quiet),
        force=force,
    )
    feature_set = load_feature_set(built.path)
    print(build_text(built, feature_set.manifest["skipped"], built.timings))

    _print_command(train)
    training = train_classifier(
        DEMO_CLASSIFIER, {}, np.asarray(feature_set.X_train), feature_set.y_train, class_names=feature_set.class_names
    )
    model_path = save_model(
        model_out,
        training.estimator,
        extractor=FeatureExtractor.from_feature_set(feature_set),
        feature_set=feature_set.identity(),
        train_seconds=training.train_seconds,
    )
    print(training_text(training, model_path))

    _print_command(evaluate)
    model, meta = load_model(model_path)
    evaluation = evaluate_model(model, meta, feature_set)
    with report.claim(force):
        write_report(evaluation, report_dir)
    print(evaluation_text(evaluation, report_dir))

    with folder:  # demo.json recorded by its bytes
        atomic_write_json(workdir / "demo.json", {"steps": [" ".join(argv) for argv in commands]})
    return 0


def _print_command(argv: list[str]) -> None:
    print("$ classify-images " + " ".join(argv), flush=True)
