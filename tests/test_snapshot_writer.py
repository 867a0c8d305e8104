"""A service's snapshot is written by a forked, lowest-priority copy of its process while the service
goes on (``LogService.snapshot_in_background``): every service reached its threshold at about the same
offset and encoded its state in its loop, stalling the whole pipeline at once. No broker needed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import msgspec
import pytest

from gangway.events.state import State
from gangway.services.runtime import shell
from gangway.services.runtime.clock import ClusterClock
from gangway.services.runtime.shell import DecidingService
from test_shell import nodes  # (observed nodes at their offsets)

needs_fork = pytest.mark.skipif(not shell._CAN_FORK, reason="no fork and prctl here: snapshots are written in the loop")


def service(tmp_path) -> DecidingService:
    return DecidingService("admission", "127.0.0.1:9", tmp_path, ClusterClock.starting_now())


def snapshot(tmp_path) -> State:
    return msgspec.msgpack.decode((tmp_path / "admission.snapshot").read_bytes(), type=State)


@needs_fork
def test_the_snapshot_is_the_state_when_it_was_asked_for_while_the_service_goes_on(tmp_path):
    s = service(tmp_path)
    for env in nodes(3):
        s.fold(env)
    s.snapshot_in_background()
    writer = s._writer
    assert writer is not None and writer != os.getpid() and s._since_snapshot == 0
    for env in nodes(2, start=3):  # folded after the fork: not in that snapshot
        s.fold(env)
    assert s._reap_writer(block=True) and s._writer is None
    written = snapshot(tmp_path)
    assert written.offset == 2 and sorted(written.nodes) == ["n0", "n1", "n2"]
    assert not list(tmp_path.glob("*.tmp"))
    s.save_snapshot()  # at a stop: written in the loop, the whole state
    assert snapshot(tmp_path).offset == 4


@needs_fork
def test_no_second_writer_while_one_still_writes(tmp_path):
    s = service(tmp_path)
    for env in nodes(2):
        s.fold(env)
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # a child of ours, still running
    try:
        s._writer = busy.pid
        s.snapshot_in_background()
        assert s._writer == busy.pid and s._since_snapshot == 2  # asked again at the next turn
        assert not (tmp_path / "admission.snapshot").exists()
    finally:
        busy.kill()
        busy.wait()
    s._writer = None
    s.snapshot_in_background()
    assert s._reap_writer(block=True) and snapshot(tmp_path).offset == 1


@needs_fork
def test_a_writer_dies_with_its_service(tmp_path):
    """A service killed while its snapshot is written leaves no process behind (its writer is killed
    with it) and no half-written snapshot (a ``.tmp`` file at most)."""
    code = f"""
import os, sys, time
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_snapshot_writer import nodes, service  # (nodes: test_shell's)
from pathlib import Path
s = service(Path({str(tmp_path)!r}))
for env in nodes(2):
    s.fold(env)
s._write_snapshot = lambda: time.sleep(60)  # (in the writer: a write that takes long)
s.snapshot_in_background()
print(s._writer, flush=True)
os._exit(0)  # the service dies (as under kill -9: nothing reaps its writer)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    writer = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while _alive(writer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(writer)
    assert not (tmp_path / "admission.snapshot").exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
