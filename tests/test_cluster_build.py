"""Building on a Dask cluster: bit-identical features, the sharded store, faults, one-line errors.

Loopback only: one ``LocalCluster`` of two worker processes is shared by the module (its
start takes seconds).  Every build here uses the small test config on the fixture images,
with a few images per task so that each stage is several tasks.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.pipeline.execution import cluster as cluster_module
from classify_images.pipeline.extraction import build as build_module
from classify_images.pipeline.extraction import build_steps as build_steps_module
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.storage.feature_store import FeatureSetError, load_feature_set
from classify_images.pipeline.storage.row_codecs import codec_of_format
from classify_images.pipeline.storage.shard_store import ShardedRows, as_dense, read_shard, write_shard

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, assert_same_features, write_config_toml

distributed = pytest.importorskip("distributed", reason="the cluster tests need classify-images[distributed]")

#: Images per task in these tests (several tasks per stage on 40 images).
BATCH = 4
#: Seconds any one cluster build may take here before the test fails.
BUILD_LIMIT = 900  # a hang guard only (a loaded 2-core machine builds far slower than an idle one)


def _config():
    return validate_config(json.loads(json.dumps(SMALL_CONFIG)))


@pytest.fixture(scope="module")
def local_cluster():
    """Two worker processes (one thread each) on the loopback interface, for the whole module."""
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield cluster, client


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-machine build (joblib, npy layout) every cluster build must equal bit for bit."""
    root = tmp_path_factory.mktemp("reference")
    build_feature_set(FIXTURE_IMAGES, root / "fs", _config(), cache_dir=root / "cache")
    return load_feature_set(root / "fs")


def _bounded(function, limit=BUILD_LIMIT):
    """Run ``function`` in a daemon thread; fail the test if it takes longer than ``limit`` s."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        pytest.fail(f"cluster build still running after {limit} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.parametrize("store", ["npy", "sharded"])
def test_local_cluster_build_is_bit_identical(tmp_path, local_cluster, reference, store):
    cluster, _ = local_cluster
    out = tmp_path / "fs"
    result = _bounded(
        lambda: build_feature_set(
            FIXTURE_IMAGES,
            out,
            _config(),
            cache_dir=tmp_path / "cache",
            scheduler=cluster.scheduler_address,
            store=store,
            batch_size=BATCH,
        )
    )
    assert not result.reused
    built = load_feature_set(out)
    assert built.layout == store
    assert_same_features(built, reference)
    if store == "sharded":
        shards = built.manifest["store"]["shards"]
        assert built.manifest["format_version"] == 2 and built.manifest["store"]["format"] == "csr"  # VQ histograms
        assert [entry["rows"] for entry in shards["X_train"]] == [4, 4, 4, 4, 4]
        assert not (out / "X_train.npy").exists()


def test_a_mirrored_build_on_the_cluster_is_the_one_machine_build(tmp_path, local_cluster):
    """[augment]: each task encodes an image and its mirror (the mirror's SIFT the image's,
    permuted) on a worker; rows and mirrors are this machine's, bit for bit."""
    cluster, _ = local_cluster
    raw = json.loads(json.dumps(SMALL_CONFIG))
    raw["augment"] = {"flip_train": True, "flip_test": "average"}
    here = tmp_path / "here"
    build_feature_set(FIXTURE_IMAGES, here, validate_config(raw), cache_dir=tmp_path / "cache-here")
    out = tmp_path / "fs"
    _bounded(
        lambda: build_feature_set(
            FIXTURE_IMAGES,
            out,
            validate_config(raw),
            cache_dir=tmp_path / "cache",
            scheduler=cluster.scheduler_address,
            store="npy",
            batch_size=BATCH,
        )
    )
    built, reference = load_feature_set(out), load_feature_set(here)
    assert_same_features(built, reference)
    for split in ("train", "test"):
        assert np.asarray(built.mirrors(split)).tobytes() == np.asarray(reference.mirrors(split)).tobytes()


@pytest.mark.parametrize(
    "codebook",
    [
        None,  # the small config's k-means (the module's reference build), one thread by design
        # PCA + GMM: their LAPACK/BLAS/OpenMP sums depend on the thread count (several threads in this
        # process, one in a worker), so learn_fisher_model runs them on one thread (without it this
        # failed on AVX2 processors, e.g. NUMBA_CPU_NAME=haswell OPENBLAS_CORETYPE=Haswell)
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30},
    ],
)
def test_the_codebook_is_learnt_on_a_worker_with_the_same_numbers(
    tmp_path, monkeypatch, local_cluster, reference, codebook
):
    """On a cluster the codebook is learnt by a worker (learning it in this process fails
    here), from the sample the sampling tasks left on the cluster (it never comes to this
    process), and it is the one-machine codebook bit for bit."""
    from classify_images.coding import codebook as codebook_module

    cluster, _ = local_cluster
    config = (
        _config()
        if codebook is None
        else validate_config({**json.loads(json.dumps(SMALL_CONFIG)), "codebook": codebook})
    )
    if codebook is None:
        expected = reference
    else:
        build_feature_set(FIXTURE_IMAGES, tmp_path / "here", config, cache_dir=None)
        expected = load_feature_set(tmp_path / "here")

    def not_here(*args, **kwargs):
        raise AssertionError("the codebook was learnt in the client process")

    for learner in ("learn_kmeans_codebook", "learn_sparse_dictionary", "learn_fisher_model"):
        monkeypatch.setattr(codebook_module, learner, not_here)  # in this process only, not in the workers
    gathered = []
    iter_tasks = build_module.Runner.imap

    def recording_imap(self, tasks, description, **options):
        gathered.append(description)
        return iter_tasks(self, tasks, description, **options)

    monkeypatch.setattr(build_module.Runner, "imap", recording_imap)
    out = tmp_path / "fs"
    _bounded(
        lambda: build_feature_set(
            FIXTURE_IMAGES,
            out,
            config,
            cache_dir=tmp_path / "cache",
            scheduler=cluster.scheduler_address,
            batch_size=BATCH,
        )
    )
    assert "sample descriptors" not in gathered and "encode + pool" in gathered
    built = load_feature_set(out)
    assert_same_features(built, expected)
    # (the manifests' codebook sections, equal above, hold the SHA-1 digest of the codebook's arrays)
    assert built.manifest["codebook"]["digest"] == expected.manifest["codebook"]["digest"]
    assert (
        built.manifest["codebook"]["n_training_descriptors"] == expected.manifest["codebook"]["n_training_descriptors"]
    )


def test_sharded_shards_are_the_same_bytes_whoever_writes_them(tmp_path, local_cluster):
    """The workers' shards and the ones this machine writes (joblib) are byte-identical files."""
    cluster, _ = local_cluster
    for name, options in (("joblib", {}), ("dask", {"scheduler": cluster.scheduler_address})):
        _bounded(
            lambda: build_feature_set(
                FIXTURE_IMAGES, tmp_path / name, _config(), cache_dir=None, store="sharded", batch_size=BATCH, **options
            )
        )
    joblib_store = load_feature_set(tmp_path / "joblib").manifest["store"]
    dask_store = load_feature_set(tmp_path / "dask").manifest["store"]
    assert joblib_store == dask_store
    for entry in joblib_store["shards"]["X_test"]:
        assert (tmp_path / "joblib" / entry["file"]).read_bytes() == (tmp_path / "dask" / entry["file"]).read_bytes()


def test_killed_worker_still_gives_identical_features(tmp_path, local_cluster, reference):
    """SIGKILL one worker process while encode tasks are running: Dask reschedules its tasks
    (the nanny restarts the worker) and the shards rewritten are the same."""
    cluster, client = local_cluster
    before = client.run(os.getpid)
    killed = {}

    def progress(iterable, description, total):
        for count, item in enumerate(iterable, 1):
            yield item
            if description == "encode + pool" and count == BATCH and not killed:
                busy = [worker for worker, keys in client.processing().items() if keys] or list(before)
                killed[busy[0]] = before[busy[0]]
                os.kill(before[busy[0]], signal.SIGKILL)

    out = tmp_path / "fs"
    _bounded(
        lambda: build_feature_set(
            FIXTURE_IMAGES,
            out,
            _config(),
            cache_dir=None,
            scheduler=cluster.scheduler_address,
            store="sharded",
            batch_size=BATCH,
            progress=progress,
        )
    )
    assert killed, "no worker was killed: the test did not exercise the fault"
    assert_same_features(load_feature_set(out), reference)
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]
    client.wait_for_workers(2, timeout=600)  # the nanny restarted it, for the next tests (a hang guard)
    assert set(client.run(os.getpid).values()) != set(before.values())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow  # failure injection: a scheduler stopped mid-build (8 s); run by .ci/run
def test_lost_scheduler_is_one_line_and_the_same_command_resumes(tmp_path, monkeypatch, capsys, reference):
    """The scheduler stops in the middle of encode + pool: one line, exit 2, the stage cache
    keeps what the workers finished, and the same command resumes against a new scheduler."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    config = write_config_toml(tmp_path / "small.toml")
    command = [
        "build-features",
        str(FIXTURE_IMAGES),
        "--config",
        str(config),
        "--out",
        str(tmp_path / "fs"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--scheduler",
        address,
        "--batch-size",
        str(BATCH),
        "-q",
    ]
    monkeypatch.setattr(cluster_module, "DEFAULT_CONNECT_TIMEOUT", 5.0)

    def start():
        return distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            scheduler_port=port,
            dashboard_address=":0",
        )

    doomed = start()

    def progress_that_stops_the_scheduler(enabled):
        def progress(iterable, description, total):
            for count, item in enumerate(iterable, 1):
                yield item
                if description == "encode + pool" and count == BATCH:
                    doomed.close(timeout=10)

        return progress

    monkeypatch.setattr("classify_images.pipeline.interfaces.cli._tqdm_progress", progress_that_stops_the_scheduler)
    try:
        status = _bounded(lambda: main(command))
    finally:
        doomed.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("classify-images build-features: error: lost the Dask scheduler")
    assert "re-run the same command" in err[0]
    assert not (tmp_path / "fs").exists()
    codes = tmp_path / "cache" / "joblib" / "classify_images" / "pipeline" / "extraction" / "stages" / "image_encoding"
    assert len([entry for entry in codes.iterdir() if entry.is_dir()]) >= BATCH  # finished work kept

    with start():
        assert _bounded(lambda: main(command)) == 0
    assert_same_features(load_feature_set(tmp_path / "fs"), reference)


_POISON_PRELOAD = """
import os
from classify_images.pipeline.extraction.extractor import FeatureExtractor



def pooled(self, path, fingerprint):
    # The test's poisoned image kills the worker process encoding it, while the flag file exists.
    if os.path.exists({flag!r}) and path.endswith({image!r}):
        os._exit(13)
    return FeatureExtractor.unpoisoned_pooled(self, path, fingerprint)


if not hasattr(FeatureExtractor, "unpoisoned_pooled"):  # (a preload may run twice in one process)
    FeatureExtractor.unpoisoned_pooled = FeatureExtractor.pooled
    FeatureExtractor.pooled = pooled
"""


def _cache_entries(cache) -> dict:
    return {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in cache.rglob("output.npz")}


@pytest.mark.slow  # failure injection: workers killed by a task (8 s); run by .ci/run
def test_a_task_that_kills_its_workers_is_one_line_and_the_same_command_resumes(
    tmp_path, monkeypatch, capsys, reference
):
    """A poisoned image kills every worker that encodes it (Dask's ``KilledWorker`` once the
    task has killed ``allowed-failures + 1`` workers): the command prints one line and exits 2,
    what the other tasks cached stays, and the same command, once the poison is gone, finishes
    from the cache with the identical feature set."""
    import dask

    poisoned = reference.manifest["split"]["test"][-1]
    flag = tmp_path / "poison-armed"
    flag.touch()
    preload = tmp_path / "poison_preload.py"
    preload.write_text(_POISON_PRELOAD.format(flag=str(flag), image=os.sep + poisoned.replace("/", os.sep)))
    config = write_config_toml(tmp_path / "small.toml")
    cache = tmp_path / "cache"

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 1}),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
            preload=[str(preload)],
        ) as cluster,
    ):
        command = [
            "build-features",
            str(FIXTURE_IMAGES),
            "--config",
            str(config),
            "--out",
            str(tmp_path / "fs"),
            "--cache-dir",
            str(cache),
            "--scheduler",
            cluster.scheduler_address,
            "--batch-size",
            str(BATCH),
            "-q",
        ]
        status = _bounded(lambda: main(command))
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2
        assert len(err) == 1, err
        assert err[0].startswith(
            "classify-images build-features: error: a task failed because the workers running it died repeatedly"
        ), err[0]
        assert "re-run the same command to resume" in err[0] and "Traceback" not in err[0]
        assert not (tmp_path / "fs").exists()
        kept = _cache_entries(cache)
        encoded = [path for path in kept if "image_encoding" in path.parts]
        assert len(encoded) >= BATCH, "the tasks finished before the poisoned one were not cached"
        # (how soon it failed is no assertion: _bounded guards against a hang, and the message above
        # says the task was given up after its retries, which is the behaviour)

        flag.unlink()  # the poison is gone (the workers restarted by their nannies still run the hook)
        # The nannies restart the killed workers; on a loaded machine that can outlast the command's
        # 10 s wait for a worker (seen under stress-ng), so the re-run waits as long as the hang guard.
        monkeypatch.setattr(cluster_module, "DEFAULT_CONNECT_TIMEOUT", float(BUILD_LIMIT))
        assert _bounded(lambda: main(command)) == 0
    assert_same_features(load_feature_set(tmp_path / "fs"), reference)
    after = _cache_entries(cache)
    assert all(after.get(path) == stamp for path, stamp in kept.items()), "a cached entry was recomputed"
    assert len(after) > len(kept)


def test_unreachable_scheduler_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cluster_module, "DEFAULT_CONNECT_TIMEOUT", 1.0)
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    for command in (
        ["build-features", str(FIXTURE_IMAGES), "--out", str(tmp_path / "fs"), "--scheduler", address],
        ["build-features", str(FIXTURE_IMAGES), "--scheduler", "nowhere"],
        ["build-features", str(FIXTURE_IMAGES), "--scheduler", address, "--cluster", "local:2"],
        ["build-features", str(FIXTURE_IMAGES), "--cluster", "local:0"],
        ["build-features", str(FIXTURE_IMAGES), "--cluster", "local:1", "--batch-size", "0"],
    ):
        assert main(command) == 2  # (the 1 s connect timeout above ends it: no wall-clock assertion)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("classify-images build-features: error: "), err
    assert not (tmp_path / "fs").exists()


def test_experiment_and_predict_on_the_cluster_match_this_machine(tmp_path, local_cluster, reference, capsys):
    cluster, _ = local_cluster
    fs = str(reference.path)
    model = str(tmp_path / "model.npz")
    assert main(["train", fs, "--classifier", "linear", "--out", model]) == 0
    outputs = []
    for where in ([], ["--scheduler", cluster.scheduler_address]):
        capsys.readouterr()
        assert (
            main(
                [
                    "experiment",
                    fs,
                    "--classifier",
                    "linear",
                    "--repeats",
                    "3",
                    "--out",
                    str(tmp_path / f"exp{len(where)}"),
                    *where,
                ]
            )
            == 0
        )
        runs = json.loads((tmp_path / f"exp{len(where)}" / "experiment.json").read_text())["runs"]
        assert main(["predict", model, str(FIXTURE_IMAGES / "china"), "--format", "csv", *where]) == 0
        outputs.append(
            (
                [(run["seed"], run["mean_per_class_accuracy"]) for run in runs],
                capsys.readouterr().out.split("report.html\n", 1)[1],
            )
        )
    assert outputs[0] == outputs[1]


# --- the sharded store itself -------------------------------------------------------------


def _block(rng, n_rows, n_cols, density):
    rows = rng.random((n_rows, n_cols), dtype=np.float32)
    rows[rng.random((n_rows, n_cols)) > density] = 0.0
    rows[0, :3] = [-0.0, 1e-38, -2.5]  # a negative zero, a denormal-sized value and a negative value survive
    rows[-1] = 0.0  # an empty row
    return rows


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_shards_round_trip_bit_for_bit(tmp_path, fmt):
    rng = np.random.default_rng(0)
    blocks = [_block(rng, n, 37, 0.05) for n in (5, 5, 3)]
    entries = [write_shard(tmp_path, "X_train", k, block, fmt) for k, block in enumerate(blocks)]
    assert [entry["file"] for entry in entries] == [
        f"X_train.00000{k}.{'npz' if fmt == 'csr' else 'npy'}" for k in range(3)
    ]
    again = write_shard(tmp_path, "X_train", 1, blocks[1], fmt)  # a rescheduled task rewrites its shard
    assert again == entries[1]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    whole = np.concatenate(blocks)
    rows = ShardedRows(tmp_path, entries, 37, fmt)
    rows.check()
    assert rows.shape == whole.shape and rows.toarray().tobytes() == whole.tobytes()
    first = read_shard(tmp_path / entries[0]["file"], 5, 37, fmt)
    assert sp.isspmatrix_csr(first) if fmt == "csr" else isinstance(first, np.memmap)
    if fmt == "csr":
        assert first.nnz == entries[0]["nnz"] == np.count_nonzero((blocks[0] != 0) | np.signbit(blocks[0]))
    for rows_per_block in (None, 1, 4, 13, 100):
        pieces = list(rows.blocks(rows_per_block))
        assert all(sp.isspmatrix_csr(block) == (fmt == "csr") for _, block in pieces)
        joined = np.concatenate([as_dense(block) for _, block in pieces])
        assert joined.tobytes() == whole.tobytes()
        assert [where.start for where, _ in pieces] == sorted(where.start for where, _ in pieces)
    assert rows.to_dask_array().compute().tobytes() == whole.tobytes()


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_sharded_feature_set_loads_both_formats_and_iterates_blocks(tmp_path, monkeypatch, reference, fmt):
    for module in (build_module, build_steps_module):  # the layout chosen, and the shards written in it
        monkeypatch.setattr(module, "codec_for_rows", lambda kind, encoding="float32": codec_of_format(fmt))
    build_feature_set(FIXTURE_IMAGES, tmp_path / "fs", _config(), cache_dir=None, store="sharded", batch_size=6)
    built = load_feature_set(tmp_path / "fs")
    assert built.manifest["store"]["format"] == fmt and 0 < built.manifest["store"]["density"] <= 1
    assert_same_features(built, reference)
    for fs in (built, reference):  # both layouts
        for split in ("train", "test"):
            blocks = list(fs.iter_row_blocks(split, rows_per_block=7))
            X = np.concatenate([as_dense(block) for block, _ in blocks])
            y = np.concatenate([labels for _, labels in blocks])
            assert X.tobytes() == np.asarray(getattr(fs, f"X_{split}")).tobytes()
            assert (y == getattr(fs, f"y_{split}")).all() and y.dtype == np.int64
            assert fs.to_dask_array(split).compute().tobytes() == X.tobytes()


def test_sharded_feature_set_validation(tmp_path):
    out = tmp_path / "fs"
    build_feature_set(FIXTURE_IMAGES, out, _config(), cache_dir=None, store="sharded", batch_size=8)
    manifest = json.loads((out / "manifest.json").read_text())
    first = out / manifest["store"]["shards"]["X_test"][0]["file"]
    original = first.read_bytes()

    def refused(expected):
        with pytest.raises(FeatureSetError) as error:
            load_feature_set(out)
        assert expected in str(error.value) and "\n" not in str(error.value)

    first.write_bytes(original[: len(original) // 2])
    refused("corrupt")
    first.write_bytes(original[:-30] + bytes(30))  # the zip's directory, torn
    refused("corrupt")
    first.write_bytes(original)
    rows = as_dense(read_shard(first, manifest["store"]["shards"]["X_test"][0]["rows"], manifest["n_features"], "csr"))
    rows[0, 0] = np.nan
    with_nan = json.loads(json.dumps(manifest))
    with_nan["store"]["shards"]["X_test"][0] = write_shard(out, "X_test", 0, rows, "csr")  # listed, with its SHA-1
    (out / "manifest.json").write_text(json.dumps(with_nan))
    refused("NaN")
    (out / "manifest.json").write_text(json.dumps(manifest))
    first.unlink()
    refused("missing")
    first.write_bytes(original)
    load_feature_set(out)
    for tamper, expected in (
        (lambda m: m["store"]["shards"]["X_train"].pop(), "do not cover"),
        (lambda m: m["store"].update(format="zarr"), "invalid 'store'"),
        (lambda m: m.update(format_version=1), "with a 'store'"),
        (lambda m: m["store"]["shards"]["X_test"][0].update(file="X_test.000000.npy"), "store.shards.X_test"),
        (lambda m: m["store"]["shards"]["X_train"][0].update(sha1="0" * 40), "SHA-1"),
    ):
        changed = json.loads(json.dumps(manifest))
        tamper(changed)
        (out / "manifest.json").write_text(json.dumps(changed))
        refused(expected)
    (out / "manifest.json").write_text(json.dumps(manifest))
    # A sharded feature set is replaced by a rebuild like an npy one (its shard names are ours).
    build_feature_set(FIXTURE_IMAGES, out, _config(), cache_dir=None)
    assert load_feature_set(out).layout == "npy" and not list(out.glob("X_*.0*"))


def test_image_features_on_the_cluster_match_this_machine(local_cluster):
    from classify_images.pipeline.interfaces.image_features import ImageFeatures

    cluster, _ = local_cluster
    paths = sorted(str(path) for path in FIXTURE_IMAGES.rglob("*.jpg"))
    train, test = paths[::2], paths[1::2]
    here = ImageFeatures(_config(), cache_dir=False).fit(train)
    there = ImageFeatures(_config(), cache_dir=False, scheduler=cluster.scheduler_address).fit(train)
    assert there.codebook_.tobytes() == here.codebook_.tobytes()
    assert _bounded(lambda: there.transform(test)).tobytes() == here.transform(test).tobytes()


def test_minmax_normalisation_sharded_on_the_cluster_is_bit_identical(tmp_path, local_cluster):
    """A normaliser fitted on the training rows: the workers' per-shard minima and maxima,
    combined, give the statistics of the single-machine build, and the same rows."""
    cluster, _ = local_cluster
    raw = json.loads(json.dumps(SMALL_CONFIG))
    raw["normalization"]["method"] = "minmax"
    config = validate_config(raw)
    build_feature_set(FIXTURE_IMAGES, tmp_path / "here", config, cache_dir=tmp_path / "cache")
    _bounded(
        lambda: build_feature_set(
            FIXTURE_IMAGES,
            tmp_path / "there",
            config,
            cache_dir=tmp_path / "cache",
            scheduler=cluster.scheduler_address,
            store="sharded",
            batch_size=BATCH,
        )
    )
    here, there = load_feature_set(tmp_path / "here"), load_feature_set(tmp_path / "there")
    assert_same_features(there, here)
    assert (tmp_path / "there" / "minmax.npy").read_bytes() == (tmp_path / "here" / "minmax.npy").read_bytes()
    assert np.asarray(there.X_train).max() == 1.0 and np.asarray(there.X_train).min() == 0.0


def test_a_folder_the_workers_cannot_see_is_one_line(tmp_path, local_cluster):
    """A worker without the file system of the dataset or of --out: refused before any work."""
    from classify_images.pipeline.execution.cluster import ClusterError

    _, client = local_cluster
    build_module._check_workers_see(client, tmp_path, "the dataset")  # both workers see it
    with pytest.raises(ClusterError, match="cannot see .*not-mounted.*: put the dataset on a file system") as error:
        build_module._check_workers_see(client, tmp_path / "not-mounted", "the dataset")
    assert "\n" not in str(error.value) and "tcp://127.0.0.1:" in str(error.value)


def test_default_layout_is_sharded_on_a_cluster_and_npy_here(tmp_path, local_cluster, reference):
    """On a cluster the workers write the rows (the client does not hold them) unless --store npy."""
    cluster, _ = local_cluster
    _bounded(
        lambda: build_feature_set(
            FIXTURE_IMAGES,
            tmp_path / "remote",
            _config(),
            cache_dir=tmp_path / "cache",
            scheduler=cluster.scheduler_address,
            batch_size=BATCH,
        )
    )
    remote = load_feature_set(tmp_path / "remote")
    assert remote.layout == "sharded"
    assert_same_features(remote, reference)
    assert reference.layout == "npy"  # built here with no store given


def test_a_local_cluster_runs_its_workers_without_the_profiler():
    """``--cluster local:N``: the workers' statistical profiler (per-second stack samples kept
    for 1 000 s, the cause of a worker's memory growing with the build's duration) is off."""

    def profile_state(dask_worker):
        import dask

        return dask.config.get("distributed.worker.profile.enabled"), len(dask_worker.profile_history)

    with cluster_module.open_client(cluster_module.ClusterSpec(n_workers=1)) as client:
        assert client.submit(sum, [1, 2]).result() == 3
        time.sleep(1.5)  # more than one profile cycle (1 s)
        assert list(client.run(profile_state).values()) == [(False, 0)]


def test_a_local_cluster_logs_where_its_dashboard_answers(caplog):
    """The local cluster's dashboard listens on a free port: its address is logged (the CLI shows
    it at the default level), and it answers there (Bokeh comes with the ``distributed`` extra)."""
    import urllib.request

    with caplog.at_level(logging.INFO, logger="classify_images.pipeline.execution.cluster"):
        with cluster_module.open_client(cluster_module.ClusterSpec(n_workers=1)) as client:
            lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Dask dashboard")]
            assert lines == [f"Dask dashboard: {client.dashboard_link}"]
            assert client.dashboard_link.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(client.dashboard_link, timeout=300) as answer:  # (a hang guard)
                assert answer.status == 200


def test_the_command_line_prints_the_dashboard_line_unless_quiet(tmp_path, capsys, local_cluster):
    """The dashboard line reaches the terminal: the CLI shows the package's INFO log lines on
    stderr (before, nothing handled them and the line was lost), and ``-q`` hides it."""
    cluster, client = local_cluster
    config = write_config_toml(tmp_path / "small.toml")
    for quiet in ([], ["-q"]):
        command = [
            "build-features",
            str(FIXTURE_IMAGES),
            "--config",
            str(config),
            "--out",
            str(tmp_path / "fs"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--scheduler",
            cluster.scheduler_address,
            *quiet,
        ]
        assert _bounded(lambda: main(command)) == 0
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Dask dashboard")]
        assert lines == ([] if quiet else [f"Dask dashboard: {client.dashboard_link}"])


def test_without_bokeh_the_dashboard_line_says_what_to_install(monkeypatch):
    real_find_spec = cluster_module.importlib.util.find_spec
    monkeypatch.setattr(
        cluster_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "bokeh" else real_find_spec(name, *a),
    )
    text = cluster_module.dashboard_text(client=None)
    assert "Bokeh is not installed" in text and "distributed" in text
