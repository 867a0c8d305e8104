"""The binder's mutating admission webhook: a Job, JobSet or Kubeflow job (PyTorchJob, TFJob, MPIJob…)
created with a queue label and not suspended is stored suspended, so its controller never makes a pod
before gangway admits it (Kueue's webhook does the same). Without the webhook the binder suspends such
an object at its next pass over the cluster (``KubernetesBinder._intake``), and a pod made meanwhile
is deleted.

- ``review``: an AdmissionReview (``admission.k8s.io/v1``) in, its answer out: a JSON patch that
  suspends the object when it needs one (created, or resumed by hand, without gangway's admission),
  and, given the intake's ``check`` (the stack passes ``submission.kubernetes.check_object``), a
  queued object created with a manifest gangway would refuse whatever the contract says (a malformed
  Kueue key, a pod set it cannot take) refused there and then, as Kueue's webhook refuses one: the
  owner's ``kubectl apply`` says why, and the rejection, the object as written kept, goes to
  gangway.rejections (``refused``) as the intake's would. An update that breaks such an object,
  changes what gangway read of it (its pods, their resources, where they may run, its priority) or
  its queue while it runs is refused as Kueue refuses what it does not follow; the object stays as
  it was. Keys gangway ignores come back as warnings (``kubectl`` prints them). Pure.
- ``issue`` / ``own_certs`` / ``publish_ca``: the API server calls webhooks over HTTPS only. Unless
  the platform mounts a certificate (``--webhook-cert-dir``: cert-manager's ``tls.crt`` and
  ``tls.key``), gangway makes its own, as Kueue's internal certificates do: a CA and a serving
  certificate for the webhook's Service, kept in one Secret of gangway's namespace (the first replica
  makes it, the others read it), and the CA written into the MutatingWebhookConfiguration's caBundle.
- ``WebhookServer``: HTTPS on ``POST /mutate`` (and ``GET /healthz``), beside the binder in its process;
  every replica serves (the webhook decides nothing: it suspends, and refuses what no contract
  admits; whether the queue exists, and everything else the contract says, stays the intake's).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import logging
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gangway.adapters.kubernetes import ApiError, Kube
from gangway.adapters.kubernetes import client as api
from gangway.events.catalogue import JobRejected
from gangway.events.kubeflow import TRAINING_KINDS
from gangway.services.binder import objects as ob
from gangway.services.binder.errors import WebhookError

log = logging.getLogger(__name__)
PATH = "/mutate"
#: The names of the defaults in infra/k8s (binder-webhook.yaml, binder-rbac.yaml).
SERVICE = "gangway-binder-webhook"
CONFIGURATION = "gangway"
SECRET = "gangway-webhook-cert"
#: How long gangway's own CA and serving certificate are valid; made again when fewer days are left
#: than RENEW_DAYS (at a binder's start) or when they do not name the webhook's Service.
VALID_DAYS = 3650
RENEW_DAYS = 30
SECRETS = api.Resource("", "v1", "secrets", "Secret")
WEBHOOK_CONFIGURATIONS = api.Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                      "MutatingWebhookConfiguration", namespaced=False)


class ReviewError(ValueError):
    """The body is not an AdmissionReview gangway can answer (the server says so with HTTP 400)."""


#: The intake's check of an object as it is created (or updated: the object as it was, third): its
#: rejection, or what of it gangway ignores.
Check = Callable[[dict, str, "dict | None"], "JobRejected | list[str]"]


def review(body: object, check: Check | None = None, refused: Callable[[JobRejected], None] | None = None) -> dict:
    """The answer to an AdmissionReview: allowed, with a JSON patch suspending the object when it is a
    kind gangway takes, carries a queue label, is not suspended and is not one gangway resumed; with
    ``check``, such an object created with a manifest gangway refuses is not allowed (HTTP 422 in the
    status, the reason and message of its rejection), and its rejection is handed to ``refused``. An
    update (with ``oldObject``) is checked too: one ``check`` refuses (it breaks the object, changes
    what gangway read of it, or its queue while it runs) is not allowed, the object staying as it was."""
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview" or not isinstance(body.get("request"), dict):
        raise ReviewError("not an AdmissionReview: expected {\"kind\": \"AdmissionReview\", \"request\": {…}}")
    request = body["request"]
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("the AdmissionReview's request has no uid")
    response: dict = {"uid": uid, "allowed": True}
    obj, old = request.get("object"), request.get("oldObject")
    creating = request.get("operation") == "CREATE" and isinstance(obj, dict)
    updating = request.get("operation") == "UPDATE" and isinstance(obj, dict) and isinstance(old, dict)
    warnings = []
    if (creating or updating) and check is not None and ob.kind_of(obj) in ob.KINDS and (
            ob.queued_object(obj) or updating and ob.queued_object(old)):
        if not isinstance((obj.get("metadata") or {}).get("namespace"), str):  # (as the API server fills it in)
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": request.get("namespace") or ""}}
        checked = check(obj, uid, old if updating else None)
        if isinstance(checked, JobRejected):
            if refused is not None and creating:  # (an update refused leaves the object as it was)
                refused(checked)
            response.update(allowed=False, status={
                "code": 422, "reason": "Invalid",
                "message": f"gangway refuses {ob.kind_of(obj)} {checked.namespace}/{checked.job_id}: "
                           f"{checked.reason}: {checked.message}"})
            return _answer(body, response)
        warnings += [f"Ignored by gangway: {why}" for why in checked]
    ops = suspend_ops(obj) if creating or updating else []
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        warnings.insert(0, f"{ob.kind_of(obj)} {'created without suspend' if creating else 'resumed by hand'}: "
                           "suspended by gangway until it is admitted")
    if warnings:
        response["warnings"] = warnings
    return _answer(body, response)


def _answer(body: dict, response: dict) -> dict:
    return {"apiVersion": body.get("apiVersion") or "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": response}


def suspend_ops(obj: dict) -> list[dict]:
    """The JSON patch (RFC 6902) that suspends ``obj``, [] when gangway leaves it as it is
    (``objects.needs_suspending``)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not ob.needs_suspending(obj):
        return []  # (no spec object: the API server refuses it on its own)
    if ob.kind_of(obj) in TRAINING_KINDS:
        if isinstance(spec.get("runPolicy"), dict):
            return [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
        return [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


# --- certificates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    """PEM: the CA's certificate and key, the serving certificate and its key."""
    ca: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def serves(self, names: list[str], now: datetime.datetime | None = None) -> bool:
        """Does the serving certificate name every one of ``names`` and stay valid RENEW_DAYS more?"""
        from cryptography import x509
        try:
            cert = x509.load_pem_x509_certificate(self.cert)
            x509.load_pem_x509_certificate(self.ca)
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except (ValueError, x509.ExtensionNotFound):
            return False
        have = set(sans.get_values_for_type(x509.DNSName)) | {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return set(names) <= have and cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_DAYS)


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may call a Service by."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def issue(names: list[str], days: int = VALID_DAYS) -> Certs:
    """A new CA and a serving certificate it signs for ``names`` (DNS names or IP addresses)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gangway-webhook-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))

    def pem_key(k) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return Certs(ca.public_bytes(serialization.Encoding.PEM), pem_key(ca_key),
                 cert.public_bytes(serialization.Encoding.PEM), pem_key(key))


_KEYS = {"ca": "ca.crt", "ca_key": "ca.key", "cert": "tls.crt", "key": "tls.key"}


def _from_secret(secret: dict) -> Certs | None:
    data = secret.get("data") or {}
    try:
        return Certs(**{field: base64.b64decode(data[key]) for field, key in _KEYS.items()})
    except (KeyError, ValueError, TypeError):
        return None


def _secret(name: str, namespace: str, certs: Certs, resource_version: str | None = None) -> dict:
    meta: dict = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "gangway"}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
            "data": {key: base64.b64encode(getattr(certs, field)).decode() for field, key in _KEYS.items()}}


async def own_certs(kube: Kube, namespace: str, names: list[str], secret: str = SECRET) -> Certs:
    """The certificates of the Secret ``secret``, made (or made again, when they do not serve
    ``names`` for RENEW_DAYS more) by whichever replica gets there first."""
    for _ in range(5):
        try:
            found = await kube.get(SECRETS, secret, namespace)
        except ApiError as exc:
            if not exc.not_found:
                raise
            found = None
        certs = _from_secret(found) if found else None
        if certs is not None and certs.serves(names):
            return certs
        fresh = issue(names)
        try:
            if found is None:
                await kube.create(SECRETS, _secret(secret, namespace, fresh), namespace)
            else:
                log.info("webhook: the certificate in Secret %s/%s does not serve %s for %d more days: made again",
                         namespace, secret, ", ".join(names), RENEW_DAYS)
                await kube.replace(SECRETS, secret, _secret(secret, namespace, fresh, ob.meta(found).get("resourceVersion")),
                                   namespace)
            return fresh
        except ApiError as exc:
            if not exc.conflict:  # (409: another replica wrote it first: read theirs)
                raise
    raise WebhookError(f"webhook: Secret {namespace}/{secret} kept changing under this replica")


async def publish_ca(kube: Kube, ca: bytes, configuration: str = CONFIGURATION) -> int:
    """Write ``ca`` into the caBundle of every webhook of the MutatingWebhookConfiguration
    ``configuration`` that lacks it; returns how many were written. Each write tests the
    resourceVersion it read (a configuration changed meanwhile is not half-patched): one that
    changed — another replica, starting at the same time, wrote the same CA — is read again."""
    bundle = base64.b64encode(ca).decode()
    found = await kube.get(WEBHOOK_CONFIGURATIONS, configuration)
    for _ in range(5):
        ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
               for i, hook in enumerate(found.get("webhooks") or [])
               if (hook.get("clientConfig") or {}).get("caBundle") != bundle]
        if not ops:
            return 0
        read = ob.meta(found).get("resourceVersion")
        try:
            await kube.patch(WEBHOOK_CONFIGURATIONS, configuration,
                             [{"op": "test", "path": "/metadata/resourceVersion", "value": read}, *ops], kind="json")
            return len(ops)
        except ApiError as exc:
            found = await kube.get(WEBHOOK_CONFIGURATIONS, configuration)
            if exc.status != 422 or ob.meta(found).get("resourceVersion") == read:
                raise  # (422 with the configuration unchanged: the patch itself was refused, not its test)
    raise WebhookError(f"webhook: MutatingWebhookConfiguration {configuration} kept changing under this replica")


# --- the server --------------------------------------------------------------------------------------


def create_app(check: Check | None = None, refused: Callable[[JobRejected], None] | None = None):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    async def mutate(request: Request):
        raw = await request.body()
        try:
            answer = review(json.loads(raw), check, refused)
        except ValueError as exc:  # (a ReviewError, or json's JSONDecodeError)
            log.warning("webhook: refused a request of %d bytes: %s", len(raw), exc)
            return PlainTextResponse(f"gangway webhook: {exc}\n", status_code=400)
        return JSONResponse(answer)

    async def healthz(_: Request):
        return PlainTextResponse("ok\n")

    return Starlette(routes=[Route(PATH, mutate, methods=["POST"]), Route("/healthz", healthz)])


@dataclass(frozen=True)
class Options:
    """``gangway service binder --kubernetes --webhook-port …``: where to serve, which Service its
    certificate names, which configuration takes its CA, or the platform's certificate directory."""
    port: int
    service: str = SERVICE
    configuration: str = CONFIGURATION
    cert_dir: str | None = None
    #: a host name or IP address the API server calls the webhook by besides its Service (a binder
    #: outside the cluster, registered by URL): gangway's own certificate names it too
    host: str | None = None

    async def certs(self, kube: Kube, namespace: str) -> Certs:
        """The certificates to serve: mounted ones, or gangway's own with its CA published."""
        if self.cert_dir:
            return mounted_certs(self.cert_dir)
        certs = await own_certs(kube, namespace, service_names(self.service, namespace) + ([self.host] if self.host else []))
        try:
            await publish_ca(kube, certs.ca, self.configuration)
        except ApiError as exc:
            if not exc.not_found:
                raise
            log.warning("webhook: no MutatingWebhookConfiguration %s (infra/k8s/binder-webhook.yaml): the API server "
                        "does not call this webhook, and an object created unsuspended is suspended at the binder's "
                        "next pass instead", self.configuration)
        return certs


class WebhookServer:
    """HTTPS for the API server: ``create_app`` on ``host:port`` with ``certs`` (PEM)."""

    def __init__(self, certs: Certs, port: int, host: str = "0.0.0.0", check: Check | None = None,
                 refused: Callable[[JobRejected], None] | None = None):
        self.certs, self.port, self.host = certs, port, host
        self.check, self.refused = check, refused
        self.server = None

    async def serve(self, stop: asyncio.Event) -> None:
        import uvicorn
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as uvicorn binds: past TIME_WAIT, not a listener)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise WebhookError(f"webhook: cannot serve HTTPS on {self.host}:{self.port}: {exc.strerror}") from None
        with sock, tempfile.TemporaryDirectory(prefix="gangway-webhook-") as d:
            cert, key = Path(d) / "tls.crt", Path(d) / "tls.key"
            cert.write_bytes(self.certs.cert + self.certs.ca)
            key.touch(mode=0o600)
            key.write_bytes(self.certs.key)
            config = uvicorn.Config(create_app(self.check, self.refused), ssl_certfile=str(cert), ssl_keyfile=str(key), log_level="warning",
                                    lifespan="off", access_log=False)
            self.server = uvicorn.Server(config)
            task = asyncio.create_task(self.server.serve(sockets=[sock]))
            stopping = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.server.should_exit = True
                stopping.cancel()
                await task

    async def start(self, stop: asyncio.Event) -> asyncio.Task:
        """``serve`` in a task, once it listens (raises why when it cannot)."""
        task = asyncio.create_task(self.serve(stop))
        while not (self.server is not None and self.server.started):
            if task.done():
                task.result()
                raise WebhookError(f"webhook: stopped before it served on port {self.port}")
            await asyncio.sleep(0.02)
        return task


def mounted_certs(directory: str | Path) -> Certs:
    """A certificate the platform mounted (cert-manager's Secret: tls.crt, tls.key, ca.crt when present)."""
    d = Path(directory)
    ca = d / "ca.crt"
    try:
        return Certs(ca.read_bytes() if ca.exists() else b"", b"", (d / "tls.crt").read_bytes(), (d / "tls.key").read_bytes())
    except OSError as exc:
        raise WebhookError(f"--webhook-cert-dir {directory}: cannot read {exc.filename}: {exc.strerror}") from None
