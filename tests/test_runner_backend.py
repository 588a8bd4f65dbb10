"""The build asks the runner what its backend can do (``on_cluster``, ``parallel_here``) instead
of testing ``runner.client is None`` and ``n_jobs`` itself."""

from __future__ import annotations

import ast
import pathlib

from classify_images.pipeline.extraction.runner import Runner, no_progress
from classify_images.pipeline.extraction.stages import StageCache


def test_the_runner_says_what_its_backend_can_do():
    cache = StageCache(None)
    one, two, cluster = (
        Runner(1, cache, no_progress),
        Runner(2, cache, no_progress),
        Runner(2, cache, no_progress, object()),
    )
    assert (one.on_cluster, one.parallel_here) == (False, False)
    assert (two.on_cluster, two.parallel_here) == (False, True)
    assert (cluster.on_cluster, cluster.parallel_here) == (True, False)
    assert Runner(-1, cache, no_progress).parallel_here


def test_fitting_and_the_build_steps_ask_the_runner():
    """No ``runner.client is None`` / ``is not None`` left in fitting.py and build_steps.py."""
    import classify_images.pipeline.extraction as extraction

    offenders = []
    for name in ("fitting.py", "build_steps.py"):
        tree = ast.parse((pathlib.Path(extraction.__file__).parent / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "client":
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, offenders


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_per_image_work_here_runs_on_one_blas_thread_and_the_pool_is_restored_after():
    """In-process tasks (``n_jobs = 1``) see one BLAS thread (their small products spin on more);
    the caller's pool is as it was once the results are read, for the codebook's big products."""
    from joblib import delayed
    from threadpoolctl import threadpool_limits

    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        assert before  # numpy's OpenBLAS
        seen = Runner(1, StageCache(None), no_progress).map([delayed(_blas_threads)() for _ in range(3)], "probe")
        assert seen == [[1] * len(before)] * 3
        assert _blas_threads() == before == [2] * len(before)


def _slow_square(x: int) -> int:
    import time

    time.sleep(0.05)
    return x * x


def test_a_pool_read_only_in_part_closes_without_joblib_warnings():
    """A build stopped by an error (e.g. the disk) leaves tasks computed and unread: the error is
    what the user reads, not joblib's warning about them."""
    import gc
    import warnings

    from joblib import delayed

    runner = Runner(2, StageCache(None), no_progress)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = runner.imap([delayed(_slow_square)(i) for i in range(40)], "squares")
        assert next(results) == (0, 0)
        del results
        gc.collect()
    assert [str(w.message) for w in caught] == []
