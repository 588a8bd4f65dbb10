"""Separate hosts on one machine, for ``tests/test_hosts.py``: Linux network namespaces on a bridge.

A :class:`Network` is a *switch* namespace holding a bridge ``br0`` and one namespace per host,
each with its own loopback and an ``eth0`` joined to the bridge by a veth pair (created
directly inside the namespaces: nothing is added to this machine's own network, and two runs
never collide, their namespaces being named after the process and a random tag).  A host's
outgoing traffic is bounded by a token-bucket filter (``tc ... tbf``), like a LAN link.
Processes run in a host with ``ip netns exec``; they share this machine's file system (the
"shared file system" of a real cluster) and process table, not its network.

:meth:`Network.close` kills every process left in the namespaces and deletes them; a run that
was killed before it could clean up is swept by the next one (namespaces whose creating
process is gone).  Needs root and iproute2 (:func:`require_network_namespaces`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

#: The hosts' addresses are ``SUBNET.n`` (only inside the namespaces).
SUBNET = "10.213.0"
#: Namespace names start with it, then the creating process's id.
PREFIX = "classify-hosts-"
#: Each host's outgoing bandwidth (tc rate syntax).
LINK_RATE = "200mbit"


def require_network_namespaces() -> None:
    """Fail (never skip) when this process cannot create network namespaces."""
    if shutil.which("ip") is None:
        pytest.fail("the hosts tests need iproute2's `ip` (Debian: apt-get install iproute2)")
    if os.geteuid() != 0:
        pytest.fail("the hosts tests create network namespaces: run them as root (e.g. in CI, .ci/run)")


def ip(*args: str) -> str:
    """``ip ARGS``; its stdout.  A failure raises with ``ip``'s own message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def namespaces() -> list[str]:
    """The names of this machine's named network namespaces."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_namespace(name: str) -> None:
    """Kill every process in network namespace ``name``, then delete it."""
    for _ in range(50):
        pids = [int(pid) for pid in ip("netns", "pids", name).split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    ip("netns", "del", name)


def sweep_stale_namespaces() -> list[str]:
    """Delete the namespaces of earlier runs whose process is gone (killed before its cleanup)."""
    stale = [
        name
        for name in namespaces()
        if (match := re.match(rf"{re.escape(PREFIX)}(\d+)-", name)) and not _alive(int(match[1]))
    ]
    for name in stale:
        _remove_namespace(name)
    return stale


class Network:
    """A bridge and hosts on it, each in its own network namespace; a context manager.

    Parameters
    ----------
    logs : path
        Folder of the processes' output (``<host>-<n>.log``).
    """

    def __init__(self, logs: Path) -> None:
        self.tag = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.logs = Path(logs)
        self.hosts: dict[str, tuple[str, str]] = {}  # name -> (namespace, address)
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self._created: list[str] = []

    @property
    def switch(self) -> str:
        return f"{self.tag}-switch"

    def __enter__(self) -> Network:
        sweep_stale_namespaces()
        try:
            self._add_namespace(self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self._created.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str, number: int) -> str:
        """A host ``name`` at address ``SUBNET.number`` on the bridge; its address."""
        namespace, address = f"{self.tag}-{name}", f"{SUBNET}.{number}"
        self._add_namespace(namespace)
        port = f"port{number}"
        ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        subprocess.run(
            [
                "tc",
                "-n",
                namespace,
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                "tbf",
                "rate",
                LINK_RATE,
                "burst",
                "256kb",
                "latency",
                "50ms",
            ],
            check=True,
            capture_output=True,
        )
        self.hosts[name] = (namespace, address)
        return address

    def start(self, host: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``command`` on ``host`` (its own session), its output in ``logs/<host>-<n>.log``."""
        namespace, _ = self.hosts[host]
        log_path = self.log_path(host, sum(name == host for name, _ in self.processes))
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                ["ip", "netns", "exec", namespace, *command],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.processes.append((host, process))
        return process

    def log_path(self, host: str, number: int = 0) -> Path:
        return self.logs / f"{host}-{number}.log"

    def run(
        self, host: str, command: list[str], timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``command`` on ``host`` to its end; its output as text."""
        namespace, _ = self.hosts[host]
        return subprocess.run(
            ["ip", "netns", "exec", namespace, *command], capture_output=True, text=True, timeout=timeout, env=env
        )

    def stop(self, host: str) -> None:
        """Kill the processes started on ``host`` (their whole sessions)."""
        for name, process in self.processes:
            if name == host and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(30)

    def close(self) -> None:
        """Kill every process started here or still in the namespaces, delete the namespaces.

        Raises
        ------
        RuntimeError
            A namespace is still there afterwards.
        """
        for host in {name for name, _ in self.processes}:
            self.stop(host)
        for name in reversed(self._created):
            if name in namespaces():
                _remove_namespace(name)
        left = [name for name in namespaces() if name.startswith(self.tag)]
        self._created = []
        if left:
            raise RuntimeError(f"network namespaces left behind: {', '.join(left)}")
