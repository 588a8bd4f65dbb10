"""Digests of what the pipeline computes: feature sets, new-image features and trained models.

Used by ``tests/test_golden_digests.py`` to check that a refactoring changes no number: the
digests recorded in ``tests/data/golden_digests.json`` were computed before the change, and the
test recomputes them.  ``python -m tests._digests --write`` (from the repository root) records
them anew — only after a change that is *meant* to alter the numbers (and bumps an
``IMPLEMENTATION_VERSION``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden_digests.json"
FIXTURE_IMAGES = DATA / "images"

_BASE = {
    "dataset": {"train_per_class": 5, "test_per_class": 5, "seed": 0},
    "image": {"max_side": 96},
    "sift": {"patch_sizes": [16], "step": 8},
    "pooling": {"levels": [1, 2]},
}

#: Small configs covering every code path that produces numbers: k-means + average + l1,
#: k-means + sqrt + min-max (the one normalisation fitted on the training rows), sparse
#: coding + max + l2 (ScSPM), sparse coding + abs + power.
FIXTURE_CONFIGS = {
    "bof-l1": {**_BASE, "codebook": {"kind": "kmeans", "size": 16, "n_samples": 3000, "n_iter": 20},
               "pooling": {"method": "average", "levels": [1, 2]}, "normalization": {"method": "l1"}},
    "bof-minmax": {**_BASE, "codebook": {"kind": "kmeans", "size": 16, "n_samples": 3000, "n_iter": 20},
                   "pooling": {"method": "sqrt", "levels": [1, 2]}, "normalization": {"method": "minmax"}},
    "scspm-l2": {**_BASE, "codebook": {"kind": "sparse", "size": 24, "n_samples": 3000, "n_iter": 30, "lambda": 0.15},
                 "pooling": {"method": "max", "levels": [1, 2]}, "normalization": {"method": "l2"}},
    "sc-power": {**_BASE, "codebook": {"kind": "sparse", "size": 24, "n_samples": 3000, "n_iter": 30, "lambda": 0.15},
                 "pooling": {"method": "abs", "levels": [1, 2]}, "normalization": {"method": "power"}},
}

#: Every classifier, seeded where it is random.
CLASSIFIER_RUNS = {
    "linear": ("linear", {}),
    "pmsvm": ("pmsvm", {"random_state": 0}),
    "pmsvm-lut": ("pmsvm", {"lut_bins": 100, "p": -8, "random_state": 0}),
    "mbkl": ("mbkl", {"random_state": 0}),
    "nsvm": ("nsvm", {"random_state": 0}),
}


def array_digest(*named: tuple[str, np.ndarray]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes of arrays."""
    sha = hashlib.sha256()
    for name, array in named:
        array = np.ascontiguousarray(array)
        sha.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        sha.update(array.tobytes())
    return sha.hexdigest()


def feature_set_digest(feature_set) -> str:
    names = ["X_train", "X_test", "y_train", "y_test"]
    arrays = [(name, np.asarray(getattr(feature_set, name))) for name in names]
    arrays.append(("codebook", np.asarray(feature_set.codebook())))
    return array_digest(*arrays)


def model_digest(estimator) -> str:
    arrays = {key: np.asarray(value) for key, value in estimator._model_arrays().items()}
    arrays["classes_"] = np.asarray(estimator.classes_)
    return array_digest(*sorted(arrays.items()))


def compute_digests(dataset: Path, configs: dict, workdir: Path, classifiers: dict = CLASSIFIER_RUNS) -> dict:
    """Build every config on ``dataset``, featurise its test images as new images and train
    every classifier: ``{config: {"features", "new_images", "models": {run: digest}}}``."""
    from classify_images.classifiers.registry import make_classifier
    from classify_images.pipeline.build import build_feature_set
    from classify_images.pipeline.config import validate_config
    from classify_images.pipeline.extractor import FeatureExtractor
    from classify_images.pipeline.feature_store import load_feature_set

    result = {}
    for name, raw in configs.items():
        out = workdir / name
        build_feature_set(dataset, out, validate_config(json.loads(json.dumps(raw))), cache_dir=workdir / "cache")
        fs = load_feature_set(out)
        new_images = [str(Path(fs.manifest["dataset"]["root"]) / p) for p in fs.test_paths[:4]]
        X_new, _ = FeatureExtractor.from_feature_set(fs).transform_images(new_images)
        models = {}
        for run, (classifier, params) in classifiers.items():
            estimator = make_classifier(classifier, params).fit(np.asarray(fs.X_train), fs.y_train)
            models[run] = model_digest(estimator)
        result[name] = {
            "features": feature_set_digest(fs),
            "new_images": array_digest(("X", X_new)),
            "models": models,
        }
    return result


def real_configs() -> dict:
    """The shipped ``scspm`` and ``bof-spm`` configs, under Caltech-101's 15-training-image protocol."""
    import tomllib

    from classify_images.pipeline.config import named_configs

    configs = {}
    for name in ("scspm", "bof-spm"):
        raw = tomllib.loads(named_configs()[name].read_text())
        raw["dataset"].update(train_per_class=15, test_per_class=5)
        configs[name] = raw
    return configs


def main(argv: list[str]) -> int:
    """``--write``: the fixture digests; ``--write-real DATASETS``: the caltech101-mini ones."""
    if argv not in (["--write"],) and not (len(argv) == 2 and argv[0] == "--write-real"):
        print("usage: python -m tests._digests --write | --write-real DATASETS_FOLDER", file=sys.stderr)
        return 2
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        if argv[0] == "--write":
            golden["fixture"] = compute_digests(FIXTURE_IMAGES, FIXTURE_CONFIGS, Path(tmp))
        else:
            golden["caltech101-mini"] = compute_digests(Path(argv[1]) / "caltech101-mini", real_configs(), Path(tmp))
    GOLDEN.write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
