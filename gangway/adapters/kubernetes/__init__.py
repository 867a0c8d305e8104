"""The one room that talks to a Kubernetes API server (kubernetes-asyncio): a JSON client, a
list-and-watch reflector and Lease leader election."""

from gangway.adapters.kubernetes.client import ApiError, Kube, Resource
from gangway.adapters.kubernetes.lease import LeaseElector
from gangway.adapters.kubernetes.reflector import Reflector, key_of

__all__ = ["ApiError", "Kube", "LeaseElector", "Reflector", "Resource", "key_of"]
