"""Training time of the linear SVM (``QuadraticHingeSVC``) as the training rows grow, against one X·Xᵀ.

Synthetic Fisher-like rows: ``n`` rows of ``d`` dimensions (default 262 144, a 256-word,
2 x 64 x 2 x ... Fisher vector's size), 101 classes (row ``i`` of class ``i mod 101``), stored
float16 in a memory-mapped ``.npy`` file (as a ``--rows float16`` feature set gives them; 20 000
rows are 10.5 GB, not held in memory twice).  Row ``i`` of class ``c`` is

    x_i = sqrt(a_i t_c + roll(e_k, s_i)),  then  x_i / ||x_i||_2

with ``t_c`` a non-negative sparse class template (30 % non-zero, half-normal values), ``e_k``
one of 32 non-negative sparse noise vectors rolled by a random shift ``s_i`` (rows nearly
orthogonal apart from their class and their common positive mean), ``a_i`` uniform in
[0.2, 0.6]: the signed square root and unit L2 norm of an improved Fisher vector [1]_, without
its signs.  The rows are made once (``--data``) and each point reads the first ``n``.

Each point runs in its own process (its peak memory its own) and records: rows, classes, dims,
the processor, the solver path chosen, the training's CPU seconds (``time.process_time``: all
threads; the machine is shared), its wall seconds, the peak RSS and the peak anonymous memory
(RSS minus the memory-mapped rows), L-BFGS iterations and ``--reference``: the CPU seconds of one
``X Xᵀ`` by the machine's BLAS (``ssyrk`` on float32 copies of blocks of columns of the rows; the
conversion from float16 not counted), measured in the same process just before the training.

``--code PATH`` runs the points with the package at PATH (another worktree: the code before a
change), in the same run, alternating with the default (this checkout): ``--compare PATH``.

Usage::

    python scripts/benchmarks/bench_linear_scaling.py --rows 2000 4000 6060 8000 --reference 6060 \\
        --data /tmp/rows.npy --json out.json [--compare /path/to/old/worktree]

References
----------
.. [1] F. Perronnin, J. Sanchez and T. Mensink, "Improving the Fisher Kernel for Large-Scale
   Image Classification", ECCV 2010.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine

N_CLASSES = 101
DIMS = 262_144


def make_rows(path: Path, n: int, d: int, seed: int = 0) -> None:
    """Write the synthetic rows (module docstring) to a float16 ``.npy`` file, block by block."""
    rng = np.random.default_rng(seed)
    templates = np.abs(rng.standard_normal((N_CLASSES, d), dtype=np.float32))
    templates *= rng.random((N_CLASSES, d), dtype=np.float32) < 0.3
    bank = np.abs(rng.standard_normal((32, d), dtype=np.float32))
    bank *= rng.random((32, d), dtype=np.float32) < 0.3
    out = np.lib.format.open_memmap(path.with_suffix(".partial.npy"), mode="w+", dtype=np.float16, shape=(n, d))
    step = 256
    for start in range(0, n, step):
        rows = np.arange(start, min(start + step, n))
        block = templates[rows % N_CLASSES] * rng.uniform(0.2, 0.6, (rows.size, 1)).astype(np.float32)
        for j, (k, shift) in enumerate(zip(rng.integers(0, 32, rows.size), rng.integers(0, d, rows.size))):
            block[j, shift:] += bank[k, : d - shift]
            block[j, :shift] += bank[k, d - shift :]
        np.sqrt(block, out=block)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + rows.size] = block
    out.flush()
    del out
    os.replace(path.with_suffix(".partial.npy"), path)


def _peak_anonymous(stop: threading.Event, peak: list) -> None:
    """Sample RssAnon of this process every 0.1 s into ``peak[0]`` (bytes)."""
    while not stop.is_set():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        stop.wait(0.1)


def blas_gram_seconds(X: np.ndarray, columns: int = 4096) -> float:
    """CPU seconds of ``ssyrk`` computing ``X Xᵀ`` over float32 copies of blocks of columns (copies not counted)."""
    from scipy.linalg import blas

    n, d = X.shape
    K = np.zeros((n, n), dtype=np.float32, order="F")
    seconds = 0.0
    for start in range(0, d, columns):
        block = np.asarray(X[:, start : start + columns], dtype=np.float32, order="C")
        begin = time.process_time()
        K = blas.ssyrk(1.0, block.T, beta=1.0, c=K, trans=1, lower=1, overwrite_c=1)
        seconds += time.process_time() - begin
    return seconds


def run_point(data: Path, n: int, reference: bool, solver: str, timeout: float) -> dict:
    """One point in this process (called by the child): train on the first ``n`` rows."""
    import logging

    from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

    X = np.load(data, mmap_mode="r")[:n]
    y = np.arange(n) % N_CLASSES
    record = {"rows": n, "classes": N_CLASSES, "dims": int(X.shape[1]), "storage": str(X.dtype)}
    if reference:
        record["blas_gram_cpu_s"] = blas_gram_seconds(X)
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_peak_anonymous, args=(stop, peak), daemon=True)
    sampler.start()
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, rec):
            messages.append(rec.getMessage())

    log = logging.getLogger("classify_images.classifiers")
    log.addHandler(Keep())
    log.setLevel(logging.DEBUG)
    model = QuadraticHingeSVC(solver=solver)
    path = model.solver_for(X) if hasattr(model, "solver_for") else None
    if path is None:  # the code before the change
        path = "eigen" if model._use_eigenbasis(X) else "features"
    record["path"] = path
    if timeout:
        import signal

        def out_of_time(*_):
            raise TimeoutError

        signal.signal(signal.SIGALRM, out_of_time)
        signal.alarm(int(timeout))
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        model.fit(X, y)
        record["n_iter"] = int(model.n_iter_)
        record["finished"] = True
    except TimeoutError:
        record["finished"] = False
    record["train_cpu_s"] = time.process_time() - cpu
    record["train_wall_s"] = time.perf_counter() - wall
    stop.set()
    sampler.join()
    with open("/proc/self/status") as status:
        hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    record["peak_rss_bytes"] = hwm * 1024
    record["peak_anonymous_bytes"] = peak[0]
    record["rows_bytes"] = int(X.nbytes)
    record["log"] = [m for m in messages if "L-BFGS in the" in m][-1:]
    if "blas_gram_cpu_s" in record and record["finished"]:
        record["train_over_blas_gram"] = record["train_cpu_s"] / record["blas_gram_cpu_s"]
    return record


def _child(code: Path | None, data: Path, n: int, reference: bool, solver: str, timeout: float) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    command = [sys.executable, __file__, "--child", str(n), "--data", str(data), "--solver", solver]
    command += ["--timeout", str(timeout)] + (["--with-reference"] if reference else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"rows": n, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[2000, 4000, 6060, 8000, 10000])
    parser.add_argument("--dims", type=int, default=DIMS)
    parser.add_argument("--data", type=Path, default=Path("/tmp/linear-scaling-rows.npy"))
    parser.add_argument("--reference", type=int, nargs="*", default=[6060], help="rows at which to time one BLAS X Xᵀ")
    parser.add_argument("--compare", type=Path, help="a checkout of the code before the change, run alternately")
    parser.add_argument("--compare-rows", type=int, nargs="*", help="rows at which to run --compare (default: all)")
    parser.add_argument("--solver", default="auto")
    parser.add_argument("--timeout", type=float, default=0.0, help="stop a training after this many seconds")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--with-reference", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_point(args.data, args.child, args.with_reference, args.solver, args.timeout)))
        return
    largest = max(args.rows)
    if not args.data.exists() or np.load(args.data, mmap_mode="r").shape[0] < largest:
        started = time.perf_counter()
        make_rows(args.data, largest, args.dims)
        print(f"made {largest} x {args.dims} float16 rows in {time.perf_counter() - started:.0f} s", flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?")
    results = {"cpu": cpu, "machine": announce_machine(), "points": []}
    for n in args.rows:
        sides = [("new", None)]
        if args.compare and (args.compare_rows is None or n in args.compare_rows):
            sides.append(("old", args.compare))
        for side, code in sides:
            load = open("/proc/loadavg").read().split()[:3]
            record = _child(code, args.data, n, n in args.reference and side == "new", args.solver, args.timeout)
            record.update(side=side, load=" ".join(load))
            results["points"].append(record)
            print(json.dumps(record), flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
