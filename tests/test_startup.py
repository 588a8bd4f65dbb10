"""Start-up (issue 25 point 2): ``--version`` and ``--help`` import no heavy library.

Each check runs in a fresh interpreter, so what the test session imported does not count.
No timing is asserted (``benchmarks/bench_startup.py`` measures the times).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Libraries the parser of the command line does not need: numerical, image, plotting, cluster.
HEAVY = ("numpy", "scipy", "sklearn", "numba", "cv2", "matplotlib", "dask", "distributed", "joblib", "spams")

_SCRIPT = """
import json, sys
from classify_images.pipeline.interfaces.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted({{name.partition(".")[0] for name in sys.modules}} & set({heavy!r}))
print(json.dumps(heavy), file=sys.stderr)
"""


def _heavy_modules_after(argv: list[str]) -> list[str]:
    script = _SCRIPT.format(argv=argv, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1800)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["train", "--help"], ["build-features", "--help"]])
def test_parser_imports_no_heavy_library(argv):
    assert _heavy_modules_after(argv) == []


def test_package_imports_are_lazy():
    """The packages import their public names on first use; the names stay importable."""
    script = (
        "import json, sys\n"
        "import classify_images, classify_images.coding, classify_images.features, classify_images.classifiers\n"
        "from classify_images.classifiers import CLASSIFIERS, parse_param\n"
        f"print(json.dumps(sorted({{n.partition('.')[0] for n in sys.modules}} & set({HEAVY!r}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1800, check=True)
    assert json.loads(done.stdout) == []


def test_public_names_still_importable():
    from classify_images import classifiers, coding, features

    for package in (classifiers, coding, features):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
        assert set(package.__all__) <= set(dir(package))
    from classify_images.classifiers import NegativeFeaturesError
    from classify_images.classifiers.base import NegativeFeaturesError as defined

    assert NegativeFeaturesError is defined
    from classify_images.pipeline.extraction.build import DEFAULT_BATCH_SIZE
    from classify_images.pipeline.settings.config import named_configs
    from classify_images.pipeline.settings.defaults import DEFAULT_BATCH_SIZE as default
    from classify_images.pipeline.settings.defaults import named_configs as light

    assert DEFAULT_BATCH_SIZE == default and named_configs is light
    with pytest.raises(AttributeError):
        coding.no_such_name  # noqa: B018
