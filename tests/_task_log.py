"""Dask worker preload of the multi-host test (``dask worker --preload tests/_task_log.py``).

Each worker process appends one JSON line per event to ``$CLASSIFY_IMAGES_TASK_LOG/<name>-<pid>.jsonl``:
``joined`` when it starts, ``start`` when a task begins executing on it, ``done`` / ``error``
when that task ends.  ``tests/test_hosts.py`` reads these files (on the file system the hosts
share) to kill a worker while it is encoding, and to see which host ran which task.
It records; it changes nothing the worker computes.
"""

from __future__ import annotations

import json
import os
import time

from distributed import WorkerPlugin

#: Environment variable naming the folder of the task logs.
LOG_FOLDER = "CLASSIFY_IMAGES_TASK_LOG"


class TaskLog(WorkerPlugin):
    """Writes a line when a task starts or stops executing on this worker."""

    name = "classify-images-task-log"

    def setup(self, worker) -> None:
        self.worker_name = str(worker.name)
        self.path = os.path.join(os.environ[LOG_FOLDER], f"{self.worker_name}-{os.getpid()}.jsonl")
        self._write("joined", None)

    def transition(self, key, start: str, finish: str, **kwargs) -> None:
        if finish == "executing":
            self._write("start", key)
        elif start == "executing" and finish in ("memory", "error"):
            self._write("done" if finish == "memory" else "error", key)

    def _write(self, event: str, key) -> None:
        line = json.dumps(
            {
                "worker": self.worker_name,
                "pid": os.getpid(),
                "event": event,
                "key": None if key is None else str(key),
                "time": time.time(),
            }
        )
        with open(self.path, "a") as log:
            log.write(line + "\n")


async def dask_setup(worker) -> None:
    await worker.plugin_add(TaskLog())
