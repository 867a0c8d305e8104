"""One `gangway up` per state directory: a second one on a live directory started a second broker
and archiver on the same archive, which corrupted it for every later start (an operator's report)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gangway import stack

VENV_BIN = Path(sys.executable).parent


def test_a_second_gangway_up_on_a_live_state_directory_is_refused_in_one_line_before_it_starts_anything(tmp_path):
    held = stack._lock(tmp_path / stack.LOCK_FILE)  # what a running `gangway up` holds
    try:
        env = dict(os.environ, GANGWAY_STATE_DIR=str(tmp_path))
        env.pop("GANGWAY_KAFKA", None)
        result = subprocess.run([str(VENV_BIN / "gangway"), "up"], env=env, capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 1, result.stderr
        assert result.stderr == (f"gangway: a gangway stack is already running from {tmp_path} (pid {os.getpid()}): "
                                 "stop it first (Ctrl-C where `gangway up` runs), or start another with "
                                 "GANGWAY_STATE_DIR set to another directory\n")
        assert not (tmp_path / "bootstrap").exists() and not (tmp_path / "logs" / "broker.log").exists()
    finally:
        held.close()
    again = stack._lock(tmp_path / stack.LOCK_FILE)  # released: the next start may take it
    again.close()


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    """A `gangway up` killed (SIGKILL) leaves no stale lock: the kernel drops it with the process."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from gangway import stack; "
                               f"held = stack._lock(__import__('pathlib').Path({str(tmp_path / stack.LOCK_FILE)!r})); "
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(stack.StackRunning, match=f"pid {holder.pid}"):
            stack._lock(tmp_path / stack.LOCK_FILE)
    finally:
        holder.kill()
        holder.wait()
    stack._lock(tmp_path / stack.LOCK_FILE).close()


def test_ports_asked_for_together_are_distinct():
    """Two listeners of one Apache Kafka broker were given the same port (each asked for alone, the
    first's socket closed before the second was bound): a broker that never started in CI."""
    from gangway.adapters.broker import free_ports
    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports)


def test_the_embedded_broker_is_started_again_on_the_port_it_last_listened_on_when_that_port_is_free(tmp_path, monkeypatch):
    """So a `gangway log --follow` or console left running across a restart of `gangway up` finds
    the log again (tests/integration/test_durability.py follows one across a kill -9)."""
    import socket

    from gangway.adapters.broker import free_port
    monkeypatch.setattr(stack, "PORT_AGAIN_WAIT_S", 0.2)
    path = tmp_path / stack.BROKER_PORT_FILE
    assert stack._port_again(path) == 0  # none recorded
    port = free_port()
    path.write_text(f"{port}\n")
    assert stack._port_again(path) == port
    with socket.socket() as taken:  # something else listens there now: any free port
        taken.bind(("127.0.0.1", port))
        taken.listen()
        assert stack._port_again(path) == 0
    for junk in ("", "x", "0", "70000"):
        path.write_text(junk)
        assert stack._port_again(path) == 0, junk


def test_a_lost_broker_is_said_once_in_a_while_not_at_every_retry():
    import logging

    from gangway.adapters.kafka import _Repeats
    clock = [100.0]
    repeats, passed = _Repeats(every_s=30, clock=lambda: clock[0]), []

    def log(msg: str, level=logging.ERROR) -> None:
        record = logging.LogRecord("aiokafka", level, __file__, 1, msg, ("111",), None)
        if repeats.filter(record):
            passed.append(record.msg)
    for _ in range(50):  # a retry loop, several times a second
        log("Unable connect to node with id %s")
        clock[0] += 0.2
    log("Unable to update metadata from [%s]")
    log("Fetched %s records", logging.DEBUG)  # (below warnings: never held back)
    log("Fetched %s records", logging.DEBUG)
    clock[0] += 30
    log("Unable connect to node with id %s")
    assert passed == ["Unable connect to node with id %s", "Unable to update metadata from [%s]",
                      "Fetched %s records", "Fetched %s records",
                      "Unable connect to node with id %s (and 49 more like it in the last 40 s)"]


def test_a_stack_stops_in_its_own_state_directory_whatever_the_environment_says_later(tmp_path, monkeypatch):
    """Two stacks in one process (the integration tests' session and module fixtures): stopping the
    first while GANGWAY_STATE_DIR names the second's directory removed the second's bootstrap file
    and left its own behind — the stack read its directory from the environment at stop time."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    monkeypatch.setenv("GANGWAY_STATE_DIR", str(ours))
    running = stack.Stack()

    class Broker:  # (what stop() asks of the embedded broker)
        stopped = False

        def stop(self):
            Broker.stopped = True

    running.broker = Broker()
    for folder in (ours, theirs):
        folder.mkdir()
        (folder / "bootstrap").write_text("127.0.0.1:9092 embedded\n")
    monkeypatch.setenv("GANGWAY_STATE_DIR", str(theirs))  # another stack started meanwhile
    running.stop()
    assert Broker.stopped
    assert not (ours / "bootstrap").exists()
    assert (theirs / "bootstrap").exists()
