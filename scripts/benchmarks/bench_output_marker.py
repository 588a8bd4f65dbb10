#!/usr/bin/env python
"""Cost of the output marker's content identities, and of a model of 100 000 extra members,
in this tree and an older one (``--old``: a worktree or checkout of the repository), side by side.

* ``report``: one report folder's write as ``evaluate`` does it — the guard's ``check``, its
  ``claim`` and five files of a report's sizes written through ``atomic_write`` (this tree also
  hashes each file before its rename and records it in the marker) — repeated ``--writes`` times
  per round; the trees alternate round by round (A B A B), each in its own process.
* ``members``: ``read_model_meta`` (what ``predict`` and ``evaluate`` read first) of a linear model
  file to which 100 000 empty ``.npy`` members were added; one read per tree per round.
* ``hash``: SHA-256 throughput of :func:`~classify_images.pipeline.storage.output_guard.file_identity`
  on a 256 MB file (this tree only): the bound on what hashing could cost a report.

Example::

    git -C /work/main worktree add /tmp/old HEAD
    nice -n 5 python scripts/benchmarks/bench_output_marker.py --old /tmp/old --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench_utils import announce_machine

REPO = Path(__file__).resolve().parents[2]

#: A report's files and sizes (bytes): scene15's evaluate report, about (the page with thumbnails).
REPORT_SIZES = {
    "report.json": 60_000,
    "predictions.csv": 300_000,
    "report.md": 8_000,
    "confusion.png": 90_000,
    "report.html": 4_000_000,
}

_REPORT = r"""
import json, os, sys, time
from pathlib import Path
from classify_images.pipeline.storage.atomic import atomic_write
from classify_images.pipeline.storage.output_guard import OutputFolder
folder, sizes, writes = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
payload = {name: os.urandom(size) for name, size in sizes.items()}
times = []
for _ in range(writes):
    start, cpu = time.perf_counter(), time.process_time()
    guard = OutputFolder(folder, tuple(sizes), "report", run={"command": "evaluate"})
    guard.check()
    claimed = guard.claim()
    context = claimed if hasattr(claimed, "__enter__") else None
    if context is not None:
        context.__enter__()
    for name, data in payload.items():
        with atomic_write(folder / name, "wb") as handle:
            handle.write(data)
    if context is not None:
        context.__exit__(None, None, None)
    times.append((time.perf_counter() - start, time.process_time() - cpu))
import classify_images
print(classify_images.__file__, file=sys.stderr)
print(json.dumps(times))
"""

_MEMBERS = r"""
import json, sys, time
from classify_images.pipeline.training.model_file import ModelFileError, read_model_meta
start, cpu = time.perf_counter(), time.process_time()
try:
    read_model_meta(sys.argv[1])
    outcome = "read"
except ModelFileError as exc:
    outcome = "refused: " + str(exc).split("(")[-1][:80]
print(json.dumps({"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu, "outcome": outcome}))
"""


def _run(tree: Path, code: str, *args: str) -> object:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(  # (run in the tree: ``python -c`` puts the working folder first on the path)
        [sys.executable, "-c", code, *args], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    if not done.stdout.strip():
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def _model_with_members(where: Path, n_members: int) -> Path:
    """A linear model file (this tree's writer) with ``n_members`` empty extra ``.npy`` members."""
    import io
    import zipfile

    import numpy as np

    from classify_images.classifiers.registry import make_classifier
    from classify_images.pipeline.training.model_file import save_model

    rng = np.random.default_rng(0)
    X, y = rng.random((40, 16)), np.repeat([0, 1], 20)
    path = save_model(where / "model.npz", make_classifier("linear", {}).fit(X, y))
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(0), allow_pickle=False)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as archive:
        for index in range(n_members):
            archive.writestr(f"extra{index}.npy", buffer.getvalue())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the older tree (its folder holds classify_images/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writes", type=int, default=10, help="report writes per round and tree")
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--hash-mb", type=int, default=256)
    args = parser.parse_args(argv)
    machine = announce_machine()
    trees = {"new": REPO, "old": args.old.resolve()}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        report = {name: [] for name in trees}
        members = {name: [] for name in trees}
        model = _model_with_members(scratch, args.members)
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                folder = scratch / f"report-{name}"
                times = _run(trees[name], _REPORT, str(folder), json.dumps(REPORT_SIZES), str(args.writes))
                report[name] += times[1:]  # (the first write creates the folder)
                wall, cpu = (statistics.median(t[i] for t in times[1:]) for i in (0, 1))
                print(
                    f"round {round_} {name:3} report write median {1e3 * wall:.1f} ms wall, {1e3 * cpu:.1f} ms CPU "
                    f"load {_load()}",
                    flush=True,
                )
            for name in order:
                result = _run(trees[name], _MEMBERS, str(model))
                members[name].append(result)
                print(
                    f"round {round_} {name:3} 100k-member model: {result['wall']:.2f} s wall, "
                    f"{result['cpu']:.2f} CPU s, {result['outcome']} load {_load()}",
                    flush=True,
                )
        for index, what in ((0, "wall"), (1, "CPU")):
            new, old = (statistics.median(t[index] for t in report[name]) for name in ("new", "old"))
            print(
                f"report write ({what}): new {1e3 * new:.1f} ms, old {1e3 * old:.1f} ms, ratio new/old {new / old:.2f}"
            )
        for what in ("wall", "cpu"):
            new_m, old_m = (statistics.median(r[what] for r in members[name]) for name in ("new", "old"))
            print(
                f"100k-member model read ({what}): new {new_m:.2f} s, old {old_m:.2f} s, ratio old/new {old_m / new_m:.0f}"
            )
        from classify_images.pipeline.storage.output_guard import file_identity

        big = scratch / "big.bin"
        with open(big, "wb") as handle:
            for _ in range(args.hash_mb):
                handle.write(os.urandom(1 << 20))
        file_identity(big)  # (in the page cache, as a file just written is)
        start = time.perf_counter()
        file_identity(big)
        seconds = time.perf_counter() - start
        print(f"file_identity: {args.hash_mb / seconds:.0f} MB/s on {args.hash_mb} MB (load {_load()})")
    print(json.dumps({"machine": machine}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
