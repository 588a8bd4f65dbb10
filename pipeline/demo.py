"""``classify-images demo``: the whole pipeline on data that ships with scikit-learn.

scikit-learn bundles the UCI handwritten digits (1797 images of 8×8 pixels,
10 classes).  The demo writes them, upscaled to 64×64, as a folder of class
folders, then runs build-features → train → evaluate on it exactly as a user
would on their own images, and prints the accuracy table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["write_digits_dataset", "DEMO_CONFIG", "run_demo"]

#: A small pipeline suited to 64×64 digit images.
DEMO_CONFIG = {
    "dataset": {"train_per_class": 50, "test_per_class": 0, "seed": 0},
    "image": {"max_side": 64},
    "sift": {"patch_sizes": [16], "step": 4},
    "codebook": {"kind": "kmeans", "size": 128, "n_samples": 20000, "n_iter": 50},
    "pooling": {"method": "average", "levels": [1, 2]},
    "normalization": {"method": "l1"},
}


def write_digits_dataset(root: str | Path, side: int = 64) -> Path:
    """Write scikit-learn's digits as ``root/<digit>/<index>.png`` (grayscale, ``side`` px).

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
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.clip(255.0 - image * (255.0 / 16.0), 0, 255).astype(np.uint8)  # dark ink on white
        large = cv2.resize(pixels, (side, side), interpolation=cv2.INTER_CUBIC)
        tmp = path.with_name(f".{path.stem}.tmp.png")
        cv2.imwrite(str(tmp), large)
        tmp.replace(path)
    return root


def run_demo(workdir: Path, *, n_jobs: int = 2, quiet: bool = False) -> int:
    """Build features, train the linear L-BFGS SVM and evaluate it on the digits."""
    from . import cli
    from .config import validate_config
    from .feature_store import write_json_atomic

    workdir = Path(workdir)
    images = write_digits_dataset(workdir / "digits")
    config_path = workdir / "demo-config.toml"
    config_path.write_text(_to_toml(validate_config(DEMO_CONFIG)), encoding="utf-8")
    features = workdir / "features"
    model = workdir / "model-linear.npz"
    common = ["-q"] if quiet else []
    steps = [
        ["build-features", str(images), "--config", str(config_path), "--out", str(features),
         "--cache-dir", str(workdir / "cache"), "--n-jobs", str(n_jobs), *common],
        ["train", str(features), "--classifier", "linear", "--out", str(model)],
        ["evaluate", str(features), str(model), "--out", str(workdir / "report")],
    ]
    for argv in steps:
        print("$ classify-images " + " ".join(argv), flush=True)
        status = cli.main(argv)
        if status:
            return status
    write_json_atomic(workdir / "demo.json", {"steps": [" ".join(s) for s in steps]})
    return 0


def _to_toml(config: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "0"
        if isinstance(v, str):
            return f'"{v}"'
        return str(v).replace("'", '"') if isinstance(v, list) else repr(v)

    lines = []
    for table, values in config.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {value(v)}" for key, v in values.items()]
        lines.append("")
    return "\n".join(lines)
