"""Worker-side counters of the linear SVM's objective evaluations (a Dask worker *preload*).

``simulate_scale.py train --count-evaluations`` loads this module into every worker of its
``LocalCluster`` (``distributed.worker.preload``) and names a folder in the environment variable
:data:`FOLDER_VARIABLE`.  :func:`dask_setup` wraps
``QuadraticHingeObjective.value_and_grad`` (one call per evaluation of objective (1) and
gradient (2) by L-BFGS-B, line-search trials included) so that each worker process keeps, per
precision of the products (``float32``, or ``float64`` after :func:`minimize_lbfgs` restarted),
the number of evaluations, their rows (``n`` of the problem: rows × evaluations is what the
margins' products ``X W`` scale with), the rows the gradient products ``X^T G`` read (the
objective's ``n_gradient_rows``: only rows with an active margin, block by block) and the thread
CPU seconds spent in them, and rewrites ``<pid>.json`` in
the folder after every evaluation (a worker may be stopped without a clean exit).
:func:`read_counts` sums the files.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

FOLDER_VARIABLE = "SIMULATE_SCALE_EVALUATION_COUNTS"


def _wrap(method):
    counts: dict[str, dict[str, float]] = {}

    @functools.wraps(method)
    def value_and_grad(self, W, b):
        start, rows_before = time.thread_time(), self.n_gradient_rows
        result = method(self, W, b)
        precision = "float64" if getattr(self, "exact", False) else "float32"
        entry = counts.setdefault(
            precision, {"evaluations": 0, "row_evaluations": 0, "gradient_rows": 0, "cpu_seconds": 0.0}
        )
        entry["evaluations"] += 1
        entry["row_evaluations"] += int(self.n_samples) if hasattr(self, "n_samples") else 0
        entry["cpu_seconds"] += time.thread_time() - start
        entry["gradient_rows"] += self.n_gradient_rows - rows_before
        folder = os.environ.get(FOLDER_VARIABLE)
        if folder:
            path = Path(folder) / f"{os.getpid()}.json"
            path.with_suffix(".tmp").write_text(json.dumps(counts))
            os.replace(path.with_suffix(".tmp"), path)
        return result

    return value_and_grad


def install() -> None:
    """Wrap ``QuadraticHingeObjective.value_and_grad`` in this process (once)."""
    from classify_images.classifiers import _quadratic_hinge_objective as objective

    cls = objective.QuadraticHingeObjective
    if not getattr(cls.value_and_grad, "_counted", False):
        cls.value_and_grad = _wrap(cls.value_and_grad)
        cls.value_and_grad._counted = True


def dask_setup(worker) -> None:  # the preload hook
    install()


def read_counts(folder: str | Path) -> dict:
    """The workers' counters summed per precision, and per worker process."""
    total: dict[str, dict[str, float]] = {}
    per_process = {}
    for path in sorted(Path(folder).glob("*.json")):
        counts = json.loads(path.read_text())
        per_process[path.stem] = counts
        for precision, entry in counts.items():
            into = total.setdefault(precision, {"evaluations": 0, "row_evaluations": 0, "cpu_seconds": 0.0})
            for key, value in entry.items():
                into[key] = into.get(key, 0) + value
    for entry in total.values():
        entry["cpu_seconds"] = round(entry["cpu_seconds"], 3)
    return {"total": total, "per_process": per_process}
