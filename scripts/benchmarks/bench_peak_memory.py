#!/usr/bin/env python
"""Peak memory of one command (e.g. ``classify-images experiment``), sampled from ``/proc``.

    python benchmarks/bench_peak_memory.py --label main --json peak.json -- \\
        classify-images experiment FEATURE_SET --classifier linear --repeats 1 --out /tmp/x

Reports the kernel's peak resident set of the command (``ru_maxrss``: anonymous memory
*and* the pages of memory-mapped files it touched, as ``/usr/bin/time -v`` does) and the peak
of its anonymous memory alone (``RssAnon`` of ``/proc/PID/status``, sampled every
``--interval`` seconds): a feature set's rows read through a memory map are file pages the
kernel can drop, copies of them are anonymous memory.  One process (children not counted).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime

from _bench_utils import announce_machine, write_json


def _status_kib(pid: int) -> dict[str, int]:
    values = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values


def measure(command: list[str], interval: float) -> dict:
    start = time.perf_counter()
    process = subprocess.Popen(command)
    peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    while process.poll() is None:
        for key, value in _status_kib(process.pid).items():
            if key in peak:
                peak[key] = max(peak[key], value)
        time.sleep(interval)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "returncode": process.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "sampled_peak_rss_mib": round(peak["VmRSS"] / 1024, 1),
        "sampled_peak_anonymous_mib": round(peak["RssAnon"] / 1024, 1),
        "sampled_peak_file_mib": round(peak["RssFile"] / 1024, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="")
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--json")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    machine = announce_machine()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "label": args.label,
        "command": command,
        **measure(command, args.interval),
    }
    print(json.dumps(report, indent=2))
    write_json(args.json, report)
    return 0 if report["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
