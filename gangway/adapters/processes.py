"""Child processes: started so that they die with the process that started them, and stopped.

The embedded broker and `gangway up`'s services run as children; nothing outside the adapters
starts a process (the import-linter contract "only the adapters start processes" checks it).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

#: A running child (``poll()`` is its exit code, or None while it runs).
Process = subprocess.Popen


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies (Linux), so a
    killed test or CLI never leaves an orphan broker or service behind."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: best effort only
        pass


def spawn(cmd: list[str], log_path: str | Path | None = None, env: dict[str, str] | None = None,
          new_session: bool = False, pass_fds: tuple[int, ...] = ()) -> Process:
    """Start ``cmd`` with no standard input, its output appended to ``log_path`` (else discarded),
    dying with this process; ``new_session`` keeps terminal signals (Ctrl-C) away from it;
    ``pass_fds``: file descriptors it inherits (a listening socket)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=new_session, preexec_fn=die_with_parent,
                                pass_fds=pass_fds)
    finally:
        if out is not subprocess.DEVNULL:
            out.close()


def stop(processes: list[Process], grace_s: float) -> None:
    """SIGTERM every process still running, wait up to ``grace_s`` for them all, then kill the rest."""
    for proc in processes:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
