"""Write the small image fixture set that ships in ``tests/data`` (run once; the files are committed).

The default test run must need nothing but the repository, so it reads real photographs cut
from the two sample images that scikit-learn bundles (``china.jpg``, ``flower.jpg``; Creative
Commons Attribution 2.0, photographers credited in ``tests/data/README.md`` and in
scikit-learn's ``sklearn/datasets/images/README.txt``) and scikit-learn's handwritten digits:

``tests/data/images/<class>/<n>.jpg``
    four classes of twelve grayscale images each: ``china`` and ``flower`` (seeded 120 × 120
    crops of the two photographs at scales 0.6–1.0), ``digit_0`` and ``digit_1`` (the first
    twelve digits of each class, upscaled to 64 × 64 with dark ink on white).
``tests/data/china-300.jpg``
    the whole ``china.jpg`` in grayscale, longer side 300 px (a real image for dense SIFT).

Usage::

    python tests/data/make_test_images.py [--out tests/data]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
from sklearn.datasets import load_digits, load_sample_images

N_PER_CLASS = 12
CROP = 120
JPEG_QUALITY = [int(cv2.IMWRITE_JPEG_QUALITY), 90]


def _write(path: Path, gray: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buffer = cv2.imencode(".jpg", gray, JPEG_QUALITY)
    if not ok:
        raise RuntimeError(f"cannot encode {path}")
    path.write_bytes(buffer.tobytes())


def _photo_crops(rgb: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    crops = []
    for _ in range(N_PER_CLASS):
        scale = rng.uniform(0.6, 1.0)
        small = cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        y = int(rng.integers(0, small.shape[0] - CROP + 1))
        x = int(rng.integers(0, small.shape[1] - CROP + 1))
        crops.append(small[y : y + CROP, x : x + CROP])
    return crops


def _digits(label: int) -> list[np.ndarray]:
    digits = load_digits()
    images = digits.images[digits.target == label][:N_PER_CLASS]
    ink = [np.clip(255.0 - image * (255.0 / 16.0), 0, 255).astype(np.uint8) for image in images]
    return [cv2.resize(pixels, (64, 64), interpolation=cv2.INTER_CUBIC) for pixels in ink]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "data"))
    out = Path(parser.parse_args(argv).out)
    rng = np.random.default_rng(0)
    china, flower = load_sample_images().images
    classes = {
        "china": _photo_crops(china, rng),
        "flower": _photo_crops(flower, rng),
        "digit_0": _digits(0),
        "digit_1": _digits(1),
    }
    for name, images in classes.items():
        for index, image in enumerate(images):
            _write(out / "images" / name / f"{index:02d}.jpg", image)
    gray = cv2.cvtColor(china, cv2.COLOR_RGB2GRAY)
    scale = 300 / max(gray.shape)
    _write(out / "china-300.jpg", cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA))
    print(f"wrote {sum(len(v) for v in classes.values()) + 1} images under {out}")


if __name__ == "__main__":
    main()
