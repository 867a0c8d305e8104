"""The Kubeflow training kinds gangway takes, as Kueue's kubeflow integrations do: PyTorchJob, TFJob,
XGBoostJob, PaddleJob and JAXJob (the training operator's ``kubeflow.org/v1``) and MPIJob (the MPI
operator's ``kubeflow.org/v2beta1``).

They share one shape: ``spec.<replicaSpecs>`` maps a replica type (Master, Worker, PS, Launcher…) to
``{replicas, template}``, one pod set each; ``spec.runPolicy.suspend`` suspends the job; each pod is
labelled with its job's name, its replica type (lower case) and its index; the job ends with a
``Succeeded`` or ``Failed`` condition. Pure data, here because both the intake (``gangway submit``,
the Kubernetes intake) and the binder read it, and they share only what is below them.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "kubeflow.org"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


@dataclass(frozen=True)
class TrainingKind:
    kind: str
    version: str
    plural: str
    #: The spec field mapping replica types to their specs.
    replica_specs: str
    #: Replica types whose pod sets are listed first, in this order (others follow, sorted).
    order: tuple[str, ...]
    #: The pod label that says a pod's replica type, in lower case.
    role_label: str = "training.kubeflow.org/replica-type"

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"


TRAINING_KINDS: dict[str, TrainingKind] = {k.kind: k for k in (
    TrainingKind("PyTorchJob", "v1", "pytorchjobs", "pytorchReplicaSpecs", ("Master", "Worker")),
    TrainingKind("TFJob", "v1", "tfjobs", "tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator")),
    TrainingKind("XGBoostJob", "v1", "xgboostjobs", "xgbReplicaSpecs", ("Master", "Worker")),
    TrainingKind("PaddleJob", "v1", "paddlejobs", "paddleReplicaSpecs", ("Master", "Worker")),
    TrainingKind("JAXJob", "v1", "jaxjobs", "jaxReplicaSpecs", ("Worker",)),
    # (the MPI operator names a pod's replica type its role: launcher or worker)
    TrainingKind("MPIJob", "v2beta1", "mpijobs", "mpiReplicaSpecs", ("Launcher", "Worker"),
                 role_label="training.kubeflow.org/job-role"),
)}


def replica_types(kind: TrainingKind, replica_specs: dict) -> list[str]:
    """The replica types of a job in the order of its pod sets."""
    first = [t for t in kind.order if t in replica_specs]
    return first + sorted(str(t) for t in replica_specs if t not in kind.order)


def is_suspended(obj: dict) -> bool:
    """Is a Job, JobSet or Kubeflow job object suspended (``spec.suspend``; the Kubeflow kinds'
    ``spec.runPolicy.suspend``)?"""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if obj.get("kind") in TRAINING_KINDS:
        run_policy = spec.get("runPolicy")
        return isinstance(run_policy, dict) and bool(run_policy.get("suspend"))
    return bool(spec.get("suspend"))
