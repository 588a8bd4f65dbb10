"""A Dask cluster of separate hosts: the scheduler, each worker and the client in their own
network namespace, joined by veth pairs on a bridge (``tests/_hosts.py``), talking TCP over
10.213.0.0/24 with bounded links; the dataset, ``--cache-dir`` and ``--out`` on the file system
they share, at the same paths (README, "On a cluster").

What it shows: ``classify-images build-features --scheduler`` run from a client host gives the
feature set of a one-machine build bit for bit (same processor) when the work is spread over
two worker hosts, when one host's worker is SIGKILLed while it encodes, and when a third
worker host joins in the middle of the build (and receives tasks).

Marked ``hosts``: deselected by default, run by ``.ci/run`` with ``-m hosts``; needs root and
iproute2, and fails (never skips) without them (the one unmarked test checks that).  Which task ran where comes from the workers'
own log (``tests/_task_log.py``, a worker preload) and the scheduler's log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._hosts import Network, ip, require_network_namespaces
from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, assert_same_features, write_config_toml

#: The scheduler host's address and ports (inside the namespaces: no collision between runs).
SCHEDULER_HOST, SCHEDULER_PORT, DASHBOARD_PORT = "10.213.0.1", 8786, 8787
SCHEDULER = f"tcp://{SCHEDULER_HOST}:{SCHEDULER_PORT}"
#: Images per task and rows per shard.
BATCH = 2
#: Seconds any one step (a build, a host starting) may take before the test fails.
LIMIT = 300
#: Key prefix of the encode tasks (pipeline.cluster names task keys after their description).
ENCODE = "encode-pool-"

#: Larger images and a costlier encoder than the small test config, so that the encode stage
#: lasts long enough (seconds) to kill a worker in it and to add one while the build runs.
HOSTS_CONFIG = {
    **SMALL_CONFIG,
    "dataset": {"train_per_class": 10, "test_per_class": 10, "seed": 0},
    "image": {"max_side": 240},
    "sift": {"patch_sizes": [16], "step": 4},
    "codebook": {"kind": "llc", "size": 64, "n_samples": 3000, "n_iter": 20},
}


def _bin(name: str) -> str:
    """A console script of this Python's environment (classify-images, dask)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.fail(f"{path} is missing: install the project with its [test] extra in this environment")
    return str(path)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """The fixture images upscaled to 240 × 240, each also mirrored: 4 classes × 24 images."""
    root = tmp_path_factory.mktemp("hosts-data") / "images"
    for folder in sorted(path for path in FIXTURE_IMAGES.iterdir() if path.is_dir()):
        (root / folder.name).mkdir(parents=True)
        for image_path in sorted(folder.glob("*.jpg")):
            image = cv2.resize(
                cv2.imread(str(image_path), cv2.IMREAD_GRAYSCALE), (240, 240), interpolation=cv2.INTER_CUBIC
            )
            cv2.imwrite(str(root / folder.name / image_path.name), image)
            cv2.imwrite(str(root / folder.name / f"mirrored-{image_path.name}"), np.ascontiguousarray(image[:, ::-1]))
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory, dataset):
    """The one-machine build (this process, joblib, sharded with the same rows per shard)."""
    root = tmp_path_factory.mktemp("hosts-reference")
    build_feature_set(
        dataset,
        root / "fs",
        validate_config(json.loads(json.dumps(HOSTS_CONFIG))),
        cache_dir=None,
        store="sharded",
        batch_size=BATCH,
    )
    return load_feature_set(root / "fs")


def _events(folder: Path) -> list[dict]:
    """Every worker's task-log lines (``tests/_task_log.py``), in time order."""
    events = []
    for path in folder.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # (a line being written)
                pass
    return sorted(events, key=lambda event: event["time"])


class Cluster:
    """The hosts: ``scheduler`` (10.213.0.1), ``client`` (.2), workers ``w1``, ``w2`` (.11, .12)
    started with it and ``w3`` (.13), whose worker starts only when a test adds it."""

    def __init__(self, network: Network, root: Path, dataset: Path) -> None:
        self.network, self.root, self.dataset = network, root, dataset
        self.task_logs = root / "task-logs"
        self.task_logs.mkdir()
        self.env = {**os.environ, "CLASSIFY_IMAGES_TASK_LOG": str(self.task_logs)}
        self.addresses = {}

    def start(self) -> None:
        for name, number in (("scheduler", 1), ("client", 2), ("w1", 11), ("w2", 12), ("w3", 13)):
            self.addresses[name] = self.network.add_host(name, number)
        self.network.start(
            "scheduler",
            [
                _bin("dask"),
                "scheduler",
                "--host",
                SCHEDULER_HOST,
                "--port",
                str(SCHEDULER_PORT),
                "--dashboard-address",
                f"{SCHEDULER_HOST}:{DASHBOARD_PORT}",
            ],
            env=self.env,
        )
        self.wait_for_log("scheduler", "Scheduler at:", 1)
        for name in ("w1", "w2"):
            self.start_worker(name)
        for name in ("w1", "w2"):
            self.wait_for_worker(name)

    def start_worker(self, name: str) -> None:
        self.network.start(
            name,
            [
                _bin("dask"),
                "worker",
                SCHEDULER,
                "--nworkers",
                "1",
                "--nthreads",
                "1",
                "--name",
                name,
                "--host",
                self.addresses[name],
                "--no-dashboard",
                "--local-directory",
                str(self.root / f"{name}-scratch"),
                "--preload",
                str(Path(__file__).with_name("_task_log.py")),
            ],
            env=self.env,
        )

    def scheduler_log(self) -> str:
        return self.network.log_path("scheduler").read_text(errors="replace")

    def wait_for_log(self, host: str, text: str, count: int) -> None:
        deadline = time.monotonic() + LIMIT
        while self.network.log_path(host).read_text(errors="replace").count(text) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"{host}: {text!r} not logged {count} times in {LIMIT} s")
            time.sleep(0.2)

    def registrations(self, name: str) -> int:
        """How many times worker ``name`` registered with the scheduler (a restart registers again)."""
        return len(re.findall(rf"Register worker addr: \S+ name: {re.escape(name)}$", self.scheduler_log(), re.M))

    def wait_for_worker(self, name: str, count: int = 1) -> None:
        deadline = time.monotonic() + LIMIT
        while self.registrations(name) < count:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"worker {name} did not register with the scheduler in {LIMIT} s:\n" + self.scheduler_log()[-2000:]
                )
            time.sleep(0.2)

    def build(self, out: Path, on_events=None) -> tuple[subprocess.CompletedProcess, list[dict]]:
        """``classify-images build-features`` on the client host, against the scheduler host.

        ``on_events(events)`` is called with the task log of this build (so far) while it runs.
        Returns the finished command and the build's task-log events.
        """
        config = write_config_toml(self.root / "hosts.toml", HOSTS_CONFIG)
        command = [
            _bin("classify-images"),
            "build-features",
            str(self.dataset),
            "--config",
            str(config),
            "--out",
            str(out),
            "--cache-dir",
            str(out.parent / f"{out.name}-cache"),
            "--scheduler",
            SCHEDULER,
            "--batch-size",
            str(BATCH),
        ]
        since = time.time()
        namespace, _ = self.network.hosts["client"]
        process = subprocess.Popen(
            ["ip", "netns", "exec", namespace, *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        deadline = time.monotonic() + LIMIT
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    pytest.fail(f"the build on the hosts still runs after {LIMIT} s")
                if on_events is not None:
                    on_events([event for event in _events(self.task_logs) if event["time"] >= since])
                time.sleep(0.05)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        assert done.returncode == 0, f"build-features failed on the client host:\n{stderr[-3000:]}"
        return done, [event for event in _events(self.task_logs) if event["time"] >= since]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, dataset):
    """The scheduler and two worker hosts running (module-wide); every namespace and process
    removed at the end, whatever happened."""
    require_network_namespaces()
    root = tmp_path_factory.mktemp("hosts")
    with Network(root) as network:
        hosts = Cluster(network, root, dataset)
        hosts.start()
        yield hosts


def _encoded_by(events: list[dict]) -> dict[str, set[str]]:
    """Worker name → the encode tasks it finished."""
    done: dict[str, set[str]] = {}
    for event in events:
        if event["event"] == "done" and event["key"].startswith(ENCODE):
            done.setdefault(event["worker"], set()).add(event["key"])
    return done


def _check_identical(out: Path, reference) -> None:
    built = load_feature_set(out)
    assert built.layout == "sharded"
    assert_same_features(built, reference)
    # The manifest's digests: the codebook's and every shard's SHA-1, equal to the one-machine build's.
    assert built.manifest["codebook"]["digest"] == reference.manifest["codebook"]["digest"]
    assert built.manifest["store"] == reference.manifest["store"]


@pytest.mark.hosts
def test_the_hosts_are_separate_and_the_dashboard_answers_on_the_scheduler_host(cluster):
    """Each host has its own network: its loopback and one address on the bridge, no route out
    of 10.213.0.0/24; the scheduler's dashboard answers on its host's address, seen from the
    client host.  (This machine's own network is not used: here its default gateway accepts
    any TCP connection, so "unreachable from outside" cannot be shown by connecting.)"""
    for name, address in cluster.addresses.items():
        namespace, _ = cluster.network.hosts[name]
        addresses = ip("-n", namespace, "-4", "-o", "addr", "show").split()
        assert {word for word in addresses if "/" in word and word[0].isdigit()} == {"127.0.0.1/8", f"{address}/24"}
        assert ip("-n", namespace, "-4", "route", "show").split("\n")[0].startswith("10.213.0.0/24 dev eth0")
        assert "default" not in ip("-n", namespace, "route", "show")
    url = f"http://{SCHEDULER_HOST}:{DASHBOARD_PORT}/status"
    probe = cluster.network.run(
        "client",
        [
            sys.executable,
            "-c",
            f"import urllib.request, sys; print(urllib.request.urlopen({url!r}, timeout=30).status)",
        ],
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "200", probe.stderr[-2000:]
    for name in ("w1", "w2"):
        assert f"Register worker addr: tcp://{cluster.addresses[name]}:" in cluster.scheduler_log()


@pytest.mark.hosts
def test_two_worker_hosts_build_the_one_machine_features(cluster, reference, tmp_path):
    done, events = cluster.build(tmp_path / "fs")
    _check_identical(tmp_path / "fs", reference)
    encoded = _encoded_by(events)
    assert set(encoded) == {"w1", "w2"}, f"the encode tasks did not run on both worker hosts: {encoded}"
    assert "Starting established connection to tcp://10.213.0.2:" in cluster.scheduler_log()  # the client host
    # The client printed where the dashboard answers: the scheduler host's address.
    assert f"Dask dashboard: http://{SCHEDULER_HOST}:{DASHBOARD_PORT}/status" in done.stderr


@pytest.mark.hosts
def test_a_worker_host_killed_while_encoding_changes_no_bit(cluster, reference, tmp_path):
    """SIGKILL w1's worker process while it runs an encode task: the scheduler gives the task to
    another worker (w1's nanny starts a new worker process), the build completes, same bits."""
    killed = {}

    def kill_w1_mid_encode(events):
        if killed:
            return
        open_tasks: dict[tuple[int, str], dict] = {}
        for event in events:
            if event["worker"] == "w1" and (event["key"] or "").startswith(ENCODE):
                if event["event"] == "start":
                    open_tasks[event["pid"], event["key"]] = event
                else:
                    open_tasks.pop((event["pid"], event["key"]), None)
        if open_tasks:
            (pid, key), _ = next(iter(open_tasks.items()))
            os.kill(pid, signal.SIGKILL)
            killed.update(pid=pid, key=key)

    registered = cluster.registrations("w1")
    _, events = cluster.build(tmp_path / "fs", on_events=kill_w1_mid_encode)
    assert killed, "w1 ran no encode task: the test did not kill a worker mid-encode"
    _check_identical(tmp_path / "fs", reference)
    # The killed task never finished on the killed process, and was finished by another one.
    by_killed = [event for event in events if event["pid"] == killed["pid"] and event["key"] == killed["key"]]
    assert [event["event"] for event in by_killed] == ["start"]
    finished = [event for event in events if event["key"] == killed["key"] and event["event"] == "done"]
    assert len(finished) == 1 and finished[0]["pid"] != killed["pid"]
    assert "Remove worker addr: tcp://10.213.0.11:" in cluster.scheduler_log()
    cluster.wait_for_worker("w1", registered + 1)  # the nanny's new worker process, for the next test


@pytest.mark.hosts
def test_a_worker_host_added_mid_build_receives_tasks_and_changes_no_bit(cluster, reference, tmp_path):
    """w3's worker starts once the build's first task has started; it joins and encodes images."""
    started = {}

    def add_w3_once_the_build_runs(events):
        if not started and any(event["event"] == "start" for event in events):
            cluster.start_worker("w3")
            started["time"] = time.time()

    try:
        _, events = cluster.build(tmp_path / "fs", on_events=add_w3_once_the_build_runs)
        assert started, "the build ran no task"
        _check_identical(tmp_path / "fs", reference)
        first_task = min(event["time"] for event in events if event["event"] == "start")
        joined = [event["time"] for event in events if event["worker"] == "w3" and event["event"] == "joined"]
        assert joined and joined[0] > first_task
        encoded = _encoded_by(events)
        assert encoded.get("w3"), f"the worker added mid-build received no encode task: {encoded}"
        assert set(encoded) == {"w1", "w2", "w3"}
    finally:
        cluster.network.stop("w3")


@pytest.mark.parametrize("missing", ["root", "ip"])
def test_without_root_or_ip_the_hosts_tests_fail_and_say_why(monkeypatch, missing):
    monkeypatch.setattr(os, "geteuid", lambda: 1000 if missing == "root" else 0)
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: None if missing == "ip" else f"/usr/sbin/{name}")
    with pytest.raises(pytest.fail.Exception, match="run them as root" if missing == "root" else "iproute2"):
        require_network_namespaces()
