"""The binder's errors a user can put right, apart from the Kubernetes client (which `gangway`'s
command line need not import to catch them)."""


class WebhookError(RuntimeError):
    """The webhook cannot serve: why (its port taken, its certificate unreadable)."""
