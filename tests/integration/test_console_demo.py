"""`gangway demo --console`: the demo's story, then its stack and the console stay up until Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import VENV_BIN, processes_with_env

pytestmark = pytest.mark.broker


def service_logs(logs: Path, lines: int = 15) -> str:
    """The last lines of each of the demo stack's logs (what a stalled demo was doing)."""
    return "".join(f"\n--- {path.name} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
                   for path in sorted(logs.glob("*.log")))


def test_demo_console_serves_the_demos_log_until_ctrl_c(tmp_path):
    state = tmp_path / "state"
    env = dict(os.environ, GANGWAY_STATE_DIR=str(state), COLUMNS="200", NO_COLOR="1")
    for name in ("GANGWAY_KAFKA", "GANGWAY_DB", "GANGWAY_CLOCK"):
        env.pop(name, None)
    proc = subprocess.Popen([str(VENV_BIN / "gangway"), "demo", "--console", "--port", "0", "--time-scale", "600",
                             "--out", str(tmp_path / "demo-log.jsonl")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 200  # beyond the demo's own timeout, which prints its state
        url = None
        while url is None:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("no console address printed:\n" + "".join(lines) + service_logs(state / "demo" / "logs"))
            lines.append(line)
            found = re.search(r"gangway console at (http://127\.0\.0\.1:\d+/)", line)
            url = found.group(1) if found else None
        assert "replay reproduced" in "".join(lines)  # the demo's story was told first
        view = json.loads(urllib.request.urlopen(url + "api/view", timeout=10).read())
        assert view["summary"]["nodes"] == 8 and view["summary"]["pending"] == 0
        assert {row["team"] for row in view["money"]["teams"]} == {"batch", "research", "serving"}
        job = json.loads(urllib.request.urlopen(url + "api/job?name=serving/inference-canary", timeout=30).read())
        assert any(step["step"] == "made room" for step in job["timeline"])
        assert proc.poll() is None  # still serving after the story
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    assert proc.returncode == 0, "".join(lines) + rest
    assert not processes_with_env("GANGWAY_STATE_DIR", str(state / "demo"))
