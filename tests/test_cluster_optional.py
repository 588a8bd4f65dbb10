"""Dask is optional: the package and every path without a cluster work without it, and asking for
a cluster without it is one line saying what to install.  Also the parsing of the cluster options."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from classify_images.pipeline.execution.cluster import (
    INSTALL_HINT,
    ClusterError,
    ClusterSpec,
    open_client,
    parse_cluster_option,
)
from classify_images.pipeline.interfaces.cli import main

from .conftest import FIXTURE_IMAGES, REPO, write_config_toml

#: Python code run first in a subprocess: any import of dask or distributed fails, as when
#: they are not installed.
_BLOCK_DASK = textwrap.dedent("""
    import sys
    class _NoDask:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("dask", "distributed"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _NoDask())
""")


@pytest.mark.parametrize(
    ("scheduler", "cluster", "expected"),
    [
        ("tcp://10.0.0.5:8786", None, ClusterSpec(address="tcp://10.0.0.5:8786")),
        ("scheduler.example.org:8786", None, ClusterSpec(address="tcp://scheduler.example.org:8786")),
        ("tls://[::1]:9000", None, ClusterSpec(address="tls://[::1]:9000")),
        (None, "local:3", ClusterSpec(n_workers=3)),
        (None, None, None),
    ],
)
def test_parse_cluster_option(scheduler, cluster, expected):
    assert parse_cluster_option(scheduler, cluster) == expected


@pytest.mark.parametrize(
    ("scheduler", "cluster", "named"),
    [
        ("tcp://host", None, "--scheduler"),
        ("tcp://host:70000", None, "--scheduler"),
        ("http://host:1", None, "--scheduler"),
        (None, "local", "--cluster"),
        (None, "local:0", "--cluster"),
        (None, "remote:2", "--cluster"),
        ("tcp://host:1", "local:1", "not both"),
    ],
)
def test_bad_cluster_options_are_one_line(scheduler, cluster, named):
    with pytest.raises(ClusterError) as error:
        parse_cluster_option(scheduler, cluster)
    assert named in str(error.value) and "\n" not in str(error.value)


def test_missing_dask_is_one_line_saying_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # "import distributed" now fails
    with pytest.raises(ClusterError, match="pip install 'classify-images\\[distributed\\]'"):
        with open_client(ClusterSpec(n_workers=1)):
            pass
    for command in (
        ["build-features", str(FIXTURE_IMAGES), "--out", str(tmp_path / "fs"), "--cluster", "local:2"],
        ["experiment", str(tmp_path / "fs"), "--classifier", "linear", "--scheduler", "tcp://127.0.0.1:1"],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and INSTALL_HINT in err[0], err
    assert not (tmp_path / "fs").exists()


def test_package_and_single_machine_paths_work_without_dask(tmp_path):
    """In a fresh interpreter where dask cannot be imported: import everything, build a feature
    set (npy and sharded layouts), train, predict; and --cluster fails with one line."""
    config = write_config_toml(tmp_path / "small.toml")
    code = _BLOCK_DASK + textwrap.dedent(f"""
        import contextlib, io, sys
        import classify_images
        from classify_images.pipeline.extraction import build
        from classify_images.pipeline.interfaces import cli
        from classify_images.pipeline.execution import cluster
        from classify_images.pipeline.storage import feature_store, shard_store
        from classify_images.pipeline.interfaces.cli import main
        root = {str(tmp_path)!r}
        common = ["--config", {str(config)!r}, "--no-cache", "-q"]
        assert main(["build-features", {str(FIXTURE_IMAGES)!r}, "--out", root + "/fs", *common]) == 0
        assert main(["build-features", {str(FIXTURE_IMAGES)!r}, "--out", root + "/sharded", "--store", "sharded",
                     *common]) == 0
        fs = feature_store.load_feature_set(root + "/sharded")
        assert sum(block.shape[0] for block, _ in fs.iter_row_blocks("train")) == fs.X_train.shape[0]
        assert main(["train", root + "/fs", "--classifier", "linear", "--out", root + "/m.npz"]) == 0
        assert main(["predict", root + "/m.npz", {str(FIXTURE_IMAGES / "china" / "00.jpg")!r}]) == 0
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["build-features", {str(FIXTURE_IMAGES)!r}, "--out", root + "/c", "--cluster", "local:2"]) == 2
        try:
            fs.to_dask_array("train")
        except cluster.ClusterError as exc:
            print("DASK-VIEW:", exc)
        print("CLUSTER:", err.getvalue().strip())
        print("IMPORTED:", sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(
        line.split(": ", 1) for line in done.stdout.splitlines() if line.startswith(("CLUSTER", "IMPORTED", "DASK"))
    )
    assert lines["IMPORTED"] == "[]"
    assert lines["CLUSTER"].startswith("classify-images build-features: error: ") and INSTALL_HINT in lines["CLUSTER"]
    assert "\n" not in lines["CLUSTER"] and INSTALL_HINT in lines["DASK-VIEW"]


def test_scheduler_errors_maps_dask_failures_to_one_line_and_lets_others_through():
    import errno

    distributed = pytest.importorskip("distributed")
    from distributed.comm import CommClosedError

    from classify_images.pipeline.execution.cluster import scheduler_errors

    spec = ClusterSpec(address="tcp://127.0.0.1:8786")
    for failure, expected in (
        (CommClosedError("in <TCP>: Stream is closed"), "lost the Dask scheduler"),
        (distributed.client.FutureCancelledError("k", "scheduler-connection-lost"), "lost"),
        (TimeoutError("no answer"), "re-run the same command"),
        (distributed.KilledWorker("encode-pool-1", SimpleNamespace(address="tcp://127.0.0.1:1"), 3), "died repeatedly"),
    ):
        with pytest.raises(ClusterError, match=expected) as error:
            with scheduler_errors(spec):
                raise failure
        assert "\n" not in str(error.value)
    with pytest.raises(ClusterError, match="without a stage cache nothing was kept"):
        with scheduler_errors(spec, cached=False):
            raise CommClosedError("in <TCP>: Stream is closed")
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError) as error:  # not the cluster's: the CLI words a full disk itself
        with scheduler_errors(spec):
            raise full
    assert error.value is full and not isinstance(error.value, ClusterError)
