"""A real control plane for the tests: etcd and kube-apiserver on free loopback ports.

The binaries come from ``infra/envtest/build.sh`` (built from the Go module proxy and cached in
``.cache/envtest/<version>/``; ``GANGWAY_ENVTEST_DIR`` overrides). As with Kueue's envtest, no
controller-manager and no scheduler run: the tests create the pods a Job controller would, and play
the kubelet where they need one (one test runs kube-controller-manager's own Job controller beside the
binder: ``ControlPlane.controllers``). The API server authorizes with RBAC; the tests talk to it as an
admin (a static token in ``system:masters``) or as a ServiceAccount (a token from the TokenRequest
API, signed with a key generated at start).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from gangway.adapters.broker import free_ports

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "gangway-test-admin-token"


def binaries_dir() -> Path | None:
    env = os.environ.get("GANGWAY_ENVTEST_DIR")
    if env:
        return Path(env)
    version = next((line.split()[1] for line in (ROOT / "infra/envtest/go.mod").read_text().splitlines()
                    if line.strip().startswith("k8s.io/kubernetes ")), "")
    return ROOT / ".cache" / "envtest" / version


def missing() -> str:
    """Why the control plane cannot start here ('' when it can)."""
    where = binaries_dir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        if not (where / name).exists():
            return f"no {name} in {where}: run `bash infra/envtest/build.sh` (needs Go 1.26 and the Go module proxy)"
    if shutil.which("openssl") is None:
        return "no openssl to make the service-account signing key"
    return ""


def kubeconfig(server: str, token: str, user: str = "admin") -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "envtest", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "envtest", "user": user}}],
    }


class ControlPlane:
    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="gangway-envtest-"))
        self.procs: list[subprocess.Popen] = []
        self.server = ""
        self.kubeconfig_path = self.dir / "admin.kubeconfig"

    def start(self, timeout_s: float = 60.0) -> "ControlPlane":
        d = self.dir
        etcd_client, etcd_peer, api_port = free_ports(3)
        subprocess.run(["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
                       check=True, capture_output=True)
        (d / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        (d / "certs").mkdir()
        self._spawn("etcd", [
            str(self.bin_dir / "etcd"), "--data-dir", str(d / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._spawn("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            # No controller-manager creates the namespaces' "default" ServiceAccount.
            "--disable-admission-plugins=ServiceAccount",
            # Watches served by etcd, compacted every few seconds: a watch from an old resourceVersion
            # really gets 410 Gone (the watch cache would replay from its own window instead).
            "--etcd-compaction-interval=2s", "--watch-cache=false",
            "--allow-privileged=true", "--v=0",
        ])
        self.server = f"https://127.0.0.1:{api_port}"
        self.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig(self.server, ADMIN_TOKEN)))
        self._wait_ready(timeout_s)
        return self

    @contextlib.contextmanager
    def controllers(self, names: str = "job"):
        """kube-controller-manager running only the controllers ``names`` (comma-separated) for the
        block, as the admin; the other tests play those controllers themselves."""
        self._spawn("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig_path}",
            f"--controllers={names}", "--leader-elect=false", "--secure-port=0",
            "--use-service-account-credentials=false", "--v=1",
        ])
        proc = self.procs[-1]
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.procs.remove(proc)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(self.dir / f"{name}.log", "wb")
        # Not part of any gangway stack: none of the session's GANGWAY_* settings (a stack's orphan
        # check finds its processes by GANGWAY_STATE_DIR in their environment).
        env = {k: v for k, v in os.environ.items() if not k.startswith("GANGWAY_")}
        self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env))

    def _wait_ready(self, timeout_s: float) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}; see {self.dir}")
            try:
                req = urllib.request.Request(self.server + "/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
                with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready in {timeout_s} s ({last}); see {self.dir}")

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        """A synchronous admin request (fixtures use it outside any event loop)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")

    def stop(self) -> None:
        """Killed: their data is thrown away (kube-apiserver's graceful stop outlasted a 10-s wait)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
