"""Settings shared by the property-based (``hypothesis``) tests.

The examples are derandomised (the same on every run of one hypothesis release), no
example database is read or written, and there is no deadline; every setting that a
loaded profile (``--hypothesis-profile``, ``$HYPOTHESIS_PROFILE``, the ``ci`` profile
recent releases load on CI machines) could change is given here, on top of hypothesis'
own defaults rather than the loaded profile's.  The tests assert properties that hold
for every input (exit status 0 or 2, one line, no traceback), so another release
generating other examples tests the same thing.  They take no function-scoped pytest
fixture: a fixture would be shared by all the examples of a test (hypothesis' health
check ``function_scoped_fixture``), so each example makes its own temporary folder and
captures its own output (:func:`run_cli`).
"""

from __future__ import annotations

import contextlib
import io
import os

from hypothesis import HealthCheck, Phase, Verbosity, settings

__all__ = ["fuzz_settings", "run_cli", "FULL_FUZZ"]

#: ``CLASSIFY_IMAGES_FULL_FUZZ=1`` (``.ci/run`` sets it for its ``-m "slow or fuzz"`` stage): every
#: fuzz test runs its full ``max_examples``; otherwise a fifth of them (at least 10), so that the
#: default test run stays short.
FULL_FUZZ = os.environ.get("CLASSIFY_IMAGES_FULL_FUZZ", "") not in ("", "0")


def fuzz_settings(max_examples: int) -> settings:
    """Settings of a fuzz test running ``max_examples`` derandomised examples (a fifth of them,
    at least 10, unless :data:`FULL_FUZZ`)."""
    return settings(
        settings.get_profile("default"),
        max_examples=max_examples if FULL_FUZZ else max(10, max_examples // 5),
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        verbosity=Verbosity.normal,
        print_blob=False,
        # generating a few files' worth of data is slow next to a unit test's inputs, not wrong
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``classify-images ARGV``: exit status, stdout and stderr (captured here, not by a fixture)."""
    from classify_images.pipeline.interfaces.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()
