"""Golden values of what the pipeline computes: feature sets, new-image features and trained models.

Used by ``tests/test_golden_digests.py`` to check that a change alters no number unnoticed.
Every array is recorded as a *sketch* (``array_sketch``): its shape, dtype and SHA-256 digest,
and, for floating-point arrays, its Euclidean norm and its projections on eight fixed random
unit vectors.  Integer arrays (labels) must match exactly.  Float arrays must match within
``rtol`` of their norm: ``|Δ norm| ≤ rtol·‖a‖`` and ``|Δ projection| ≤ rtol·‖a‖`` — a random
projection of a change ``Δa`` is of the order of ``‖Δa‖/√n`` or larger for all but a vanishing
set of directions, so any change larger than a rounding difference is seen, while a processor or
library build that rounds differently (another SIMD width, another BLAS kernel) is not mistaken
for a change.  Whether the arrays were also bit-identical is reported by ``compare_sketches``.

``python -m tests._digests --write`` (from the repository root) records them anew — only after
a change that is *meant* to alter the numbers (and bumps an ``IMPLEMENTATION_VERSION``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from sklearn.metrics import balanced_accuracy_score

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
    "bof-l1": {
        **_BASE,
        "codebook": {"kind": "kmeans", "size": 16, "n_samples": 3000, "n_iter": 20},
        "pooling": {"method": "average", "levels": [1, 2]},
        "normalization": {"method": "l1"},
    },
    "bof-minmax": {
        **_BASE,
        "codebook": {"kind": "kmeans", "size": 16, "n_samples": 3000, "n_iter": 20},
        "pooling": {"method": "sqrt", "levels": [1, 2]},
        "normalization": {"method": "minmax"},
    },
    "scspm-l2": {
        **_BASE,
        "codebook": {"kind": "sparse", "size": 24, "n_samples": 3000, "n_iter": 30, "lambda": 0.15},
        "pooling": {"method": "max", "levels": [1, 2]},
        "normalization": {"method": "l2"},
    },
    "sc-power": {
        **_BASE,
        "codebook": {"kind": "sparse", "size": 24, "n_samples": 3000, "n_iter": 30, "lambda": 0.15},
        "pooling": {"method": "abs", "levels": [1, 2]},
        "normalization": {"method": "power"},
    },
}

#: Every classifier, seeded where it is random.
CLASSIFIER_RUNS = {
    "linear": ("linear", {}),
    "pmsvm": ("pmsvm", {"random_state": 0}),
    "pmsvm-lut": ("pmsvm", {"lut_bins": 100, "p": -8, "random_state": 0}),
    "mbkl": ("mbkl", {"random_state": 0}),
    "nsvm": ("nsvm", {"random_state": 0}),
}


#: Relative tolerance of float arrays.  Features come from closed-form kernels (dense SIFT,
#: pooling); models from iterative solvers whose stopping point moves with rounding, hence a
#: looser bound.
RTOL = {"features": 1e-4, "new_images": 1e-4, "models": 1e-3}
N_PROJECTIONS = 8
N_ROW_BLOCKS = 128
N_COLUMN_BLOCKS = 64


def _projections(size: int) -> np.ndarray:
    """``N_PROJECTIONS`` fixed random unit vectors of length ``size`` (seeded by the size)."""
    directions = np.random.default_rng(size).standard_normal((N_PROJECTIONS, size))
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


def _block_sums(matrix: np.ndarray, axis: int, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Sums and absolute sums over ``n_blocks`` contiguous blocks along ``axis``
    (each block then summed over the other axis)."""
    other = 1 - axis
    edges = np.linspace(0, matrix.shape[axis], min(n_blocks, matrix.shape[axis]) + 1).astype(int)[:-1]
    totals, absolute = matrix.sum(axis=other), np.abs(matrix).sum(axis=other)
    return np.add.reduceat(totals, edges), np.add.reduceat(absolute, edges)


def _marginals(matrix: np.ndarray) -> dict[str, list[float]]:
    """Sums and absolute sums of blocks of rows and of blocks of columns: a change of one
    entry shows in its row block and its column block."""
    row_sum, row_abs = _block_sums(matrix, 0, N_ROW_BLOCKS)
    block_sum, block_abs = _block_sums(matrix, 1, N_COLUMN_BLOCKS)
    return {
        "row_sum": row_sum.tolist(),
        "row_abs": row_abs.tolist(),
        "block_sum": block_sum.tolist(),
        "block_abs": block_abs.tolist(),
    }


def array_sketch(array) -> dict:
    """Shape, dtype, SHA-256 and, for floats, the norm, random projections, and row-block and
    column-block sums of an array (a 1-D array is one row; more dimensions fold into columns)."""
    array = np.ascontiguousarray(np.asarray(array))
    if array.dtype.kind in "US":  # class names: compare them as text
        array = np.asarray([str(item) for item in array.ravel()]).reshape(array.shape)
    sketch = {
        "shape": list(array.shape),
        "dtype": array.dtype.str,
        "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
    }
    if array.dtype.kind == "f" and array.size:
        flat = array.astype(np.float64).ravel()
        sketch["norm"] = float(np.linalg.norm(flat))
        sketch["projections"] = (_projections(flat.size) @ flat).tolist()
        sketch.update(_marginals(flat.reshape(array.shape[0] if array.ndim > 1 else 1, -1)))
    return sketch


def _float_difference(got: dict, expected: dict, rtol: float) -> str | None:
    """How ``got`` departs from ``expected`` beyond ``rtol`` (relative to the magnitude of
    what is summed), or None."""
    atol = 1e-7 * (expected["norm"] + 1e-30)
    checks = [
        ("norm", [got["norm"]], [expected["norm"]], [expected["norm"]]),
        ("projection", got["projections"], expected["projections"], [expected["norm"]] * N_PROJECTIONS),
        ("row block", got["row_sum"], expected["row_sum"], expected["row_abs"]),
        ("column block", got["block_sum"], expected["block_sum"], expected["block_abs"]),
    ]
    for what, values, recorded, scale in checks:
        excess = np.abs(np.subtract(values, recorded)) - (rtol * np.asarray(scale) + atol)
        if excess.max() > 0:
            worst = int(excess.argmax())
            return (
                f"{what} {worst} differs: {values[worst]:.9g} vs recorded {recorded[worst]:.9g} "
                f"(allowed ±{rtol * scale[worst] + atol:.3g})"
            )
    return None


def compare_sketches(got: dict, expected: dict, rtol: float) -> tuple[list[str], bool]:
    """``(differences, bit_identical)`` between two ``{name: sketch}`` mappings."""
    differences, identical = [], True
    for name in sorted(set(got) | set(expected)):
        if name not in got or name not in expected:
            differences.append(f"{name}: present in only one of computed / recorded")
            continue
        g, e = got[name], expected[name]
        identical &= g["sha256"] == e["sha256"]
        if g["shape"] != e["shape"] or g["dtype"] != e["dtype"]:
            differences.append(f"{name}: shape/dtype {g['shape']} {g['dtype']} != recorded {e['shape']} {e['dtype']}")
        elif "norm" not in e:
            if g["sha256"] != e["sha256"]:
                differences.append(f"{name}: non-float values differ")
        elif (found := _float_difference(g, e, rtol)) is not None:
            differences.append(f"{name}: {found}")
    return differences, identical


def feature_set_sketch(feature_set) -> dict:
    sketch = {name: array_sketch(getattr(feature_set, name)) for name in ["X_train", "X_test", "y_train", "y_test"]}
    sketch["codebook"] = array_sketch(feature_set.codebook())
    return sketch


def model_sketch(estimator) -> dict:
    sketch = {key: array_sketch(value) for key, value in estimator._model_arrays().items()}
    sketch["classes_"] = array_sketch(estimator.classes_)
    return sketch


def compute_digests(dataset: Path, configs: dict, workdir: Path, classifiers: dict = CLASSIFIER_RUNS) -> dict:
    """Build every config on ``dataset``, featurise its test images as new images and train
    every classifier: ``{config: {"features": sketches, "new_images": sketches,
    "models": {run: sketches}}}`` (see ``array_sketch``)."""
    from classify_images.classifiers.registry import make_classifier
    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.settings.config import validate_config
    from classify_images.pipeline.storage.feature_store import load_feature_set

    result = {}
    for name, raw in configs.items():
        out = workdir / name
        build_feature_set(dataset, out, validate_config(json.loads(json.dumps(raw))), cache_dir=workdir / "cache")
        fs = load_feature_set(out)
        new_images = [str(Path(fs.manifest["dataset"]["root"]) / p) for p in fs.test_paths[:4]]
        X_new, _ = FeatureExtractor.from_feature_set(fs).transform_images(new_images)
        models, accuracy = {}, {}
        for run, (classifier, params) in classifiers.items():
            estimator = make_classifier(classifier, params).fit(np.asarray(fs.X_train), fs.y_train)
            models[run] = model_sketch(estimator)
            accuracy[run] = round(
                float(balanced_accuracy_score(fs.y_test, estimator.predict(np.asarray(fs.X_test)))), 6
            )
        result[name] = {
            "features": feature_set_sketch(fs),
            "new_images": {"X": array_sketch(X_new)},
            "models": models,
            "accuracy": accuracy,
        }
    return result


def processor_signature() -> str:
    """What the real-data values depend on beyond the code: numba's code target (``NUMBA_CPU_NAME``,
    else the host's LLVM CPU name) and OpenBLAS's kernel.  A codebook learnt by k-means or
    dictionary learning from thousands of real descriptors is chaotic in their last bits: another
    target rounds a few descriptors differently and the learner ends in another local optimum
    (measured: caltech101-mini's codebooks differ between ``znver4`` and ``skylake-avx512`` by
    0.1–0.3 % of their norm, far beyond rounding)."""
    import os

    from llvmlite import binding
    from threadpoolctl import threadpool_info

    cpu = os.environ.get("NUMBA_CPU_NAME") or binding.get_host_cpu_name()
    blas = sorted(
        {str(info.get("architecture")) for info in threadpool_info() if info.get("internal_api") == "openblas"}
    )
    return f"{cpu} / OpenBLAS {','.join(blas) or 'none'}"


def real_configs() -> dict:
    """The shipped ``scspm`` and ``bof-spm`` configs, under Caltech-101's 15-training-image protocol."""
    import tomllib

    from classify_images.pipeline.settings.config import named_configs

    configs = {}
    for name in ("scspm", "bof-spm"):
        raw = tomllib.loads(named_configs()[name].read_text())
        raw.pop("classifier", None)  # (the [classifier] table is not the feature pipeline's)
        raw["dataset"].update(train_per_class=15, test_per_class=5)
        configs[name] = raw
    return configs


def compare_digests(got: dict, expected: dict) -> tuple[list[str], bool]:
    """Differences beyond ``RTOL`` between one config's computed and recorded values, and
    whether everything was bit-identical."""
    differences, identical = [], True
    for part, rtol in RTOL.items():
        if part == "models":
            pairs = [
                (f"model {run}", got[part].get(run, {}), expected[part].get(run, {}))
                for run in sorted(set(got[part]) | set(expected[part]))
            ]
        else:
            pairs = [(part, got[part], expected[part])]
        for label, g, e in pairs:
            found, same = compare_sketches(g, e, rtol)
            differences += [f"{label}: {d}" for d in found]
            identical &= same
    return differences, identical


def main(argv: list[str]) -> int:
    """``--write``: the fixture digests; ``--write-real DATASETS``: the caltech101-mini ones of this
    processor kind (:func:`processor_signature`), kept beside those of the kinds recorded before."""
    if argv not in (["--write"],) and not (len(argv) == 2 and argv[0] == "--write-real"):
        print("usage: python -m tests._digests --write | --write-real DATASETS_FOLDER", file=sys.stderr)
        return 2
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        if argv[0] == "--write":
            golden["fixture"] = compute_digests(FIXTURE_IMAGES, FIXTURE_CONFIGS, Path(tmp))
        else:
            # the exact values of this processor kind beside the others'; the first kind recorded
            # stays the reference of the processor-independent checks (labels, shapes, accuracy)
            digests = compute_digests(Path(argv[1]) / "caltech101-mini", real_configs(), Path(tmp))
            golden.setdefault("caltech101-mini-exact", {})[processor_signature()] = digests
            golden.setdefault("caltech101-mini", digests)
    GOLDEN.write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
