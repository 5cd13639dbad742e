"""A whole Flower federation on this machine, over loopback: for tests, benchmarks and trying it out.

:class:`LoopbackFederation` starts one ``flower-superlink --insecure`` and ``nodes``
``flower-supernode --insecure`` processes, the SuperNode ``i`` with ``--node-config
"partition-id=i num-partitions=nodes"``, all listening on 127.0.0.1 only, on free ports; writes
a Flower configuration (``$FLWR_HOME/config.toml``, in its own ``home`` folder) naming the
SuperLink; and submits apps with ``flwr run APP <connection> --stream``. These are exactly the
commands of the README's "Deploying with Flower", so what passes here is what a user runs.

Every process it starts is stopped by its own PID (SIGTERM, then SIGKILL) when the context
exits, pass or fail; so are the helper processes those started (Flower's SuperExec and its
ServerApp/ClientApp processes), found by walking ``/proc`` down from those PIDs. Each process
logs to ``home/logs/<name>.log``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from fedgame.deploy.flower._env import FLOWER_ENV
from fedgame.deploy.flower.deployment import connection_toml

__all__ = ["CONNECTION", "FLOWER_BINARIES", "LoopbackFederation", "flower_bin_dir", "free_port"]

log = logging.getLogger(__name__)

CONNECTION = "fedgame-loopback"
"""The connection name :class:`LoopbackFederation` writes into its ``config.toml``."""

FLOWER_BINARIES = ("flower-superlink", "flower-supernode", "flower-superexec", "flwr", "flwr-serverapp", "flwr-clientapp")


def flower_bin_dir() -> Path | None:
    """The folder holding Flower's commands next to this Python (the venv's ``bin``), or None
    if any of :data:`FLOWER_BINARIES` is missing there."""
    d = Path(sys.executable).parent
    return d if all((d / b).exists() for b in FLOWER_BINARIES) else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _children() -> dict[int, list[int]]:
    """Parent PID → child PIDs of every process (Linux ``/proc``; empty elsewhere)."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_file: IO[bytes]
    helpers: set[int] = field(default_factory=set)


class LoopbackFederation:
    """One SuperLink and ``nodes`` SuperNodes on 127.0.0.1 (see the module docstring).

    ``home`` becomes ``FLWR_HOME`` for every process (Flower's config, installed apps, logs).
    ``bin_dir`` holds Flower's commands (default: next to this Python). ``env`` adds variables.
    ``node_configs``: SuperNode ``i``'s ``--node-config`` (default ``partition-id=i
    num-partitions=nodes``; a silo node's ``data-dir='<folder>'``,
    :func:`~fedgame.deploy.flower.deployment.silo_node_config`). ``cwd``: the working folder
    of every process (default: this process's).
    """

    def __init__(
        self,
        home: str | Path,
        *,
        nodes: int,
        bin_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 60.0,
        node_configs: Sequence[str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes: must be >= 1, got {nodes}")
        if node_configs is not None and len(node_configs) != nodes:
            raise ValueError(f"node_configs: must give one --node-config per SuperNode ({nodes}), got {len(node_configs)}")
        if not start_timeout > 0:
            raise ValueError(f"start_timeout: must be > 0 seconds, got {start_timeout}")
        found = bin_dir or flower_bin_dir()
        if found is None:
            raise FileNotFoundError(
                f"Flower's commands ({', '.join(FLOWER_BINARIES)}) are not next to {sys.executable}; install the flower extra"
            )
        self.bin_dir = found
        self.home = Path(home).resolve()
        self.nodes = int(nodes)
        self.start_timeout = float(start_timeout)
        self.port = free_port()
        self.node_ports: list[int] = []
        self.env = {
            **os.environ,
            **FLOWER_ENV,
            **(env or {}),
            "FLWR_HOME": str(self.home),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.procs: list[_Proc] = []
        self.supernodes: list[_Proc | None] = []
        self.node_configs = (
            list(node_configs) if node_configs is not None else [f"partition-id={i} num-partitions={nodes}" for i in range(nodes)]
        )
        self.cwd = None if cwd is None else Path(cwd)

    @property
    def address(self) -> str:
        """The SuperLink's address (Fleet, Control and Runtime APIs share it in Flower 1.42)."""
        return f"127.0.0.1:{self.port}"

    # -- processes ---------------------------------------------------------------------
    def _spawn(self, name: str, args: Sequence[str]) -> _Proc:
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        f = (logs / f"{name}.log").open("wb")
        # a session of its own: a signal to the test's terminal never reaches it, and it
        # is stopped only by its PID
        p = subprocess.Popen(
            [str(self.bin_dir / args[0]), *args[1:]], stdout=f, stderr=subprocess.STDOUT, env=self.env, start_new_session=True, cwd=self.cwd
        )
        proc = _Proc(name, p, f)
        self.procs.append(proc)
        log.info("started %s (pid %d): %s", name, p.pid, " ".join(args))
        return proc

    def start(self) -> Self:
        """Start the SuperLink, wait until it listens, start the SuperNodes, write the config."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n' + connection_toml(CONNECTION, self.address))
        sl = self._spawn(
            "superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(self.port), "--isolation", "subprocess"]
        )
        deadline = time.monotonic() + self.start_timeout
        while not _listening(self.port):
            if sl.popen.poll() is not None:
                raise RuntimeError(f"flower-superlink exited with code {sl.popen.returncode}; see {self.home / 'logs' / 'superlink.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"flower-superlink did not listen on {self.address} within {self.start_timeout:g} s")
            time.sleep(0.2)
        for i in range(self.nodes):
            self.supernodes.append(None)
            self.start_node(i)
        return self

    def run(self, app: str | Path, *, timeout: float, extra: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
        """``flwr run APP <connection> --stream``: submit ``app`` and follow its log until the
        run ends; ``extra`` adds arguments (``--run-config ...``). On ``timeout`` the command
        is killed by its PID and :class:`subprocess.TimeoutExpired` raised."""
        p = self.submit(app, extra=extra)
        args = self._flwr_run(app, extra)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_pid(p.pid, p)
            out, _ = p.communicate()
            raise subprocess.TimeoutExpired(args, timeout, output=out) from None
        finally:
            if p.poll() is None:
                _stop_pid(p.pid, p)
        return subprocess.CompletedProcess(args, p.returncode, out, None)

    def start_node(self, i: int) -> None:
        """Start SuperNode ``i`` with its node config on a fresh port (again, after
        :meth:`kill_node`: a restarted node, which the SuperLink gives a new node id)."""
        if self.supernodes[i] is not None:
            raise ValueError(f"node {i}: already running")
        port = free_port()
        self.node_ports.append(port)
        args = ["flower-supernode", "--insecure", "--superlink", self.address, "--host", "127.0.0.1", "--port", str(port)]
        args += ["--isolation", "subprocess", "--node-config", self.node_configs[i]]
        self.supernodes[i] = self._spawn(f"supernode-{i}", args)

    def _flwr_run(self, app: str | Path, extra: Sequence[str]) -> list[str]:
        return [str(self.bin_dir / "flwr"), "run", str(app), CONNECTION, "--stream", *extra]

    def submit(self, app: str | Path, *, extra: Sequence[str] = ()) -> subprocess.Popen[str]:
        """``flwr run APP <connection> --stream`` started and left running (:meth:`run` waits
        for it); the caller stops it (its own session: ``os.killpg``)."""
        return subprocess.Popen(
            self._flwr_run(app, extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            text=True,
            start_new_session=True,
            cwd=self.cwd,
        )

    def kill_serverapps(self, sig: signal.Signals = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every ServerApp process the SuperLink started (``flwr-serverapp``:
        the server's machine crashed mid-run); their PIDs."""
        sl = next(p for p in self.procs if p.name == "superlink")
        killed = []
        for pid in _descendants(sl.popen.pid):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(part.endswith(b"flwr-serverapp") for part in cmd[:2]):
                try:
                    os.kill(pid, sig)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
        return killed

    def kill_node(self, i: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop SuperNode ``i`` and the processes it started (its SuperExec, a running
        ClientApp) with ``sig`` — SIGKILL: the machine crashed — and reap it."""
        proc = self.supernodes[i]
        if proc is None:
            raise ValueError(f"node {i}: already stopped")
        helpers = _descendants(proc.popen.pid)
        proc.helpers.update(helpers)
        for pid in [proc.popen.pid, *helpers]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        proc.popen.wait(timeout=30)
        self.supernodes[i] = None

    def log_text(self, name: str) -> str:
        """What process ``name`` (``superlink``, ``supernode-<i>``) logged so far."""
        path = self.home / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop every process this federation started (and their helpers), by PID."""
        for proc in self.procs:
            proc.helpers.update(_descendants(proc.popen.pid))
        for proc in reversed(self.procs):
            _stop_pid(proc.popen.pid, proc.popen)
            proc.log_file.close()
        helpers = {h for proc in self.procs for h in proc.helpers}
        deadline = time.monotonic() + 5.0
        while helpers and time.monotonic() < deadline:  # they exit on their own once their parent is gone
            helpers = {h for h in helpers if _alive(h)}
            time.sleep(0.2)
        for h in helpers:
            try:
                os.kill(h, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie — dead, not yet reaped by its parent — does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _stop_pid(pid: int, popen: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM ``pid``, SIGKILL it after 10 s, and reap it."""
    if popen.poll() is not None:
        return
    try:
        popen.send_signal(signal.SIGTERM)
        popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=10)
    except ProcessLookupError:
        pass
