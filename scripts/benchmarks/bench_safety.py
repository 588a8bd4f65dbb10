#!/usr/bin/env python
"""Cost of the safety of issue 14: ``build-features`` in this tree vs an older tree, side by side.

This tree writes its stage cache as ``.npz`` (no pickle), allocates and fsyncs the
feature-set files and swaps the folder atomically; the older tree (``--old``, a checkout of
the code folders, e.g. ``git archive main``) writes joblib pickles and does not sync.  Each
round builds the dataset once per tree with an empty cache (cold: every stage computed and
written to the cache) and once more with that cache into a new folder (warm: every stage
read back from the cache), the trees alternating, so both see the same machine load.  The
feature sets of the two trees are compared bit for bit.

With ``--load-rows N --load-dims D`` it times instead ``load_feature_set`` plus one pass over
the rows (what ``train`` does) on a synthetic feature set of N × D float32 rows, in both trees:
this tree also checks every value is finite when it loads.

Example::

    git archive main | tar -x -C /tmp/old-src
    python benchmarks/bench_safety.py --old /tmp/old-src --dataset ../shared/datasets/caltech101-mini \
        --config bof-spm --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _checkouts import importable_root, module_name

REPO = Path(__file__).resolve().parents[2]


def _shim(source: Path, where: Path) -> Path:
    """The folder to put on ``PYTHONPATH`` for ``source``'s ``classify_images``, whatever its layout
    (:mod:`_checkouts`: today's ``classify_images/`` folder, or the older mapped folders)."""
    return importable_root(source, where)


def _build(
    pythonpath: Path, dataset: Path, out: Path, cache: Path, config: str, extra: list[str]
) -> tuple[float, float]:
    """Wall-clock seconds and CPU seconds (user + system) of one ``build-features`` process."""
    argv = [
        "build-features",
        str(dataset),
        "--out",
        str(out),
        "--config",
        config,
        "--cache-dir",
        str(cache),
        "-q",
        *extra,
    ]
    cli = module_name(pythonpath, "classify_images.pipeline.interfaces.cli")
    script = f"import sys; from {cli} import main; sys.exit(main({argv!r}))"
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, "-c", script], env=env, check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _time_load(pythonpath: Path, folder: Path, repeats: int) -> list[float]:
    """Seconds of ``load_feature_set(folder)`` followed by a sum over its rows, ``repeats`` times."""
    script = (
        "import json, sys, time, numpy as np\n"
        f"from {module_name(pythonpath, 'classify_images.pipeline.storage.feature_store')} import load_feature_set\n"
        "times = []\n"
        f"for _ in range({repeats}):\n"
        "    start = time.perf_counter()\n"
        f"    fs = load_feature_set({str(folder)!r})\n"
        "    float(np.asarray(fs.X_train).sum())\n"
        "    times.append(time.perf_counter() - start)\n"
        "print(json.dumps(times))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def _synthetic_feature_set(pythonpath: Path, folder: Path, n_rows: int, n_dims: int) -> None:
    """A valid feature set of random rows, written with the older tree's writer (both trees read it)."""
    script = (
        "import numpy as np\n"
        f"from {module_name(pythonpath, 'classify_images.pipeline.settings.config')} import PipelineConfig\n"
        f"from {module_name(pythonpath, 'classify_images.pipeline.storage.feature_store')} import FeatureSetWriter\n"
        f"n, d = {n_rows}, {n_dims}\n"
        "rng = np.random.default_rng(0)\n"
        f"with FeatureSetWriter({str(folder)!r}) as w:\n"
        "    for part in ('X_train', 'X_test'):\n"
        "        rows = w.open_rows(part, n, d)\n"
        "        for s in range(0, n, 256):\n"
        "            rows[s:s + 256] = rng.random((min(256, n - s), d), dtype=np.float32)\n"
        "        rows.flush()\n"
        "    w.save('y_train', np.arange(n) % 2)\n"
        "    w.save('y_test', np.arange(n) % 2)\n"
        "    w.save('codebook', rng.random((16, 128), dtype=np.float32))\n"
        "    names = [f'c/{i}.jpg' for i in range(n)]\n"
        "    w.commit({'config': PipelineConfig().to_dict(), 'config_hash': 'x', 'class_names': ['a', 'b'],\n"
        "              'split': {'seed': 0, 'train_per_class': 1, 'test_per_class': None, 'train': names, 'test': names},\n"
        "              'skipped': [], 'n_features': d, 'timings': {}})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True)


def _rows(folder: Path) -> list[np.ndarray]:
    return [np.load(folder / f"{name}.npy") for name in ("X_train", "X_test", "y_train", "y_test", "codebook")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--old",
        required=True,
        type=Path,
        help="the older tree: a checkout, either layout (its classify_images/ or api/)",
    )
    parser.add_argument("--new", default=REPO, type=Path, help="this tree: a checkout (default: this one)")
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--config", default="bof-spm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-rows", type=int, help="time loading a synthetic feature set of this many rows")
    parser.add_argument("--load-dims", type=int, default=21504)
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more build-features arguments")
    args = parser.parse_args()
    from _bench_utils import announce_machine

    machine = announce_machine()
    if args.load_rows:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            paths = {
                "old": _shim(args.old.resolve(), tmp / "shim-old"),
                "new": _shim(args.new.resolve(), tmp / "shim-new"),
            }
            _synthetic_feature_set(paths["old"], tmp / "fs", args.load_rows, args.load_dims)
            runs = {"old": [], "new": []}
            for round_ in range(args.rounds):
                for tree in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                    runs[tree] += _time_load(paths[tree], tmp / "fs", 3)
        print(
            json.dumps(
                {
                    "machine": machine,
                    "rows": args.load_rows,
                    "dims": args.load_dims,
                    "median_seconds": {t: round(statistics.median(v), 3) for t, v in runs.items()},
                    "all_seconds": {t: [round(x, 3) for x in v] for t, v in runs.items()},
                },
                indent=2,
            )
        )
        return 0
    kinds = ("cold", "warm", "cold_cpu", "warm_cpu")
    times: dict[str, dict[str, list[float]]] = {tree: {kind: [] for kind in kinds} for tree in ("old", "new")}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = {"old": _shim(args.old.resolve(), tmp / "shim-old"), "new": _shim(args.new.resolve(), tmp / "shim-new")}
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for tree in order:
                work = tmp / f"{tree}-{round_}"
                cache = work / "cache"
                for kind in ("cold", "warm"):
                    wall, cpu = _build(paths[tree], args.dataset, work / kind, cache, args.config, args.extra)
                    times[tree][kind].append(wall)
                    times[tree][f"{kind}_cpu"].append(cpu)
        same = all(np.array_equal(a, b) for a, b in zip(_rows(tmp / "old-0" / "cold"), _rows(tmp / "new-0" / "cold")))
        sizes = {
            tree: sum(f.stat().st_size for f in (tmp / f"{tree}-0" / "cache").rglob("*") if f.is_file())
            for tree in ("old", "new")
        }
        for tree in ("old", "new"):
            shutil.rmtree(tmp / f"{tree}-0", ignore_errors=True)
    result = {
        "machine": machine,
        "dataset": str(args.dataset),
        "config": args.config,
        "rounds": args.rounds,
        "median_seconds": {
            tree: {kind: round(statistics.median(v), 2) for kind, v in runs.items()} for tree, runs in times.items()
        },
        "all_seconds": {
            tree: {kind: [round(x, 2) for x in v] for kind, v in runs.items()} for tree, runs in times.items()
        },
        "cache_bytes": sizes,
        "feature_sets_identical": same,
    }
    print(json.dumps(result, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
