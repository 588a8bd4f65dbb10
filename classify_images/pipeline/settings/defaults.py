"""What the command line needs to build its parser, without importing the pipeline.

``classify-images --version`` and ``--help`` import this module and not
:mod:`.config`, :mod:`.runner` or :mod:`.build` (which load NumPy, SciPy, OpenCV and the
numba kernels); those modules re-export the names defined here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DEFAULT_BATCH_SIZE", "RECOMMENDED_CONFIG", "named_configs", "config_choice_line"]

#: The shipped config every entry point uses when none is named (``classify-images build-features``,
#: ``run``, ``experiment`` and ``train`` without ``--classifier``, Python's ``ImageFeatures()``): our
#: most accurate pipeline; its ``[classifier]`` table names the classifier that goes with it.
RECOMMENDED_CONFIG = "recommended"

#: Images per Dask task, and rows per shard of a sharded store: chosen from the scheduler's
#: cost per task against the cost of an image (docs/benchmarks/cluster-and-scale.md).
DEFAULT_BATCH_SIZE = 64


def named_configs() -> dict[str, Path]:
    """Ready-made configurations shipped in ``configs/``, by name."""
    folder = resources.files("classify_images.configs")
    return {entry.name[: -len(".toml")]: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".toml")}


def config_choice_line(name: str | None, *, chosen: bool, how: str = "--config") -> str:
    """The one line naming the config a command uses: ``config: NAME``, and when the user did not
    choose it (``chosen`` False) that it is the recommended pipeline and ``how`` to choose another."""
    if not chosen:
        return f"config: {name} (the recommended pipeline; {how} to choose another)"
    return f"config: {name}" + (" (the recommended pipeline)" if name == RECOMMENDED_CONFIG else "")
