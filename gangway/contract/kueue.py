"""Load the contract from Kueue's own YAML objects.

Operators write the objects they already know — ResourceFlavor, ClusterQueue, Cohort, LocalQueue
and WorkloadPriorityClass, in ``kueue.x-k8s.io/v1beta1`` or ``v1beta2`` — plus one gangway
extension for what Kueue has no object for (eviction grace periods, the default priority)::

    apiVersion: gangway.io/v1alpha1
    kind: SchedulingPolicy
    metadata: {name: default}
    spec:
      defaultGracePeriodSeconds: 30
      defaultPriority: 0
      priorityClasses: [{name: production, gracePeriodSeconds: 30}]

Loading is all or nothing: every problem in the file is collected, each located down to its field
path, and raised together as one ConfigError. Fields Kueue does not have are errors (as
``kubectl apply`` makes them); Kueue fields gangway does not act on yet are accepted with a
warning, silently when they hold Kueue's neutral default. Kueue's own ``Configuration``
(``config.kueue.x-k8s.io``) gives its ``fairSharing``, each other field it sets named in a warning.
Objects of other Kubernetes kinds are ignored with a warning; a ``kind: List`` (``kubectl get -o
yaml``) is read item by item.

A ClusterQueue's ``namespaceSelector`` is enforced: a job whose namespace it does not select is
rejected (``namespace_not_selected``), as Kueue leaves such a workload inadmissible. Namespace
labels come from ``v1 Namespace`` objects in the same file (``kubectl get ns -o yaml``); every
namespace has ``kubernetes.io/metadata.name: <name>``, declared or not. A ClusterQueue without the
field admits every namespace (Kueue admits none: write ``namespaceSelector: {}`` to be explicit).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterator, Literal, get_args

import msgspec
import yaml

from gangway.contract.yamldocs import StrictLoader, documents
from gangway.events.contract import (
    ADDED_LATER,
    WEIGHT_ONE,
    WRITTEN_NOW,
    Backfill,
    Billing,
    BillingPeriod,
    BorrowWithinCohort,
    ClusterQueue,
    Cohort,
    Contract,
    FairSharing,
    FairSharingStrategy,
    FlavorFungibility,
    FlavorQuotas,
    NAMESPACE_NAME_LABEL,
    LabelRequirement,
    LabelSelector,
    IdleCostSharing,
    IdleRule,
    LocalQueue,
    Namespace,
    PodPriorityClass,
    PodsReady,
    Preemption,
    Price,
    PriorityClass,
    QueueingStrategy,
    Quota,
    ReclaimWithinCohort,
    ResourceFlavor,
    SelectorOperator,
    StopPolicy,
    Taint,
    Toleration,
    TolerationError,
    Topology,
    WithinClusterQueue,
    taint_of,
    toleration_of,
)
from gangway.events.quantity import QuantityError, parse_milli
from gangway.events.text import NotUtf8, utf8_text

_log = logging.getLogger(__name__)

KUEUE_GROUP = "kueue.x-k8s.io"
#: Kueue's own configuration file (its manager's ``Configuration``), read for its fair sharing.
KUEUE_CONFIG_GROUP = f"config.{KUEUE_GROUP}"
GANGWAY_API = "gangway.io/v1alpha1"
#: The Kueue versions that serve each kind gangway reads.
KUEUE_VERSIONS = {
    "ResourceFlavor": ("v1beta1", "v1beta2"),
    "ClusterQueue": ("v1beta1", "v1beta2"),
    "Cohort": ("v1alpha1", "v1beta1", "v1beta2"),
    "LocalQueue": ("v1beta1", "v1beta2"),
    "WorkloadPriorityClass": ("v1beta1", "v1beta2"),
    "Topology": ("v1alpha1", "v1beta1", "v1beta2"),
}
_ANY_KUEUE_VERSION = {"v1alpha1", "v1beta1", "v1beta2"}
_LEGACY_K8S_GROUPS = {"", "apps", "batch", "policy", "autoscaling", "extensions"}
_K8S_VERSION = re.compile(r"v[0-9]+((alpha|beta)[0-9]+)?")

_STRATEGIES: tuple[str, ...] = get_args(QueueingStrategy)
_STOP_POLICIES: tuple[str, ...] = get_args(StopPolicy)
_SELECTOR_OPERATORS: tuple[str, ...] = get_args(SelectorOperator)
_WITHIN: tuple[str, ...] = get_args(WithinClusterQueue)
_RECLAIM: tuple[str, ...] = get_args(ReclaimWithinCohort)
_FAIR_STRATEGIES: tuple[str, ...] = get_args(FairSharingStrategy)
_BILLING_PERIODS: tuple[str, ...] = get_args(BillingPeriod)
_IDLE_COST: tuple[str, ...] = get_args(IdleCostSharing)
#: Kueue's flavor fungibility values in both API versions (v1beta1 Borrow/Preempt = v1beta2 MayStopSearch).
_WHEN_CAN_BORROW = {"Borrow": "MayStopSearch", "MayStopSearch": "MayStopSearch", "TryNextFlavor": "TryNextFlavor"}
_WHEN_CAN_PREEMPT = {"Preempt": "MayStopSearch", "MayStopSearch": "MayStopSearch", "TryNextFlavor": "TryNextFlavor"}
_INT32 = (-(2**31), 2**31 - 1)
_GRACE_SECONDS = (0, 2**31 - 1)
_MISSING = "required field is missing"
_NO_CONTRACT = ("no contract objects: a contract holds Kueue's ResourceFlavor, ClusterQueue, Cohort, LocalQueue, "
                f"WorkloadPriorityClass or Topology, or gangway's SchedulingPolicy ({GANGWAY_API})")


# --- problems ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with (or ignored in) a config file, located down to the field."""

    file: str
    #: 1-based position of the YAML document in the file; None when it concerns the whole file.
    document_index: int | None
    kind: str
    name: str
    #: Path inside the document, as Kubernetes writes it: ``spec.resourceGroups[0].flavors[1].name``.
    field: str
    why: str
    #: Only known for YAML syntax errors.
    line: int | None = None
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        parts = [
            self.file,
            "warning" if self.severity == "warning" else "",
            f"line {self.line}" if self.line is not None else "",
            self._subject(),
            self.field,
            self.why,
        ]
        return ": ".join(part for part in parts if part)

    def _subject(self) -> str:
        if self.name:
            return f"{self.kind} {self.name}".strip()
        if self.document_index is None:
            return ""
        return f"document {self.document_index}" + (f" ({self.kind})" if self.kind else "")


class ConfigError(Exception):
    """A config that cannot be used, with every problem found in it (and its warnings, apart)."""

    def __init__(self, problems: list[Problem], warnings: list[Problem] | None = None):
        self.problems = list(problems)
        self.warnings = list(warnings or [])
        lines = "\n".join(str(problem) for problem in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the config:\n{lines}")


class _Report:
    """The problems of one file."""

    def __init__(self, file: str):
        self.file = file
        self.problems: list[Problem] = []

    def of(self, severity: str) -> list[Problem]:
        """The problems of one severity, by document (stable: in the order found within one)."""
        found = [p for p in self.problems if p.severity == severity]
        return sorted(found, key=lambda p: p.document_index or 0)


@dataclass
class _At:
    """Where one Kubernetes object sits in the file; reports problems against its fields."""

    report: _Report
    document_index: int
    prefix: str = ""  # "items[3]" for an item of a kind: List
    kind: str = ""
    name: str = ""
    api_version: str = ""

    def error(self, path: str, why: str) -> None:
        self._add(path, why, "error")

    def warn(self, path: str, why: str) -> None:
        self._add(path, why, "warning")

    def where(self) -> str:
        """Where this object is, for "already defined in ..." messages."""
        return f"document {self.document_index}" + (f" {self.prefix}" if self.prefix else "")

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def _add(self, path: str, why: str, severity: Literal["error", "warning"]) -> None:
        full_path = ".".join(part for part in (self.prefix, path) if part)
        file, index = self.report.file, self.document_index
        self.report.problems.append(Problem(file, index, self.kind, self.name, full_path, why, severity=severity))


# --- public API --------------------------------------------------------------------------------


def read_contract(text: str, filename: str = "<config>") -> tuple[Contract, list[Problem]]:
    """Parse a multi-document Kueue YAML into a Contract, with the warnings about what was ignored.

    Raises ConfigError listing every problem when the config is not valid.
    """
    report = _Report(filename)
    parsed = _Parsed()
    for at, obj in _objects(report, _documents(report, text)):
        _read_object(at, obj, parsed)
    if not parsed.objects and not report.of("error"):
        report.problems.append(Problem(filename, None, "", "", "", _NO_CONTRACT))
    _check_references(parsed)
    _check_prices(parsed)
    _check_fair_sharing_once(parsed)
    errors = report.of("error")
    if errors:
        raise ConfigError(errors, report.of("warning"))
    contract = _assemble(parsed)
    _check_selected(parsed, contract)
    return contract, report.of("warning")


def load_contract(text: str, filename: str = "<config>") -> Contract:
    """Parse a multi-document Kueue YAML into a Contract; warnings go to the log."""
    return _logged(*read_contract(text, filename))


def _logged(contract: Contract, warnings: list[Problem]) -> Contract:
    for warning in warnings:
        _log.warning("%s", warning)
    return contract


def read_contract_file(path: str | Path) -> tuple[Contract, list[Problem]]:
    """Read and parse one contract file, as every command reading one does (see read_contract): a
    file that is not UTF-8 is a ConfigError whose one problem says where (``text.NotUtf8``'s words,
    as ``gangway submit`` says them). Raises OSError for a file that cannot be read. ``-`` is the
    standard input (named ``<stdin>``), as ``gangway submit -`` reads it."""
    name = "<stdin>" if str(path) == "-" else str(path)
    try:
        text = utf8_text(sys.stdin.buffer.read() if name == "<stdin>" else Path(path).read_bytes())
    except NotUtf8 as exc:
        raise ConfigError([Problem(name, None, "", "", "", str(exc))]) from None
    return read_contract(text, name)


def load_contract_file(path: str | Path) -> Contract:
    """Read and parse one contract file (see read_contract_file); warnings go to the log."""
    return _logged(*read_contract_file(path))


def contract_digest(contract: Contract) -> str:
    """SHA-256 (hex) of the contract's canonical JSON: equal contracts, equal digests."""
    return hashlib.sha256(msgspec.json.encode(contract, order="deterministic")).hexdigest()


def digest_matches(contract: Contract, digest: str) -> bool:
    """Is ``digest`` the contract's as some gangway wrote it? A field added to the contract later
    (``ADDED_LATER``) decodes to its default in a contract recorded before it — and encodes it, so
    its digest today is not the one it was applied with. So the digest is also tried with the
    newest such fields left out, as long as they hold their defaults (one that does not was written
    by a gangway that had it): a log recorded before a field was added still verifies."""
    canonical = msgspec.json.encode(contract, order="deterministic")
    if hashlib.sha256(canonical).hexdigest() == digest:
        return True
    fields = msgspec.json.decode(canonical)  # (a dict in the encoding's order: re-encoded, the same bytes)
    defaults = {f.name: f.default for f in msgspec.structs.fields(Contract)}
    for name in reversed(ADDED_LATER):
        if getattr(contract, name) != defaults[name]:
            return False
        fields.pop(name, None)
        if hashlib.sha256(msgspec.json.encode(fields)).hexdigest() == digest:
            return True
    return False


def check_file(path: str | Path) -> tuple[list[str], list[str]]:
    """The error lines and the warning lines of one contract file (no errors: it is valid)."""
    try:
        _, warnings = read_contract_file(path)
    except OSError as exc:
        return [f"{path}: cannot read: {exc}"], []
    except ConfigError as exc:
        return [str(p) for p in exc.problems], [str(p) for p in exc.warnings]
    return [], [str(w) for w in warnings]


def validate_file(path: str | Path) -> list[str]:
    """What ``gangway config validate FILE`` prints: one line per problem, empty when valid."""
    return check_file(path)[0]


# --- documents and objects ---------------------------------------------------------------------


def _documents(report: _Report, text: str) -> list[tuple[int, Any]]:
    """The file's YAML documents with their 1-based index; none at all on a syntax error."""
    try:
        found = list(enumerate(documents(text, StrictLoader), start=1))
    except yaml.YAMLError as exc:
        report.problems.append(_syntax_problem(report.file, exc))
        return []
    return [(index, doc) for index, doc in found if doc is not None]


def _syntax_problem(file: str, exc: yaml.YAMLError) -> Problem:
    mark = getattr(exc, "problem_mark", None)
    what = getattr(exc, "problem", None) or str(exc)
    line = mark.line + 1 if mark is not None else None
    column = f" (column {mark.column + 1})" if mark is not None else ""
    return Problem(file, None, "", "", "", f"invalid YAML: {what}{column}", line=line)


def _objects(report: _Report, documents: list[tuple[int, Any]]) -> Iterator[tuple[_At, dict]]:
    """Each Kubernetes object with where it is; the items of a ``kind: List`` one by one."""
    for index, doc in documents:
        at = _At(report, index)
        if not isinstance(doc, dict):
            at.error("", f"must be a Kubernetes object (a mapping), not {_type_name(doc)}")
        elif doc.get("apiVersion") == "v1" and doc.get("kind") == "List":
            for i, item in enumerate(_list(at, "items", doc.get("items")) or []):
                item_at = _At(report, index, prefix=f"items[{i}]")
                if isinstance(item, dict):
                    yield item_at, item
                else:
                    item_at.error("", f"must be a Kubernetes object (a mapping), not {_type_name(item)}")
        else:
            yield at, doc


def _read_object(at: _At, obj: dict, parsed: _Parsed) -> None:
    api_version = _string(at, "apiVersion", obj.get("apiVersion"))
    kind = _string(at, "kind", obj.get("kind"))
    if api_version is None or kind is None:
        return
    at.api_version, at.kind = api_version, kind
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        at.name = metadata["name"]
    reader = _reader(at, api_version, kind)
    if reader is not None:
        # (Namespaces only give their labels to the queues' namespaceSelectors, Kueue's Configuration its
        # fair sharing: a file of them is no contract)
        parsed.objects += reader not in (_read_namespace, _read_kueue_configuration)
        reader(at, obj, parsed)


#: Kueue's kinds that are not part of gangway's contract (ignored, with a warning).
KUEUE_OTHER_KINDS = ("AdmissionCheck", "DynamicResourceAllocationConfig", "MultiKueueCluster", "MultiKueueConfig",
                     "ProvisioningRequestConfig", "Workload")


def _reader(at: _At, api_version: str, kind: str) -> Callable[[_At, dict, _Parsed], None] | None:
    """The function reading this kind of object, or None (ignored with a warning, or an error)."""
    group, _, version = api_version.rpartition("/")
    if group == KUEUE_GROUP and version in _ANY_KUEUE_VERSION:
        if kind not in _READERS and kind in KUEUE_OTHER_KINDS:
            at.warn("", f"{kind} is not part of the contract; ignored")
        elif kind not in _READERS:  # (kubectl apply fails on it: no such kind in the API group)
            close = difflib.get_close_matches(str(kind), [*_READERS, *KUEUE_OTHER_KINDS], n=1, cutoff=0.6)
            at.error("kind", f"{_show(kind)} is no kind of {KUEUE_GROUP}" + (f"; did you mean {close[0]}?" if close else
                     f" (it defines {', '.join(sorted([*_READERS, *KUEUE_OTHER_KINDS]))})"))
        elif version not in KUEUE_VERSIONS[kind]:
            at.error("apiVersion", f"{api_version} does not serve {kind}; use {_versions(kind)}")
        else:
            return _READERS[kind]
    elif api_version == GANGWAY_API:
        if kind == "SchedulingPolicy":
            return _read_policy
        at.error("kind", f"{_show(kind)} is not a kind of {GANGWAY_API}; it defines SchedulingPolicy")
    elif api_version == "v1" and kind == "Namespace":
        return _read_namespace
    elif api_version == "scheduling.k8s.io/v1" and kind == "PriorityClass":
        return _read_pod_priority_class
    elif group == KUEUE_CONFIG_GROUP and kind == "Configuration" and version in _ANY_KUEUE_VERSION:
        return _read_kueue_configuration
    elif group in _LEGACY_K8S_GROUPS or group.endswith((".k8s.io", f".{KUEUE_GROUP}")):  # (e.g. Kueue's visibility API)
        if _K8S_VERSION.fullmatch(version):
            at.warn("", f"{kind} is not part of the contract; ignored")
            return None
        at.error("apiVersion", f"unknown apiVersion {_show(api_version)}")
    else:
        at.error("apiVersion", f"unknown apiVersion {_show(api_version)}; expected {KUEUE_GROUP}/v1beta1, "
                 f"{KUEUE_GROUP}/v1beta2 or {GANGWAY_API}")
    return None


def _versions(kind: str) -> str:
    return " or ".join(f"{KUEUE_GROUP}/{v}" for v in KUEUE_VERSIONS[kind])


# --- what was read, before cross-checks --------------------------------------------------------

#: A reference from one object to another: (field path, kind referred to, name referred to).
_Ref = tuple[str, str, str]


@dataclass
class _Entry:
    at: _At
    value: Any
    refs: list[_Ref] = field(default_factory=list)


@dataclass
class _Policy:
    """What a SchedulingPolicy says (None: not said, Contract's default applies)."""

    default_grace_ms: int | None = None
    default_priority: int | None = None
    grace_ms: dict[str, int | None] = field(default_factory=dict)
    min_runtime_ms: dict[str, int | None] = field(default_factory=dict)
    fair_sharing: FairSharing | None = None
    flavor_weights: dict[str, dict[str, int]] = field(default_factory=dict)
    checkpoint_aware: bool | None = None
    prices: list[Price] = field(default_factory=list)
    #: Where each price is written (its perHour item's path), for the warnings about it.
    price_paths: dict[tuple[str, str], str] = field(default_factory=dict)
    currency: str | None = None
    billing: Billing | None = None
    idle_rule: IdleRule | None = None
    backfill: Backfill | None = None
    aging_ms_per_point: int | None = None


@dataclass
class _Parsed:
    flavors: dict[str, _Entry] = field(default_factory=dict)
    cluster_queues: dict[str, _Entry] = field(default_factory=dict)
    cohorts: dict[str, _Entry] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    priority_classes: dict[str, _Entry] = field(default_factory=dict)
    pod_priority_classes: dict[str, _Entry] = field(default_factory=dict)
    policies: dict[str, _Entry] = field(default_factory=dict)
    namespaces: dict[str, _Entry] = field(default_factory=dict)
    topologies: dict[str, _Entry] = field(default_factory=dict)
    #: Contract objects read (valid or not): a file with none is not a contract.
    objects: int = 0
    #: Kueue's Configuration (``config.kueue.x-k8s.io``): where it is, and its fairSharing if it sets one.
    configuration: _At | None = None
    configuration_fair_sharing: FairSharing | None = None
    #: Its waitForPodsReady, when enabled.
    pods_ready: PodsReady | None = None

    def entries(self) -> Iterator[_Entry]:
        for table in (self.flavors, self.cluster_queues, self.cohorts, self.local_queues,
                      self.priority_classes, self.pod_priority_classes, self.policies, self.topologies):
            yield from table.values()

    def defined(self, kind: str) -> dict:
        return {"ResourceFlavor": self.flavors, "ClusterQueue": self.cluster_queues,
                "WorkloadPriorityClass": self.priority_classes, "Cohort": self.cohorts,
                "Topology": self.topologies}[kind]


def _register(at: _At, table: dict, key: Any, value: Any, refs: list[_Ref] | None = None) -> None:
    if not at.name:
        return
    if key in table:
        at.error("metadata.name", f"{at.kind} {_show(at.name)} is already defined in {table[key].at.where()}")
        return
    table[key] = _Entry(at, value, refs or [])


def _check_references(parsed: _Parsed) -> None:
    for entry in parsed.entries():
        for path, kind, name in entry.refs:
            if name not in parsed.defined(kind):
                pod_class = kind == "WorkloadPriorityClass" and name in parsed.pod_priority_classes
                entry.at.error(path, f"{kind} {_show(name)} is not defined" + (
                    f"; {_show(name)} is a Kubernetes PriorityClass, and per-class settings apply to "
                    f"WorkloadPriorityClasses (a job names one with the label kueue.x-k8s.io/priority-class)"
                    if pod_class else ""))
    _check_cohort_tree(parsed)


def _check_selected(parsed: _Parsed, contract: Contract) -> None:
    """A LocalQueue in a namespace its ClusterQueue's namespaceSelector does not select takes no
    job (each is refused, ``namespace_not_selected``): valid, but said."""
    queues = {cq.name: cq for cq in contract.cluster_queues}
    for (namespace, name), entry in sorted(parsed.local_queues.items()):
        cq = queues.get(entry.value.cluster_queue) if entry.value is not None else None
        if cq is not None and not contract.selects_namespace(cq, namespace):
            entry.at.warn("spec.clusterQueue", f"ClusterQueue {_show(cq.name)}'s namespaceSelector does not select "
                                               f"namespace {_show(namespace)}: every job sent to this LocalQueue is "
                                               "refused (namespace_not_selected; a namespace's labels are "
                                               "those of its v1 Namespace object in the contract)")


def _check_cohort_tree(parsed: _Parsed) -> None:
    """Parents form a tree: no cohort is its own ancestor (a self-parent is reported where it is read)."""
    parents = {name: e.value.parent for name, e in parsed.cohorts.items() if e.value is not None}
    for name, entry in sorted(parsed.cohorts.items()):
        seen, at = [name], parents.get(name)
        while at and at not in seen and at != name:
            seen.append(at)
            at = parents.get(at)
        if at == name and parents.get(name) != name:
            field_name = "parentName" if entry.at.version == "v1beta2" else "parent"
            entry.at.error(f"spec.{field_name}", f"cohorts form a cycle: {' -> '.join([*seen, name])}")


def _assemble(parsed: _Parsed) -> Contract:
    """The canonical Contract: objects sorted by name, so document order does not matter."""
    policy = next(iter(parsed.policies.values())).value if parsed.policies else _Policy()
    pod_classes = _values(parsed.pod_priority_classes)
    # Kubernetes' rule: the smallest value among the globalDefault classes (a SchedulingPolicy's
    # defaultPriority, gangway's own, wins when both are written).
    global_default = min((pc.value for pc in pod_classes if pc.global_default), default=None)
    defaults_said = [entry for entry in parsed.pod_priority_classes.values() if entry.value.global_default]
    for entry in defaults_said[1:]:
        entry.at.warn("globalDefault", f"a second globalDefault PriorityClass (Kubernetes refuses it; the first is "
                                       f"{defaults_said[0].at.name!r}): gangway takes the smallest value of them, "
                                       f"{global_default}, as Kubernetes does of those it has")
    defaults = {"default_grace_ms": policy.default_grace_ms,
                "default_priority": policy.default_priority if policy.default_priority is not None else global_default,
                # (None: left at its default)
                "default_priority_from_cluster": (policy.default_priority is None and global_default is None) or None,
                "fair_sharing": policy.fair_sharing or parsed.configuration_fair_sharing,
                "checkpoint_aware": policy.checkpoint_aware,
                "currency": policy.currency, "billing": policy.billing, "idle_rule": policy.idle_rule,
                "backfill": policy.backfill, "pods_ready": parsed.pods_ready,
                "aging_ms_per_point": policy.aging_ms_per_point}
    classes = [
        msgspec.structs.replace(entry.value, grace_ms=policy.grace_ms.get(name),
                                min_runtime_ms=policy.min_runtime_ms.get(name))
        for name, entry in sorted(parsed.priority_classes.items())
    ]
    flavors = [
        msgspec.structs.replace(f, resource_weights=policy.flavor_weights.get(f.name, {}))
        for f in _values(parsed.flavors)
    ]
    return Contract(
        flavors=flavors,
        cluster_queues=_values(parsed.cluster_queues),
        local_queues=_values(parsed.local_queues),
        priority_classes=classes,
        pod_priority_classes=pod_classes,
        cohorts=[c for c in _values(parsed.cohorts) if c is not None],
        topologies=_values(parsed.topologies),
        prices=sorted(policy.prices, key=lambda p: (p.flavor, p.resource)),
        namespaces=_values(parsed.namespaces),
        **WRITTEN_NOW,  # (contracts written before each of these fields said False)
        **{key: value for key, value in defaults.items() if value is not None},
    )


def _values(table: dict) -> list:
    return [entry.value for _, entry in sorted(table.items())]


# --- the kinds ---------------------------------------------------------------------------------

_TOP_FIELDS = {"apiVersion", "kind", "metadata", "spec", "status"}
_RENAMED = {"cohort": "cohortName", "cohortName": "cohort", "parent": "parentName", "parentName": "parent"}

#: Kueue fields gangway does not act on yet, with the values that mean "Kueue's default" (silent).
_CLUSTER_QUEUE_IGNORED: dict[str, tuple] = {
    "admissionChecks": ([],),
    "admissionChecksStrategy": ({},),
    "admissionScope": (),
    "concurrentAdmissionPolicy": (),
}
_FLAVOR_IGNORED: dict[str, tuple] = {
    "resourceWeights": ({},),
}
_LOCAL_QUEUE_IGNORED: dict[str, tuple] = {"fairSharing": ()}


def _read_flavor(at: _At, obj: dict, parsed: _Parsed) -> None:
    spec = _spec(at, obj)
    if spec is None:
        return
    _check_fields(at, "spec", spec, {"nodeLabels", "topologyName", "tolerations", "nodeTaints"}, _FLAVOR_IGNORED)
    labels = _labels(at, "spec.nodeLabels", spec.get("nodeLabels"))
    topology = _name(at, "spec.topologyName", spec.get("topologyName"), required=False)
    if topology and not labels:
        at.warn("spec.topologyName", "Kueue refuses a flavor naming a Topology without spec.nodeLabels (\"at least "
                                     "one nodeLabel is required when topology is set\"); gangway places its jobs "
                                     "on any node of the cluster")
    refs = [("spec.topologyName", "Topology", topology)] if topology else []
    _register(at, parsed.flavors, at.name, ResourceFlavor(name=at.name, node_labels=labels, topology_name=topology,
                                                          tolerations=_tolerations(at, spec.get("tolerations")),
                                                          node_taints=_node_taints(at, spec.get("nodeTaints"))),
              refs)


def _node_taints(at: _At, value: Any) -> list[Taint]:
    """A flavor's nodeTaints (Kubernetes' taint fields: key, value, effect)."""
    return _each(at, "spec.nodeTaints", value, taint_of)


def _tolerations(at: _At, value: Any) -> list[Toleration]:
    """A flavor's tolerations (Kubernetes' fields, as a pod's)."""
    return _each(at, "spec.tolerations", value, toleration_of)


def _each(at: _At, where: str, value: Any, read: Callable[[Any], Any]) -> list:
    """Each item of a list field read by ``read``; an item it refuses is an error naming its field."""
    out = []
    for i, item in enumerate(_list(at, where, value) or []):
        try:
            out.append(read(item))
        except TolerationError as exc:
            at.error(f"{where}[{i}]" + (f".{exc.field}" if exc.field else ""), exc.why)
    return out


#: Kueue's rule for a topology level's node label (a qualified label key).
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])")
_LEVELS_MAX = 16
_HOSTNAME = "kubernetes.io/hostname"


def _read_topology(at: _At, obj: dict, parsed: _Parsed) -> None:
    """Kueue's Topology: ``spec.levels[].nodeLabel``, coarsest first, 1 to 16 distinct label keys,
    ``kubernetes.io/hostname`` only as the lowest level (Kueue's own validation rules)."""
    spec = _spec(at, obj)
    if spec is None:
        return
    _check_fields(at, "spec", spec, {"levels"})
    levels: list[str] = []
    items = list(_mappings(at, "spec.levels", spec.get("levels")))
    if spec.get("levels") is None:
        at.error("spec.levels", _MISSING)
    elif not 1 <= len(spec["levels"]) <= _LEVELS_MAX:
        at.error("spec.levels", f"{len(spec['levels'])} levels: a Topology has 1 to {_LEVELS_MAX}")
    for path, item in items:
        _check_fields(at, path, item, {"nodeLabel"})
        label = item.get("nodeLabel")
        if not isinstance(label, str) or len(label) > 316 or not _LABEL_KEY.fullmatch(label):
            at.error(f"{path}.nodeLabel", _MISSING if label in (None, "") else f"{_show(label)} is not a node label key")
        elif label in levels:
            at.error(f"{path}.nodeLabel", f"{label} is already a level: levels must be unique")
        else:
            levels.append(label)
    if _HOSTNAME in levels[:-1]:
        at.error("spec.levels", f"{_HOSTNAME} can only be the lowest level")
    _register(at, parsed.topologies, at.name, Topology(name=at.name, levels=levels))


def _read_cluster_queue(at: _At, obj: dict, parsed: _Parsed) -> None:
    spec = _spec(at, obj)
    if spec is None:
        return
    cohort_field = "cohort" if at.version == "v1beta1" else "cohortName"
    read = {"resourceGroups", "queueingStrategy", "preemption", "flavorFungibility", "fairSharing", "namespaceSelector",
            "stopPolicy", cohort_field}
    if at.version == "v1beta2" and "admissionChecks" in spec:  # (removed there: Kueue's v1beta2 refuses it)
        at.error("spec.admissionChecks", f"unknown field in {at.api_version}, which lists its checks in "
                 "admissionChecksStrategy")
        read = read | {"admissionChecks"}
    _check_fields(at, "spec", spec, read, _CLUSTER_QUEUE_IGNORED)
    cohort = _name(at, f"spec.{cohort_field}", spec.get(cohort_field), required=False)
    no_sharing = None if cohort else f"spec.{cohort_field}"
    flavors, refs = _resource_groups(at, "spec.resourceGroups", spec.get("resourceGroups"), no_sharing)
    strategy = _choice(at, "spec.queueingStrategy", spec.get("queueingStrategy"), _STRATEGIES, "BestEffortFIFO")
    preemption = _preemption(at, "spec.preemption", spec.get("preemption"))
    queue = ClusterQueue(at.name, flavors, cohort=cohort, preemption=preemption, queueing_strategy=strategy,
                         flavor_fungibility=_fungibility(at, "spec.flavorFungibility", spec.get("flavorFungibility")),
                         fair_weight=_fair_weight(at, "spec.fairSharing", spec.get("fairSharing")),
                         namespace_selector=_selector(at, "spec.namespaceSelector", spec.get("namespaceSelector")),
                         stop_policy=_choice(at, "spec.stopPolicy", spec.get("stopPolicy"), _STOP_POLICIES, "None"))
    if "namespaceSelector" not in spec:
        at.warn("spec.namespaceSelector", "absent: gangway admits jobs of every namespace here, where Kueue admits "
                "none; write `namespaceSelector: {}` to say every namespace, or a selector")
    _register(at, parsed.cluster_queues, at.name, queue, refs)


def _selector(at: _At, path: str, value: Any) -> LabelSelector | None:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions); None when the field is absent."""
    if value is None:
        return None
    selector = _dict(at, path, value)
    if selector is None:
        return None
    _check_fields(at, path, selector, {"matchLabels", "matchExpressions"})
    labels = _labels(at, f"{path}.matchLabels", selector.get("matchLabels"))
    requirements = []
    for i, expr in enumerate(_list(at, f"{path}.matchExpressions", selector.get("matchExpressions")) or []):
        where = f"{path}.matchExpressions[{i}]"
        expr = _dict(at, where, expr)
        if expr is None:
            continue
        _check_fields(at, where, expr, {"key", "operator", "values"})
        key = _string(at, f"{where}.key", expr.get("key"))
        operator = _choice(at, f"{where}.operator", expr.get("operator"), _SELECTOR_OPERATORS, None)
        if expr.get("operator") is None:
            at.error(f"{where}.operator", _MISSING)
        values = _list(at, f"{where}.values", expr.get("values")) or []
        if any(not isinstance(v, str) for v in values):
            at.error(f"{where}.values", "every value must be a string")
        if operator in ("In", "NotIn") and not values:
            at.error(f"{where}.values", f"operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            at.error(f"{where}.values", f"operator {operator} takes no values")
        if key is not None and operator is not None:
            requirements.append(LabelRequirement(key=key, operator=operator, values=sorted(map(str, values))))
    return LabelSelector(match_labels=labels, match_expressions=requirements)


def _read_namespace(at: _At, obj: dict, parsed: _Parsed) -> None:
    """A v1 Namespace: its labels are what ClusterQueues' namespaceSelectors match."""
    _check_name(at, obj)
    metadata = _dict(at, "metadata", obj.get("metadata")) or {}
    labels = _labels(at, "metadata.labels", metadata.get("labels"))
    if at.name:
        labels[NAMESPACE_NAME_LABEL] = at.name
    _register(at, parsed.namespaces, at.name, Namespace(name=at.name, labels=labels))


def _read_cohort(at: _At, obj: dict, parsed: _Parsed) -> None:
    """A node of the cohort tree: its parent (hierarchical cohorts), its own quota, its weight."""
    spec = _spec(at, obj)
    if spec is None:
        return
    parent_field = "parentName" if at.version == "v1beta2" else "parent"
    _check_fields(at, "spec", spec, {parent_field, "resourceGroups", "fairSharing"})
    parent = _name(at, f"spec.{parent_field}", spec.get(parent_field), required=False)
    no_sharing = None if parent else f"spec.{parent_field}"
    flavors, refs = _resource_groups(at, "spec.resourceGroups", spec.get("resourceGroups"), no_sharing)
    weight = _fair_weight(at, "spec.fairSharing", spec.get("fairSharing"))
    if parent == at.name:
        at.error(f"spec.{parent_field}", "a cohort cannot be its own parent")
    cohort = Cohort(name=at.name, parent=parent, flavors=flavors, fair_weight=weight)
    _register(at, parsed.cohorts, at.name, cohort, refs)


def _read_local_queue(at: _At, obj: dict, parsed: _Parsed) -> None:
    spec = _spec(at, obj)
    if spec is None:
        return
    namespace = _namespace(at, obj.get("metadata"))
    name = at.name
    at.name = f"{namespace}/{name}" if name else ""
    _check_fields(at, "spec", spec, {"clusterQueue", "stopPolicy"}, _LOCAL_QUEUE_IGNORED)
    cluster_queue = _name(at, "spec.clusterQueue", spec.get("clusterQueue"))
    refs = [("spec.clusterQueue", "ClusterQueue", cluster_queue)] if cluster_queue else []
    queue = LocalQueue(namespace=namespace, name=name, cluster_queue=cluster_queue or "",
                       stop_policy=_choice(at, "spec.stopPolicy", spec.get("stopPolicy"), _STOP_POLICIES, "None"))
    _register(at, parsed.local_queues, (namespace, name), queue, refs)


def _read_priority_class(at: _At, obj: dict, parsed: _Parsed) -> None:
    _check_fields(at, "", obj, {"apiVersion", "kind", "metadata", "value", "description"})
    _check_name(at, obj)
    value = _int(at, "value", obj.get("value"), _INT32, required=True)
    if obj.get("description") is not None:
        _string(at, "description", obj.get("description"))
    _register(at, parsed.priority_classes, at.name, PriorityClass(name=at.name, value=value or 0))


def _read_pod_priority_class(at: _At, obj: dict, parsed: _Parsed) -> None:
    """A Kubernetes PriorityClass: its value, and whether it is the default (``globalDefault``)."""
    _check_fields(at, "", obj, {"apiVersion", "kind", "metadata", "value", "globalDefault", "description"},
                  {"preemptionPolicy": ("PreemptLowerPriority",)})
    _check_name(at, obj)
    value = _int(at, "value", obj.get("value"), _INT32, required=True)
    default = obj.get("globalDefault", False)
    if not isinstance(default, bool):
        at.error("globalDefault", f"must be true or false, not {_type_name(default)}")
        default = False
    if obj.get("description") is not None:
        _string(at, "description", obj.get("description"))
    _register(at, parsed.pod_priority_classes, at.name, PodPriorityClass(name=at.name, value=value or 0,
                                                                         global_default=default))


def _read_policy(at: _At, obj: dict, parsed: _Parsed) -> None:
    spec = _spec(at, obj)
    if spec is None:
        return
    _check_fields(at, "spec", spec, {"defaultGracePeriodSeconds", "defaultPriority", "priorityClasses",
                                     "fairSharing", "checkpointAware", "prices", "billing", "idleRule", "backfill",
                                     "priorityAging"})
    grace_s = _int(at, "spec.defaultGracePeriodSeconds", spec.get("defaultGracePeriodSeconds"), _GRACE_SECONDS)
    priority = _int(at, "spec.defaultPriority", spec.get("defaultPriority"), _INT32)
    policy = _Policy(None if grace_s is None else grace_s * 1000, priority)
    refs = _policy_classes(at, "spec.priorityClasses", spec.get("priorityClasses"), policy)
    refs += _policy_fair_sharing(at, "spec.fairSharing", spec.get("fairSharing"), policy)
    checkpoint = spec.get("checkpointAware")
    if checkpoint is not None and not isinstance(checkpoint, bool):
        at.error("spec.checkpointAware", f"must be true or false, not {_type_name(checkpoint)}")
    policy.checkpoint_aware = checkpoint if isinstance(checkpoint, bool) else None
    refs += _policy_prices(at, "spec.prices", spec.get("prices"), policy)
    policy.billing = _policy_billing(at, "spec.billing", spec.get("billing"))
    policy.idle_rule = _policy_idle_rule(at, "spec.idleRule", spec.get("idleRule"))
    policy.backfill = _policy_backfill(at, "spec.backfill", spec.get("backfill"))
    policy.aging_ms_per_point = _policy_aging(at, "spec.priorityAging", spec.get("priorityAging"))
    if parsed.policies:
        first = next(iter(parsed.policies.values())).at
        at.error("", f"only one SchedulingPolicy is allowed; {first.name} is in {first.where()}")
        return
    _register(at, parsed.policies, at.name, policy, refs)


#: What else a Kueue Configuration may say, and where gangway has it instead (None: nowhere).
_CONFIGURATION_ELSEWHERE = {
    "manageJobsWithoutQueueName": None, "managedJobsNamespaceSelector": None, "integrations": None,
    "resources": None, "admissionFairSharing": None, "multiKueue": None, "objectRetentionPolicies": None,
    "featureGates": None, "queueVisibility": None, "namespace": None, "internalCertManagement": None,
    "clientConnection": None, "controller": None, "health": None, "metrics": None, "webhook": None,
    "leaderElection": None, "pprofBindAddress": None,
}


def _check_fair_sharing_once(parsed: _Parsed) -> None:
    """Fair sharing is said once: in Kueue's Configuration or in the SchedulingPolicy."""
    policy = next(iter(parsed.policies.values()), None)
    if parsed.configuration_fair_sharing is not None and policy is not None and policy.value.fair_sharing is not None:
        parsed.configuration.error("fairSharing", f"the SchedulingPolicy in {policy.at.where()} sets fairSharing too; "
                                                  "say it in one of them")


def _neutral(value: Any) -> bool:
    """Does a Configuration field say nothing (absent, false, empty, or ``enable: false``)?"""
    return value in (None, False, {}, [], "") or (isinstance(value, dict) and value.get("enable") is False)


def _read_kueue_configuration(at: _At, obj: dict, parsed: _Parsed) -> None:
    """Kueue's ``Configuration``: its ``fairSharing`` (``enable``, ``preemptionStrategies``) is the
    contract's, as if a SchedulingPolicy said it; every other field set is named in a warning."""
    if parsed.configuration is not None:
        at.error("", f"only one Kueue Configuration is allowed; another is in {parsed.configuration.where()}")
        return
    parsed.configuration = at
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "fairSharing", "waitForPodsReady") or _neutral(value):
            continue
        if key not in _CONFIGURATION_ELSEWHERE:  # (a field of a later Kueue, or a typo: said, not refused)
            at.warn(str(key), "not a field of Kueue's Configuration that gangway knows; ignored"
                    + _meant(key, ["fairSharing", *_CONFIGURATION_ELSEWHERE]))
        elif (instead := _CONFIGURATION_ELSEWHERE[key]) is not None:
            at.warn(str(key), f"not read from the contract; gangway has it as {instead}")
        else:
            at.warn(str(key), "not supported by gangway; ignored")
    policy = _Policy()
    _policy_fair_sharing(at, "fairSharing", obj.get("fairSharing"), policy, _KUEUE_FAIR_SHARING)
    parsed.configuration_fair_sharing = policy.fair_sharing
    parsed.pods_ready = _pods_ready(at, "waitForPodsReady", obj.get("waitForPodsReady"))


#: A waitForPodsReady timeout (or recoveryTimeout) is 1 ms to a week; a backoff, 1 s or more.
_PODS_READY_MS = (1, 7 * 24 * 3_600_000)
_BACKOFF_SECONDS = (1, 2**31 - 1)


def _pods_ready(at: _At, path: str, value: Any) -> PodsReady | None:
    """``waitForPodsReady: {enable, timeout, recoveryTimeout, requeuingStrategy: {backoffBaseSeconds,
    backoffMaxSeconds, backoffLimitCount, timestamp}, blockAdmission}`` (``PodsReady``, Kueue's
    defaults for what it leaves out); None when absent or not enabled."""
    spec = _dict(at, path, value)
    if not spec:
        return None
    _check_fields(at, path, spec, {"enable", "timeout", "recoveryTimeout", "requeuingStrategy", "blockAdmission"})
    enable = spec.get("enable")
    if enable is not None and not isinstance(enable, bool):
        at.error(f"{path}.enable", f"{_show(enable)} is not true or false")
    if spec.get("blockAdmission"):
        at.warn(f"{path}.blockAdmission", "not read: gangway admits while earlier gangs start (it binds each gang "
                                          "whole or not at all, so none holds part of a node at its rendezvous)")
    strategy = _dict(at, f"{path}.requeuingStrategy", spec.get("requeuingStrategy")) or {}
    where = f"{path}.requeuingStrategy"
    _check_fields(at, where, strategy, {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"})
    from_creation = _choice(at, f"{where}.timestamp", strategy.get("timestamp"), ("Eviction", "Creation"),
                            "Eviction") == "Creation"
    timeout = _duration_ms(at, f"{path}.timeout", spec.get("timeout"), _PODS_READY_MS)
    recovery = _duration_ms(at, f"{path}.recoveryTimeout", spec.get("recoveryTimeout"), _PODS_READY_MS)
    base = _int(at, f"{where}.backoffBaseSeconds", strategy.get("backoffBaseSeconds"), _BACKOFF_SECONDS)
    most = _int(at, f"{where}.backoffMaxSeconds", strategy.get("backoffMaxSeconds"), _BACKOFF_SECONDS)
    limit = _int(at, f"{where}.backoffLimitCount", strategy.get("backoffLimitCount"), (0, 2**31 - 1))
    if enable is not True:
        return None
    default = PodsReady()
    return PodsReady(timeout_ms=default.timeout_ms if timeout is None else timeout, recovery_timeout_ms=recovery,
                     backoff_base_ms=default.backoff_base_ms if base is None else base * 1000,
                     backoff_max_ms=default.backoff_max_ms if most is None else most * 1000,
                     # (Kueue deactivates once a workload has been requeued backoffLimitCount times: at the
                     # next failure; null: never)
                     backoff_limit=0 if limit is None else limit + 1, requeue_from_creation=from_creation)


#: Go's duration units (``time.ParseDuration``, which Kubernetes' metav1.Duration reads) in ms.
_GO_UNITS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def _duration_ms(at: _At, path: str, value: Any, bounds: tuple[int, int]) -> int | None:
    """A Go duration (``5m``, ``90s``, ``1h30m``) in whole milliseconds; None when absent or wrong (reported)."""
    if value is None:
        return None
    parts = _GO_PART.findall(value) if isinstance(value, str) else []
    if not parts or "".join(number + unit for number, unit in parts) != value:
        at.error(path, f"{_show(value)} is not a duration (Go's form: 5m, 90s, 1h30m)")
        return None
    ms = round(sum(float(number) * _GO_UNITS[unit] for number, unit in parts))
    low, high = bounds
    if not low <= ms <= high:
        at.error(path, f"{_show(value)} is out of range: {low} ms to {high // 3_600_000} h")
        return None
    return ms


def _policy_classes(at: _At, path: str, value: Any, policy: _Policy) -> list[_Ref]:
    """Grace periods and minimum runtimes (ms) by priority class name; the references to check."""
    refs: list[_Ref] = []
    for item_path, item in _mappings(at, path, value):
        _check_fields(at, item_path, item, {"name", "gracePeriodSeconds", "minRuntimeSeconds"})
        name = _name(at, f"{item_path}.name", item.get("name"))
        seconds = _int(at, f"{item_path}.gracePeriodSeconds", item.get("gracePeriodSeconds"), _GRACE_SECONDS)
        minimum = _int(at, f"{item_path}.minRuntimeSeconds", item.get("minRuntimeSeconds"), _GRACE_SECONDS)
        if item.get("gracePeriodSeconds") is None and item.get("minRuntimeSeconds") is None:
            at.error(item_path, "says nothing: give gracePeriodSeconds, minRuntimeSeconds or both")
        if name in policy.grace_ms:
            at.error(f"{item_path}.name", f"{_show(name)} is listed twice")
        elif name is not None:
            policy.grace_ms[name] = None if seconds is None else seconds * 1000
            policy.min_runtime_ms[name] = None if minimum is None else minimum * 1000
            refs.append((f"{item_path}.name", "WorkloadPriorityClass", name))
    return refs


#: Kueue's Configuration.fairSharing, and what gangway's SchedulingPolicy adds to it.
_KUEUE_FAIR_SHARING = {"enable", "preemptionStrategies"}
_FAIR_SHARING = {*_KUEUE_FAIR_SHARING, "usageHalfLifeSeconds", "flavorWeights"}


def _policy_fair_sharing(at: _At, path: str, value: Any, policy: _Policy,
                         fields: set[str] = _FAIR_SHARING) -> list[_Ref]:
    """Kueue's Configuration.fairSharing, plus (``fields`` allowing) a usage half-life and flavor values."""
    spec = _dict(at, path, value)
    if not spec:
        return []
    _check_fields(at, path, spec, fields)
    enable = spec.get("enable", False)
    if not isinstance(enable, bool):
        at.error(f"{path}.enable", f"must be true or false, not {_type_name(enable)}")
        enable = False
    strategies = []
    for i, item in enumerate(_list(at, f"{path}.preemptionStrategies", spec.get("preemptionStrategies")) or []):
        strategy = _choice(at, f"{path}.preemptionStrategies[{i}]", item, _FAIR_STRATEGIES, _FAIR_STRATEGIES[0])
        if strategy in strategies:
            at.error(f"{path}.preemptionStrategies[{i}]", f"{_show(strategy)} is listed twice (a set in Kueue's API)")
        strategies.append(strategy)
    half_life = _int(at, f"{path}.usageHalfLifeSeconds", spec.get("usageHalfLifeSeconds"), (1, 2**31 - 1))
    refs: list[_Ref] = []
    weights = _dict(at, f"{path}.flavorWeights", spec.get("flavorWeights")) or {}
    for flavor, per_resource in weights.items():
        flavor_path = f"{path}.flavorWeights.{flavor}"
        refs.append((flavor_path, "ResourceFlavor", flavor))
        for resource, weight in (_dict(at, flavor_path, per_resource) or {}).items():
            _resource_name(at, f"{flavor_path}.{resource}", resource)
            milli = _quantity(at, f"{flavor_path}.{resource}", weight)
            if milli is not None:
                policy.flavor_weights.setdefault(flavor, {})[resource] = milli
    policy.fair_sharing = FairSharing(
        enable=enable, usage_half_life_ms=None if half_life is None else half_life * 1000,
        **({"preemption_strategies": strategies} if strategies else {}),
    )
    return refs


def _policy_prices(at: _At, path: str, value: Any, policy: _Policy) -> list[_Ref]:
    """``prices: {currency: EUR, perHour: [{flavor, resource, price: "2.50"}]}`` (price per unit-hour)."""
    spec = _dict(at, path, value)
    if not spec:
        return []
    _check_fields(at, path, spec, {"currency", "perHour"})
    currency = spec.get("currency")
    if currency is not None:
        if isinstance(currency, str) and re.fullmatch(r"[A-Z]{3}", currency):
            policy.currency = currency
        else:
            at.error(f"{path}.currency", f"{_show(currency)} is not a three-letter currency code (ISO 4217)")
    refs: list[_Ref] = []
    for item_path, item in _mappings(at, f"{path}.perHour", spec.get("perHour")):
        _check_fields(at, item_path, item, {"flavor", "resource", "price"})
        flavor = _name(at, f"{item_path}.flavor", item.get("flavor"))
        resource = _resource_name(at, f"{item_path}.resource", item.get("resource"), required=True)
        price = _money(at, f"{item_path}.price", item.get("price"))
        if flavor is not None:
            refs.append((f"{item_path}.flavor", "ResourceFlavor", flavor))
        if flavor and resource and price is not None:
            if any(p.flavor == flavor and p.resource == resource for p in policy.prices):
                at.error(item_path, f"{flavor}/{resource} is priced twice")
            policy.prices.append(Price(flavor=flavor, resource=resource, per_hour_micros=price))
            policy.price_paths[(flavor, resource)] = item_path
    if currency is None and policy.prices:
        at.warn(f"{path}.currency", "no currency given: the prices are read as USD (ISO 4217, e.g. currency: EUR)")
    return refs


def stray_prices(contract: Contract) -> list[tuple[Price, str]]:
    """The prices naming a flavor and resource no ClusterQueue covers — nothing is ever charged
    at them — each with why (and the covered resource it is likely a typo of)."""
    covered = {(fq.flavor, r) for cq in contract.cluster_queues for fq in cq.flavors for r in fq.resources}
    out = []
    for price in contract.prices:
        if (price.flavor, price.resource) in covered:
            continue
        of_flavor = sorted({r for f, r in covered if f == price.flavor})
        close = difflib.get_close_matches(price.resource, of_flavor, n=1, cutoff=0.6)
        out.append((price, f"{price.flavor}/{price.resource}: no ClusterQueue covers {price.resource} in flavor "
                           f"{price.flavor}, so nothing is ever charged at this price"
                    + (f" (did you mean {close[0]}?)" if close else "")))
    return out


def _check_prices(parsed: _Parsed) -> None:
    """Warn about prices nothing is charged at (``stray_prices``) where they are written."""
    if not parsed.policies:
        return
    entry = next(iter(parsed.policies.values()))
    policy = entry.value
    queues = [e.value for e in parsed.cluster_queues.values() if e.value is not None]
    for price, why in stray_prices(Contract(cluster_queues=queues, prices=policy.prices)):
        entry.at.warn(policy.price_paths.get((price.flavor, price.resource), "spec.prices"), why)


def _money(at: _At, path: str, value: Any) -> int | None:
    """A price as a decimal string ("2.10"; at most 6 decimals), in millionths (never a float)."""
    if value is None:
        at.error(path, _MISSING)
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        at.error(path, f"{_show(value)} is not a price")
        return None
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        at.error(path, f"{_show(value)} is not a decimal price")
        return None
    if not amount.is_finite() or amount < 0:
        at.error(path, f"{_show(value)} is not a price of zero or more")
        return None
    micros = amount * 1_000_000
    if micros != micros.to_integral_value():
        at.error(path, f"{_show(value)} has more than 6 decimals")
        return None
    if amount > PRICE_MAX:
        at.error(path, f"{_show(value)} is more than {PRICE_MAX:,} an hour: no GPU costs that")
        return None
    return int(micros)


#: The most a price per unit-hour may be: a month of a thousand GPUs at it stays well inside what
#: invoices and FOCUS exports compute exactly (28 significant digits).
PRICE_MAX = 1_000_000


def _policy_billing(at: _At, path: str, value: Any) -> Billing | None:
    """``billing: {period: monthly, settleSeconds: 600, idleCost: weighted, creditPreemptionWaste: false}``."""
    spec = _dict(at, path, value)
    if not spec:
        return None
    _check_fields(at, path, spec, {"period", "settleSeconds", "idleCost", "creditPreemptionWaste"})
    settle = _int(at, f"{path}.settleSeconds", spec.get("settleSeconds"), _GRACE_SECONDS)
    credit = spec.get("creditPreemptionWaste", False)
    if not isinstance(credit, bool):
        at.error(f"{path}.creditPreemptionWaste", f"must be true or false, not {_type_name(credit)}")
        credit = False
    return Billing(
        period=_choice(at, f"{path}.period", spec.get("period"), _BILLING_PERIODS, "monthly"),
        settle_ms=Billing().settle_ms if settle is None else settle * 1000,
        idle_cost=_choice(at, f"{path}.idleCost", spec.get("idleCost"), _IDLE_COST, "weighted"),
        credit_preemption_waste=credit,
    )


def _policy_idle_rule(at: _At, path: str, value: Any) -> IdleRule | None:
    """``idleRule: {smActiveBelow: "0.1", forSeconds: 1800, preemptFirst: false}`` (the idle-GPU hunt)."""
    spec = _dict(at, path, value)
    if not spec:
        return None
    _check_fields(at, path, spec, {"smActiveBelow", "forSeconds", "preemptFirst"})
    below = _quantity(at, f"{path}.smActiveBelow", spec.get("smActiveBelow"), required=True)
    if below is not None and below > 1000:
        at.error(f"{path}.smActiveBelow", f"{_show(spec.get('smActiveBelow'))} is above 1 (SM activity is a fraction)")
        below = None
    seconds = _int(at, f"{path}.forSeconds", spec.get("forSeconds"), (1, 2**31 - 1))
    first = spec.get("preemptFirst", False)
    if not isinstance(first, bool):
        at.error(f"{path}.preemptFirst", f"must be true or false, not {_type_name(first)}")
        first = False
    return IdleRule(sm_active_below=IdleRule().sm_active_below if below is None else below,
                    for_ms=IdleRule().for_ms if seconds is None else seconds * 1000, preempt_first=first)


#: At most this many quota holds a tree: each is one more quota walk per blocked workload and cycle.
_HOLDS = (0, 64)
#: A hand-over counts the quota it takes over twice for this long at most (one minute).
_HAND_OVER_MS = (0, 60_000)


def _policy_backfill(at: _At, path: str, value: Any) -> Backfill | None:
    """``backfill: {quotaHoldsPerTree: 8, handOverWithinMilliseconds: 100}`` (``Backfill``)."""
    spec = _dict(at, path, value)
    if not spec:
        return None
    _check_fields(at, path, spec, {"quotaHoldsPerTree", "handOverWithinMilliseconds"})
    holds = _int(at, f"{path}.quotaHoldsPerTree", spec.get("quotaHoldsPerTree"), _HOLDS)
    within = _int(at, f"{path}.handOverWithinMilliseconds", spec.get("handOverWithinMilliseconds"), _HAND_OVER_MS)
    return Backfill(quota_holds_per_tree=Backfill().quota_holds_per_tree if holds is None else holds,
                    hand_over_within_ms=Backfill().hand_over_within_ms if within is None else within)


#: Priority aging: at least a millisecond a point, at most a year.
_AGING_SECONDS = (0.001, 365 * 86400)


def _policy_aging(at: _At, path: str, value: Any) -> int | None:
    """``priorityAging: {secondsPerPoint: 60}`` (``Contract.aging_ms_per_point``): a number of
    seconds, fractions allowed (0.5: two points a second)."""
    spec = _dict(at, path, value)
    if not spec:
        return None
    _check_fields(at, path, spec, {"secondsPerPoint"})
    seconds = _number(at, f"{path}.secondsPerPoint", spec.get("secondsPerPoint"), _AGING_SECONDS, required=True,
                      kinds=(int, float), what="a number of seconds",
                      unit=" (seconds of waiting worth one priority point)")
    return None if seconds is None else round(seconds * 1000)


_READERS: dict[str, Callable[[_At, dict, _Parsed], None]] = {
    "ResourceFlavor": _read_flavor,
    "ClusterQueue": _read_cluster_queue,
    "Cohort": _read_cohort,
    "LocalQueue": _read_local_queue,
    "WorkloadPriorityClass": _read_priority_class,
    "Topology": _read_topology,
}


# --- resource groups and preemption ------------------------------------------------------------


def _resource_groups(
    at: _At, path: str, value: Any, no_sharing: str | None
) -> tuple[list[FlavorQuotas], list[_Ref]]:
    """The flavors of every group in order, and their references to ResourceFlavors.

    ``no_sharing`` names the empty field (``spec.cohort``…) that forbids borrowing and lending
    limits, or is None when they are allowed.
    """
    flavors: list[FlavorQuotas] = []
    refs: list[_Ref] = []
    covered_at: dict[str, str] = {}
    for g, group in enumerate(_counted(at, path, _list(at, path, value), least=0) or []):
        group_path = f"{path}[{g}]"
        group = _dict(at, group_path, group)
        if group is None:
            continue
        _check_fields(at, group_path, group, {"coveredResources", "flavors"})
        covered = _covered(at, f"{group_path}.coveredResources", group.get("coveredResources"), covered_at)
        group_flavors = _counted(at, f"{group_path}.flavors", _list(at, f"{group_path}.flavors", group.get("flavors"),
                                                                    required=True))
        for f, flavor in enumerate(group_flavors or []):
            quotas = _flavor_quotas(at, f"{group_path}.flavors[{f}]", flavor, covered, no_sharing)
            if quotas is not None:
                flavors.append(quotas)
                refs.append((f"{group_path}.flavors[{f}].name", "ResourceFlavor", quotas.flavor))
    _no_repeated_flavors(at, refs)
    return flavors, refs


#: Kueue's bounds on a ClusterQueue's lists (resource groups, covered resources, flavors a group).
LIST_ITEMS_MAX = 16


def _counted(at: _At, path: str, items: list | None, least: int = 1) -> list | None:
    """``items``, if there are from ``least`` to ``LIST_ITEMS_MAX`` of them as Kueue's API asks
    (else an error; the items are still read, for their own errors)."""
    if items is not None and not least <= len(items) <= LIST_ITEMS_MAX:
        at.error(path, f"lists {len(items)} item{'s' * (len(items) != 1)}: Kueue takes "
                       f"{f'{least} to ' if least else 'at most '}{LIST_ITEMS_MAX}")
    return items


def _covered(at: _At, path: str, value: Any, covered_at: dict[str, str]) -> set[str] | None:
    """The group's resources (None when the list itself is unusable); each in one group only."""
    names = _counted(at, path, _list(at, path, value, required=True))
    if names is None:
        return None
    covered: set[str] = set()
    for i, name in enumerate(names):
        name = _resource_name(at, f"{path}[{i}]", name)
        if name in covered_at:
            at.error(f"{path}[{i}]", f"{_show(name)} is already covered at {covered_at[name]}")
        elif name is not None:
            covered_at[name] = f"{path}[{i}]"
        if name is not None:
            covered.add(name)
    return covered


def _flavor_quotas(
    at: _At, path: str, value: Any, covered: set[str] | None, no_sharing: str | None
) -> FlavorQuotas | None:
    flavor = _dict(at, path, value)
    if flavor is None:
        return None
    _check_fields(at, path, flavor, {"name", "resources"})
    name = _name(at, f"{path}.name", flavor.get("name"))
    listed: set[str] = set()
    quotas: dict[str, Quota] = {}
    for r, entry in enumerate(_list(at, f"{path}.resources", flavor.get("resources"), required=True) or []):
        resource, quota = _resource_quota(at, f"{path}.resources[{r}]", entry, no_sharing)
        if resource is None:
            continue
        if resource in listed:
            at.error(f"{path}.resources[{r}].name", f"{_show(resource)} is listed twice in this flavor")
        elif covered is not None and resource not in covered:
            at.error(f"{path}.resources[{r}].name", f"{_show(resource)} is not in this group's coveredResources")
        elif quota is not None:
            quotas[resource] = quota
        listed.add(resource)
    missing = sorted((covered or set()) - listed)
    if missing:
        at.error(f"{path}.resources", f"no quota for {', '.join(map(_show, missing))}, listed in coveredResources")
    return None if name is None else FlavorQuotas(flavor=name, resources=dict(sorted(quotas.items())))


def _resource_quota(at: _At, path: str, value: Any, no_sharing: str | None) -> tuple[str | None, Quota | None]:
    entry = _dict(at, path, value)
    if entry is None:
        return None, None
    _check_fields(at, path, entry, {"name", "nominalQuota", "borrowingLimit", "lendingLimit"})
    resource = _resource_name(at, f"{path}.name", entry.get("name"), required=True)
    nominal = _quantity(at, f"{path}.nominalQuota", entry.get("nominalQuota"), required=True)
    borrowing = _limit(at, path, "borrowingLimit", entry.get("borrowingLimit"), no_sharing)
    lending = _limit(at, path, "lendingLimit", entry.get("lendingLimit"), no_sharing)
    # (A Cohort's lendingLimit caps what its whole subtree lends, its ClusterQueues' quota with its
    # own: Kueue checks it against nominalQuota for ClusterQueues only.)
    if nominal is not None and lending is not None and lending > nominal and at.kind != "Cohort":
        at.error(f"{path}.lendingLimit",
                 f"{_show(entry['lendingLimit'])} is more than nominalQuota {_show(entry['nominalQuota'])}")
    if nominal is None:
        return resource, None
    return resource, Quota(nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)


def _limit(at: _At, path: str, key: str, value: Any, no_sharing: str | None) -> int | None:
    if value is not None and no_sharing:
        partner = "borrow from" if key == "borrowingLimit" else "lend to"
        at.error(f"{path}.{key}", f"must be unset when {no_sharing} is empty: there is no one to {partner}")
    return _quantity(at, f"{path}.{key}", value)


def _no_repeated_flavors(at: _At, refs: list[_Ref]) -> None:
    """A flavor belongs to one resource group and appears once in it (Kueue's rule)."""
    first: dict[str, str] = {}
    for path, _, name in refs:
        if name in first:
            at.error(path, f"flavor {_show(name)} is already listed at {first[name].removesuffix('.name')}")
        else:
            first[name] = path


def _preemption(at: _At, path: str, value: Any) -> Preemption:
    spec = _dict(at, path, value)
    if not spec:
        return Preemption()
    _check_fields(at, path, spec, {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"})
    within = _choice(at, f"{path}.withinClusterQueue", spec.get("withinClusterQueue"), _WITHIN, "Never")
    reclaim = _choice(at, f"{path}.reclaimWithinCohort", spec.get("reclaimWithinCohort"), _RECLAIM, "Never")
    borrow = _borrow_within_cohort(at, f"{path}.borrowWithinCohort", spec.get("borrowWithinCohort"))
    if reclaim == "Never" and borrow.policy != "Never":  # (Kueue's API refuses it too)
        at.error(f"{path}.borrowWithinCohort", "borrowWithinCohort.policy is not Never while reclaimWithinCohort is "
                 "Never: a queue that may never preempt in its cohort cannot preempt there to borrow")
    return Preemption(within_cluster_queue=within, reclaim_within_cohort=reclaim, borrow_within_cohort=borrow)


def _borrow_within_cohort(at: _At, path: str, value: Any) -> BorrowWithinCohort:
    spec = _dict(at, path, value)
    if not spec:
        return BorrowWithinCohort()
    _check_fields(at, path, spec, {"policy", "maxPriorityThreshold"})
    policy = _choice(at, f"{path}.policy", spec.get("policy"), ("Never", "LowerPriority"), "Never")
    threshold = _int(at, f"{path}.maxPriorityThreshold", spec.get("maxPriorityThreshold"), _INT32)
    return BorrowWithinCohort(policy=policy, max_priority_threshold=threshold)


def _fungibility(at: _At, path: str, value: Any) -> FlavorFungibility:
    spec = _dict(at, path, value)
    if not spec:
        return FlavorFungibility()
    _check_fields(at, path, spec, {"whenCanBorrow", "whenCanPreempt"}, {"preference": ()})
    # (v1beta2 took the old names Borrow and Preempt out: MayStopSearch says both)
    dropped = {"Borrow", "Preempt"} if at.version == "v1beta2" else set()
    borrow = _choice(at, f"{path}.whenCanBorrow", spec.get("whenCanBorrow"),
                     tuple(k for k in _WHEN_CAN_BORROW if k not in dropped), "MayStopSearch")
    preempt = _choice(at, f"{path}.whenCanPreempt", spec.get("whenCanPreempt"),
                      tuple(k for k in _WHEN_CAN_PREEMPT if k not in dropped), "TryNextFlavor")
    return FlavorFungibility(when_can_borrow=_WHEN_CAN_BORROW[borrow], when_can_preempt=_WHEN_CAN_PREEMPT[preempt])


def _fair_weight(at: _At, path: str, value: Any) -> int:
    """``fairSharing.weight`` (a quantity, default 1) in thousandths."""
    spec = _dict(at, path, value)
    if not spec:
        return WEIGHT_ONE
    _check_fields(at, path, spec, {"weight"})
    weight = _quantity(at, f"{path}.weight", spec.get("weight"))
    return WEIGHT_ONE if weight is None else weight


# --- fields ------------------------------------------------------------------------------------

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A label's name (and value), a resource's name after its prefix: Kubernetes' qualified name.
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_RESOURCE = re.compile(rf"({_SUBDOMAIN.pattern}/)?{_LABEL_NAME.pattern}")
_NAME_RULE = "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
_NAMESPACE_RULE = "at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"


def _spec(at: _At, obj: dict) -> dict | None:
    """Check an object's top level and name; its spec ({} when absent, None when unusable)."""
    _check_fields(at, "", obj, _TOP_FIELDS)
    _check_name(at, obj)
    return _dict(at, "spec", obj.get("spec"))


def _check_name(at: _At, obj: dict) -> None:
    metadata = _dict(at, "metadata", obj.get("metadata"))
    if metadata is not None:
        _name(at, "metadata.name", metadata.get("name"))


def _namespace(at: _At, metadata: Any) -> str:
    """metadata.namespace, or "default" as kubectl assumes when it is left out."""
    value = metadata.get("namespace") if isinstance(metadata, dict) else None
    if value is None:
        return "default"
    if not isinstance(value, str) or len(value) > 63 or not _LABEL.fullmatch(value):
        at.error("metadata.namespace", f"{_show(value)} is not a valid namespace ({_NAMESPACE_RULE})")
    return str(value)


def _check_fields(at: _At, path: str, obj: dict, read: set[str], ignored: dict[str, tuple] | None = None) -> None:
    """Every key is one gangway reads, or a Kueue field it ignores (warned unless at its default)."""
    ignored = ignored or {}
    for key, value in obj.items():
        key_path = ".".join(part for part in (path, str(key)) if part)
        if key in read:
            continue
        if key in ignored:
            if value not in ignored[key]:
                at.warn(key_path, "not supported by gangway yet; ignored")
        elif _RENAMED.get(key) in read:
            at.error(key_path, f"unknown field in {at.api_version}, which calls it {_RENAMED[key]}")
        else:
            at.error(key_path, "unknown field" + _meant(key, read))


def _meant(key: Any, fields) -> str:
    """`` (did you mean <field>?)`` for the one of ``fields`` an unknown ``key`` may be a misspelling
    of ('' for none)."""
    close = difflib.get_close_matches(str(key), sorted(fields), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _dict(at: _At, path: str, value: Any) -> dict | None:
    """A mapping field: {} when absent, None (reported) when it is something else."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    at.error(path, f"must be a mapping, not {_type_name(value)}")
    return None


def _list(at: _At, path: str, value: Any, required: bool = False) -> list | None:
    """A list field: None when absent (reported if required) or not a list (reported)."""
    if isinstance(value, list):
        return value
    if value is not None:
        at.error(path, f"must be a list, not {_type_name(value)}")
    elif required:
        at.error(path, _MISSING)
    return None


def _mappings(at: _At, path: str, value: Any) -> Iterator[tuple[str, dict]]:
    """The mappings of a list field, each with its path (others are reported and skipped)."""
    for i, item in enumerate(_list(at, path, value) or []):
        item = _dict(at, f"{path}[{i}]", item)
        if item is not None:
            yield f"{path}[{i}]", item


def _string(at: _At, path: str, value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    at.error(path, _MISSING if value in (None, "") else f"must be a string, not {_type_name(value)}")
    return None


def _name(at: _At, path: str, value: Any, required: bool = True) -> str | None:
    """An object name or a reference to one (a DNS subdomain, as Kubernetes requires)."""
    if value is None or value == "":
        if required:
            at.error(path, _MISSING)
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _SUBDOMAIN.fullmatch(str(value)):
        at.error(path, f"{_show(value)} is a number as YAML reads it: quote it (\"{value}\") to make it a name")
        return None
    problem = name_problem(value)
    if problem:
        at.error(path, problem)
        return None
    return value


def name_problem(value: Any) -> str:
    """Why ``value`` is no Kubernetes object name (a DNS subdomain: at most 253 characters of
    lowercase letters, digits, '-' and '.'); '' when it is one."""
    if isinstance(value, str) and len(value) > 253:
        return f"{_show(value[:40])}… is {len(value)} characters long: a name has at most 253"
    if not isinstance(value, str) or not _SUBDOMAIN.fullmatch(value):
        return f"{_show(value)} is not a valid name ({_NAME_RULE})"
    return ""


def _resource_name(at: _At, path: str, value: Any, required: bool = False) -> str | None:
    """A resource name such as ``cpu`` or ``nvidia.com/gpu``."""
    if value is None and not required:
        return None
    if isinstance(value, str) and _RESOURCE.fullmatch(value):
        return value
    at.error(path, _MISSING if value is None else f"{_show(value)} is not a resource name")
    return None


def _labels(at: _At, path: str, value: Any) -> dict[str, str]:
    labels = _dict(at, path, value) or {}
    for key, label in labels.items():
        if not isinstance(key, str):
            at.error(f"{path}.{key}", f"a label key must be a string, not {_type_name(key)}")
        elif not isinstance(label, str):
            at.error(f"{path}.{key}", f"a label value must be a string, not {_type_name(label)}")
        elif not _label_key(key):
            at.error(f"{path}.{key}", f"{_show(key)} is no Kubernetes label key: an optional DNS subdomain prefix "
                     "and '/', then at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter "
                     "or digit")
        elif label and (len(label) > 63 or not _LABEL_NAME.fullmatch(label)):
            at.error(f"{path}.{key}", f"{_show(label)} is no Kubernetes label value: at most 63 letters, digits, "
                     "'-', '_' and '.', starting and ending with a letter or digit")
    return dict(sorted((str(k), str(v)) for k, v in labels.items()))


def _label_key(key: str) -> bool:
    """Is ``key`` a Kubernetes label key (``[prefix/]name``)?"""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name))


def _quantity(at: _At, path: str, value: Any, required: bool = False) -> int | None:
    """A non-negative Kubernetes quantity in milli units (None when absent or wrong)."""
    if value is None:
        if required:
            at.error(path, _MISSING)
        return None
    try:
        milli = parse_milli(value)
    except QuantityError as exc:
        at.error(path, _quantity_why(value, exc))
        return None
    if milli < 0:
        at.error(path, f"{_show(value)} is negative; it must be zero or more")
        return None
    return milli


def _quantity_why(value: Any, exc: QuantityError) -> str:
    reason = str(exc).partition(":")[0]
    if reason.startswith("not a"):
        return f"{_show(value)} is not a Kubernetes quantity"
    return f"{_show(value)}: {reason}"


def _int(at: _At, path: str, value: Any, bounds: tuple[int, int], required: bool = False) -> int | None:
    return _number(at, path, value, bounds, required)


def _number(at: _At, path: str, value: Any, bounds: tuple[float, float], required: bool = False,
            kinds: tuple[type, ...] = (int,), what: str = "an integer", unit: str = "") -> Any:
    """A number of one of ``kinds`` within ``bounds`` (None when absent or wrong, reported)."""
    if value is None:
        if required:
            at.error(path, _MISSING)
        return None
    if isinstance(value, bool) or not isinstance(value, kinds):
        at.error(path, f"{_show(value)} is not {what}")
        return None
    low, high = bounds
    if not low <= value <= high:
        at.error(path, f"{_show(value)} is out of range: {low} to {high}{unit}")
        return None
    return value


def _choice(at: _At, path: str, value: Any, allowed: tuple[str, ...], default: str) -> Any:
    """One of Kueue's enumerated values; absent means Kueue's default."""
    if value is None:
        return default
    if isinstance(value, str) and value in allowed:
        return value
    at.error(path, f"{_show(value)} is not one of {', '.join(allowed)}")
    return default


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _type_name(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "nothing"}
    return names.get(type(value), type(value).__name__)
