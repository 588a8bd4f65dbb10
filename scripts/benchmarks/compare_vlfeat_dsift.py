"""Descriptor-by-descriptor comparison of our dense SIFT with VLFeat's ``dsift`` (issue 11).

VLFeat is a *reference only* (never a runtime dependency): Debian's ``libvlfeat-dev``
(0.9.21) and ``cyvlfeat`` built against it (``pip install --no-build-isolation
cyvlfeat`` after numpy and Cython).  VLFeat's smoothing ``vl_imsmooth_f`` is called
through ``ctypes`` on ``libvl.so`` (cyvlfeat does not wrap it).

For each image, bin size ``s`` (patch ``P = 4 s``), window and smoothing setting, both
sides compute descriptors on the same grid and the frames are matched by centre:

* VLFeat's frame centres are its bin-0 centre + 1.5 s; with ``bounds`` starting at
  ``s // 2`` its grid is ours with ``bin_centres="integer"`` exactly, and ours with the
  default ``bin_centres="patch"`` shifted by +0.5 px for even ``s`` (all four sizes of the
  HIK setting are even) — those are matched at that half-pixel offset and the offset is
  itself one of the differences reported.
* Same normalisation on both sides: unit L2, clip 0.2, unit L2 (ours with
  ``contrast_threshold=0`` so no patch is left raw; VLFeat's ``float_descriptors``,
  which cyvlfeat returns as ``min(512 v, 255)``: both sides are divided by 512 /
  saturated at ``255 / 512`` before comparing).
* Metrics over matched frames, for all frames and for *interior* frames (whose support
  stays ``>= s`` px inside the image, where border handling cannot matter, and whose raw
  norm exceeds ``--min-norm``, as normalising a near-flat patch amplifies float32 and
  ``atan``-approximation noise to anything): max and mean
  absolute difference, correlation of all entries, and the fraction of descriptors whose
  max abs difference is below ``--tol``.

Settings compared (``ours`` options -> VLFeat ``dsift`` options):

* ``as-is``: our defaults (patch centres, every bin weight 1) -> ``fast``, window 1.5
  (vl_phow's ``fast`` dsift);
* ``half-pixel only``: our defaults -> ``fast``, window 1e6 (isolates the bin-centre
  offset);
* ``flat, no window``: ours integer centres -> ``fast``, window 1e6 (Gaussian bin
  weights all equal);
* ``flat, window 1.5`` / ``window 2``: ours integer centres + ``window_size`` -> ``fast``;
* ``Gaussian window 2`` (vl_dsift's exact, not ``fast``, descriptor): ours integer
  centres + ``window_size=2`` -> ``fast=False``;

each without smoothing and with ``vl_phow``'s smoothing ``sigma = s / 6`` (VLFeat side
``vl_imsmooth_f``, ours ``smoothing="phow"``).  The script also prints the ratio of
VLFeat's descriptor norm to our raw norm per size (VLFeat's contrast threshold 0.005
in our units), and the uint8 conversion difference (VLFeat truncates ``512 v``, we round).

Usage::

    python benchmarks/compare_vlfeat_dsift.py --dataset ../shared/datasets/scene15 \\
        --n-images 6 --out compare_vlfeat.json
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine

from classify_images.features import load_grayscale
from classify_images.features.dsift import dense_sift, quantize_descriptors

SIZES = (4, 6, 8, 10)  # bin sizes of the 16/24/32/40 px patches
SATURATION = np.float32(255.0 / 512.0)


def _libvl() -> ctypes.CDLL:
    name = ctypes.util.find_library("vl") or "libvl.so.1"
    lib = ctypes.CDLL(name)
    lib.vl_imsmooth_f.restype = None
    lib.vl_imsmooth_f.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint64,
        ctypes.c_void_p,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_double,
        ctypes.c_double,
    ]
    return lib


def vl_imsmooth(image: np.ndarray, sigma: float) -> np.ndarray:
    """VLFeat's ``vl_imsmooth_f`` (Gaussian, continuity padding) of a float32 image."""
    img = np.ascontiguousarray(image, dtype=np.float32)
    if sigma <= 0:
        return img.copy()
    out = np.empty_like(img)
    h, w = img.shape
    _libvl().vl_imsmooth_f(out.ctypes.data, w, img.ctypes.data, w, h, w, float(sigma), float(sigma))
    return out


def vl_dense_sift(image: np.ndarray, bin_size: int, step: int, *, fast: bool, window_size: float):
    """cyvlfeat's ``dsift`` on our grid: frames ``(x, y)``, norms, unit-scale float descriptors."""
    from cyvlfeat.sift import dsift

    h, w = image.shape
    start = bin_size // 2  # bin-0 centre of our patch at corner 0 (integer centres)
    frames, descriptors = dsift(
        np.ascontiguousarray(image, dtype=np.float32),
        step=step,
        size=bin_size,
        bounds=np.array([start, start, h - 1, w - 1]),
        window_size=window_size,
        norm=True,
        fast=fast,
        float_descriptors=True,
    )
    # float descriptors keep the 512 scale of the uint8 ones (512 v): undo it
    return frames[:, 1], frames[:, 0], frames[:, 2], descriptors / np.float32(512.0)


def _match(ours, vx, vy, shift: float):
    lookup = {(float(x), float(y)): i for i, (x, y) in enumerate(zip(vx, vy))}
    idx = np.array([lookup.get((float(x) + shift, float(y) + shift), -1) for x, y in zip(ours.x, ours.y)])
    return idx


def _metrics(A: np.ndarray, B: np.ndarray, tol: float) -> dict:
    if A.shape[0] == 0:
        return {"n": 0}
    err = np.abs(A - B)
    per_desc = err.max(axis=1)
    return {
        "n": int(A.shape[0]),
        "max_abs": float(err.max()),
        "mean_abs": float(err.mean()),
        "corr": float(np.corrcoef(A.ravel(), B.ravel())[0, 1]),
        "frac_within_tol": float((per_desc <= tol).mean()),
    }


SETTINGS = {
    # name: (our options, vlfeat fast, vlfeat window, half-pixel shift of the match)
    "as-is (ours default vs fast, window 1.5)": ({}, True, 1.5, 0.5),
    "half-pixel only (ours default vs fast, no window)": ({}, True, 1e6, 0.5),
    "flat, no window": ({"bin_centres": "integer"}, True, 1e6, 0.0),
    "flat, window 1.5": ({"bin_centres": "integer", "window_size": 1.5}, True, 1.5, 0.0),
    "flat, window 2": ({"bin_centres": "integer", "window_size": 2.0}, True, 2.0, 0.0),
    "Gaussian window 2 (not fast) vs ours flat window 2": (
        {"bin_centres": "integer", "window_size": 2.0},
        False,
        2.0,
        0.0,
    ),
}


def compare_image(image: np.ndarray, step: int, tol: float, min_norm: float) -> dict:
    """All settings x sizes x smoothing for one image: metrics, norm ratio, uint8 difference."""
    out = {}
    h, w = image.shape
    for smoothing in ("none", "phow"):
        for s in SIZES:
            p = 4 * s
            sigma = s / 6.0 if smoothing == "phow" else 0.0
            vl_image = vl_imsmooth(image, sigma)
            for name, (opts, fast, window, shift) in SETTINGS.items():
                ours = dense_sift(
                    image,
                    (p,),
                    step,
                    smooth=smoothing == "phow",
                    smoothing="phow",
                    contrast_threshold=0.0,
                    **opts,
                )
                vx, vy, vnorm, vdesc = vl_dense_sift(vl_image, s, step, fast=fast, window_size=window)
                idx = _match(ours, vx, vy, shift)
                ok = idx >= 0
                # cyvlfeat's float descriptors saturate at 255 / 512 like the uint8 ones
                A, B = np.minimum(ours.descriptors[ok], SATURATION), vdesc[idx[ok]]
                x, y = ours.x[ok], ours.y[ok]
                margin = 2.5 * s + s  # half support (2 s + s / 2) plus one bin
                inner = (x >= margin) & (x <= w - 1 - margin) & (y >= margin) & (y <= h - 1 - margin)
                # near-flat patches: normalising amplifies float32 / atan-approximation noise
                inner &= ours.raw_norm[ok] > min_norm
                key = f"{smoothing}|{p}|{name}"
                out[key] = {
                    "matched": int(ok.sum()),
                    "ours": len(ours),
                    "vlfeat": int(vx.shape[0]),
                    "all": _metrics(A, B, tol),
                    "interior": _metrics(A[inner], B[inner], tol),
                }
                if name == "flat, window 1.5":
                    raw = ours.raw_norm[ok]
                    pos = raw > 0
                    out[key]["norm_ratio_median"] = float(np.median(vnorm[idx[ok]][pos] / raw[pos]))
                    qa = quantize_descriptors(A).astype(np.int16)
                    qb = np.minimum(np.floor(512.0 * B), 255).astype(np.int16)  # VLFeat: truncation
                    out[key]["uint8_entries_differing"] = float((qa != qb).mean())
                    qa_trunc = np.minimum(np.floor(512.0 * A), 255).astype(np.int16)
                    out[key]["uint8_entries_differing_if_we_truncated"] = float((qa_trunc != qb).mean())
    return out


def _summarise(per_image: list[dict]) -> dict:
    keys = per_image[0].keys()
    summary = {}
    for key in keys:
        rows = [r[key] for r in per_image]
        entry = {
            "matched": sum(r["matched"] for r in rows),
            "ours": sum(r["ours"] for r in rows),
            "vlfeat": sum(r["vlfeat"] for r in rows),
        }
        for part in ("all", "interior"):
            ms = [r[part] for r in rows if r[part]["n"]]
            n = np.array([m["n"] for m in ms], dtype=float)
            entry[part] = {
                "n": int(n.sum()),
                "max_abs": max(m["max_abs"] for m in ms),
                "mean_abs": float(np.average([m["mean_abs"] for m in ms], weights=n)),
                "corr_min": min(m["corr"] for m in ms),
                "frac_within_tol": float(np.average([m["frac_within_tol"] for m in ms], weights=n)),
            }
        for extra in ("norm_ratio_median", "uint8_entries_differing", "uint8_entries_differing_if_we_truncated"):
            if extra in rows[0]:
                entry[extra] = float(np.mean([r[extra] for r in rows]))
        summary[key] = entry
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument("--n-images", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--max-side", type=int, default=300)
    ap.add_argument("--tol", type=float, default=0.02, help="max abs difference for 'equal' descriptors")
    ap.add_argument(
        "--min-norm",
        type=float,
        default=0.05,
        help="interior metrics only over patches whose raw norm (ours) exceeds this",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    machine = announce_machine()

    files = sorted(str(f) for f in args.dataset.glob("*/*") if f.is_file())
    picks = np.random.default_rng(args.seed).choice(len(files), size=args.n_images, replace=False)
    per_image = [
        compare_image(load_grayscale(files[i], max_side=args.max_side), args.step, args.tol, args.min_norm)
        for i in picks
    ]
    summary = _summarise(per_image)
    print(
        f"{'smoothing|patch|setting':78s} {'matched':>14s} {'interior max':>12s} {'mean':>8s} "
        f"{'corr':>7s} {'<=tol':>6s} | {'all max':>7s} {'mean':>8s} {'<=tol':>6s}"
    )
    for key, e in summary.items():
        i, a = e["interior"], e["all"]
        print(
            f"{key:78s} {e['matched']:>6d}/{e['vlfeat']:<7d} {i['max_abs']:12.4f} {i['mean_abs']:8.5f} "
            f"{i['corr_min']:7.4f} {i['frac_within_tol']:6.3f} | {a['max_abs']:7.4f} {a['mean_abs']:8.5f} "
            f"{a['frac_within_tol']:6.3f}"
            + (
                f"  norm ratio {e['norm_ratio_median']:.5f}, uint8 differ {e['uint8_entries_differing']:.3f}"
                f" (truncating: {e['uint8_entries_differing_if_we_truncated']:.4f})"
                if "norm_ratio_median" in e
                else ""
            )
        )
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "images": [files[i] for i in picks],
                    "summary": summary,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
