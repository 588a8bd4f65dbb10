"""No option can ask for more workers, threads or grid points than the machine runs: every count is
bounded by the usable cores (clamped with one warning line, or refused in one line for a classifier's
``n_jobs``) before any work, and a ``--search`` grid is counted before any point is made."""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytest

from classify_images.classifiers import model_selection
from classify_images.classifiers.model_selection import MAX_SEARCH_POINTS, SearchError, search_parameters
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.pipeline.execution import limits
from classify_images.pipeline.execution.limits import MAX_BATCH_SIZE, bounded_workers, check_grid_size
from classify_images.pipeline.extraction.runner import Execution
from classify_images.pipeline.interfaces import cli
from classify_images.pipeline.interfaces.cli import main


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(limits, "usable_cores", lambda: 2)


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def test_worker_counts_are_clamped_to_the_cores(two_cores):
    with pytest.warns(UserWarning, match="more than the 2 cores"):
        assert bounded_workers(100_000, "--n-jobs") == 2
    with pytest.warns(UserWarning, match="leaves no core"):
        assert bounded_workers(-100_000, "--n-jobs") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [bounded_workers(n, "--n-jobs") for n in (1, 2, -1, -2)] == [1, 2, -1, -2]


def test_an_execution_never_holds_more_workers_than_cores(two_cores):
    with pytest.warns(UserWarning):
        assert Execution(n_jobs=100_000).n_jobs == 2
    with pytest.warns(UserWarning):
        assert Execution.from_options(n_jobs=100_000).n_jobs == 2
    with pytest.warns(UserWarning, match="local cluster workers 100000"):
        assert Execution.from_options(cluster="local:100000").cluster.n_workers == 2


def test_every_count_option_is_bounded_before_any_work(two_cores):
    args = argparse.Namespace(n_jobs=100_000, threads=100_000, cluster="local:100000", batch_size=10**9)
    with pytest.warns(UserWarning) as caught:
        cli._bound_resources(args)
    assert (args.n_jobs, args.threads, args.cluster, args.batch_size) == (2, 2, "local:2", MAX_BATCH_SIZE)
    assert len(caught) == 4 and all("\n" not in str(w.message) for w in caught)


@pytest.mark.parametrize(
    "argv",
    [
        ["build-features", "{missing}", "--n-jobs", "100000"],
        ["predict", "{missing}", "{missing}", "--n-jobs", "100000"],
        ["build-features", "{missing}", "--threads", "100000"],
    ],
)
def test_the_command_line_says_so_in_one_warning_line(two_cores, tmp_path, capsys, argv):
    missing = str(tmp_path / "missing")
    assert main([part.format(missing=missing) for part in argv]) == 2  # (the missing input, after the clamp)
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "the 2 cores this process may use: using 2" in warning[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("option", [["--param", "n_jobs=100000"], ["--search", "n_jobs=1,100000"]])
def test_a_classifiers_n_jobs_beyond_the_cores_is_refused(two_cores, tmp_path, capsys, option):
    assert main(["train", str(tmp_path / "missing"), "--classifier", "pmsvm", *option]) == 2
    _one_line_error(capsys, "n_jobs=100000", "2 cores")  # refused before the feature set is read


@pytest.mark.parametrize("sizes", [(1000, 1000), (1000, 1000, 1000)])
def test_a_search_grid_beyond_the_limit_is_refused_before_any_point(tmp_path, capsys, sizes):
    names = ["C", "tol", "max_iter"][: len(sizes)]
    argv = ["train", str(tmp_path / "missing"), "--classifier", "linear"]
    for name, size in zip(names, sizes):
        argv += ["--search", f"{name}=" + ",".join(str(value + 1) for value in range(size))]
    assert main(argv) == 2
    _one_line_error(capsys, f"the grid has {np.prod(sizes)} points", f"at most {MAX_SEARCH_POINTS}")


def test_the_api_counts_the_grid_before_making_a_point(monkeypatch):
    def enumerated(grid):
        raise AssertionError("the grid's points were made")

    monkeypatch.setattr(model_selection, "_points", enumerated)
    grid = {"C": list(range(1, 1001)), "tol": list(range(1, 1001))}
    with pytest.raises(SearchError, match="1000000 points"):
        search_parameters(QuadraticHingeSVC(), np.zeros((6, 2)), [0, 0, 0, 1, 1, 1], grid)
    assert check_grid_size({"C": [1, 2], "tol": [1, 2]}) == 4
