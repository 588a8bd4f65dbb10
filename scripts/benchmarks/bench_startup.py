"""Start-up time of the command line (issue 25 point 2).

Runs ``classify-images --version``, ``classify-images --help`` and a ``train`` of a tiny
problem (48 fixture images of ``tests/data/images``, the tests' small config, 64-d features)
``--repeats`` times each, every run in a fresh process, and prints the median / min / max wall
seconds with the processor (model, instruction set) and the revision.  The tiny feature set is built once (with
``build-features``) into a temporary folder, and the first run of each command (not counted)
fills the numba on-disk cache, so the numbers are "after warm-up".

    python benchmarks/bench_startup.py [--repeats 7] [--classifier linear]
    python benchmarks/bench_startup.py --baseline-rev 3fdba00    # the same for an older revision, side by side

``--baseline-rev REV`` checks REV out in a temporary ``git worktree`` and runs the same
commands with ``PYTHONPATH`` pointing at that checkout (its ``classify_images/`` folder), or,
for a revision of the older layout, at a temporary package tree of it (the repository's folders
mapped to ``classify_images`` as its ``pyproject.toml`` did; :mod:`_checkouts`), with the same
interpreter and installed dependencies.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _checkouts import importable_root, module_name

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "tests" / "data" / "images"
#: The tests' small configuration (tests/data/small.toml).
SMALL_CONFIG_FILE = REPO / "tests" / "data" / "small.toml"


def revision(repo: Path) -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_config(path: Path) -> Path:
    shutil.copyfile(SMALL_CONFIG_FILE, path)
    return path


def package_tree(checkout: Path, root: Path) -> Path:
    """The folder to put on ``PYTHONPATH`` for ``checkout``'s ``classify_images``: the checkout
    itself (its ``classify_images/`` folder), or a tree of links under ``root`` for the older layout."""
    return importable_root(checkout, root)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(
    label: str, env: dict[str, str], work: Path, repeats: int, classifier: str, root: Path = REPO
) -> dict[str, list[float]]:
    cli = [sys.executable, "-m", module_name(root, "classify_images.pipeline.interfaces.cli")]
    feature_set = work / f"fs-{label}"
    subprocess.run(
        [
            *cli,
            "build-features",
            str(IMAGES),
            "--config",
            str(write_config(work / "small.toml")),
            "--out",
            str(feature_set),
            "--cache-dir",
            str(work / f"cache-{label}"),
            "-q",
        ],
        env=env,
        check=True,
    )
    commands = {
        "--version": [*cli, "--version"],
        "--help": [*cli, "--help"],
        f"train ({classifier})": [
            *cli,
            "train",
            str(feature_set),
            "--classifier",
            classifier,
            "--out",
            str(work / f"model-{label}.zip"),
        ],
    }
    times: dict[str, list[float]] = {}
    for name, cmd in commands.items():
        timed(cmd, env)  # warm-up: fills the numba cache, the page cache
        times[name] = [timed(cmd, env) for _ in range(repeats)]
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--classifier", default="linear")
    parser.add_argument("--baseline-rev", help="also time this older revision (git worktree), side by side")
    args = parser.parse_args()

    from _bench_utils import announce_machine  # in this process only: every timed run is a fresh process

    announce_machine()
    print(f"load average {os.getloadavg()[0]:.2f} at start")
    print(f"python {sys.version.split()[0]}; {args.repeats} runs per command, fresh processes, after one warm-up run")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        env = dict(os.environ)
        env.setdefault("NUMBA_CACHE_DIR", str(work / "numba"))
        env.setdefault("MPLBACKEND", "Agg")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        runs = {f"this tree ({revision(REPO)})": (env, "current", REPO)}
        if args.baseline_rev:
            checkout = work / "baseline"
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(checkout), args.baseline_rev],
                cwd=REPO,
                check=True,
                capture_output=True,
            )
            rev = revision(checkout)
            base_root = package_tree(checkout, work / "baseline-pkg")
            base_env = dict(env, PYTHONPATH=str(base_root))
            runs = {f"baseline ({rev})": (base_env, "baseline", base_root), **runs}
        try:
            for title, (run_env, label, root) in runs.items():
                times = measure(label, run_env, work, args.repeats, args.classifier, root)
                print(f"\n{title}")
                print(f"  {'command':<20} {'median s':>9} {'min s':>7} {'max s':>7}")
                for name, values in times.items():
                    print(f"  {name:<20} {statistics.median(values):9.3f} {min(values):7.3f} {max(values):7.3f}")
        finally:
            if args.baseline_rev:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(work / "baseline")], cwd=REPO, capture_output=True
                )
                shutil.rmtree(work / "baseline", ignore_errors=True)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
