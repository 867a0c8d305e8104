"""Reasons as data: every decision, every wait and every superseded decision names a ``ReasonCode``
with its parameters; the sentence people read is rendered from them (``render``).

A consumer switches on the code (the JSON Schemas list every value), never on the words: rewording a
template changes what people read and nothing decided (the auditor, which checks that a recorded
sentence is its code's rendering, then reports the older sentences: replay a log with the gangway
that wrote it). Readers show the sentence rendered from the code (``sentence``). Decision events carry all three —
``reason`` (the sentence), ``reason_code`` and ``reason_params`` — and a record written before
codes existed decodes with ``reason_code`` None (its sentence is all it has).

A template is a ``str.format`` pattern over the parameters; a *clause* is an optional tail added
when its parameter is present (in ``CLAUSES`` order), so one code covers, say, an admission with or
without partial counts.
"""

from __future__ import annotations

import enum
from typing import Union

import msgspec

#: A parameter: a name, a number, or a quantity already written in words ("4 nvidia.com/gpu").
Param = Union[str, int]


class ReasonCode(enum.StrEnum):
    """Why a decision was made, why a workload waits, or why a decision did not hold where it
    landed: switch on the code; the parameters (``reason_params``) fill its sentence."""

    # --- admission: why a workload was admitted (WorkloadAdmitted) ---------------------------
    FITS_NOMINAL = "fits_nominal"
    FITS_BORROWING = "fits_borrowing"
    # --- placement (PlacementDecided) ---------------------------------------------------------
    BEST_FIT = "best_fit"
    # --- preemption: the rule that let a victim go (EvictionOrdered) ---------------------------
    WITHIN_QUEUE_LOWER_PRIORITY = "within_queue_lower_priority"
    WITHIN_QUEUE_NEWER_EQUAL_PRIORITY = "within_queue_newer_equal_priority"
    RECLAIM_WITHIN_COHORT = "reclaim_within_cohort"
    BORROW_WITHIN_COHORT = "borrow_within_cohort"
    FAIR_SHARING = "fair_sharing"
    DEFRAGMENTATION = "defragmentation"
    #: Not a preemption: the workload's queue was stopped with stopPolicy HoldAndDrain.
    QUEUE_DRAINED = "queue_drained"
    HAND_OVER_LAPSED = "hand_over_lapsed"
    #: Not a preemption: the workload used up its maximum execution time (it is deactivated).
    MAX_EXECUTION_TIME_EXCEEDED = "max_execution_time_exceeded"
    # --- why a pending workload is not admitted (the admission cycle; explain, status) --------
    ADMISSIBLE = "admissible"
    NO_CONFIG = "no_config"
    UNKNOWN_CLUSTER_QUEUE = "unknown_cluster_queue"
    NO_QUOTA_FOR_RESOURCES = "no_quota_for_resources"
    NO_QUOTA_IN_FLAVOR = "no_quota_in_flavor"
    OVER_NOMINAL_QUOTA = "over_nominal_quota"
    OVER_BORROWING_LIMIT = "over_borrowing_limit"
    NOMINAL_QUOTA_LENT_OUT = "nominal_quota_lent_out"
    COHORT_EXHAUSTED = "cohort_exhausted"
    NO_FLAVOR_ROOM = "no_flavor_room"
    QUOTA_NEVER_ENOUGH = "quota_never_enough"
    NO_PLACEMENT = "no_placement"
    TOPOLOGY_UNSATISFIABLE = "topology_unsatisfiable"
    NO_MATCHING_NODES = "no_matching_nodes"
    UNTOLERATED_TAINT = "untolerated_taint"
    RESERVATION_HELD = "reservation_held"
    RESERVED_FOR_ANOTHER_GANG = "reserved_for_another_gang"
    QUOTA_HELD_FOR_ANOTHER = "quota_held_for_another"
    BEHIND_HIGHER_PRIORITY = "behind_higher_priority"
    STRICT_FIFO = "strict_fifo"
    WAITING_FOR_VICTIMS = "waiting_for_victims"
    QUEUE_STOPPED = "queue_stopped"
    LOCAL_QUEUE_GONE = "local_queue_gone"
    # --- why a decision did not hold where it landed (the fold: superseded) ------------------
    UNKNOWN_WORKLOAD = "unknown_workload"
    WORKLOAD_MOVED_ON = "workload_moved_on"
    DECIDED_BEFORE = "decided_before"
    WRONG_CLUSTER_QUEUE = "wrong_cluster_queue"
    COUNTS_OUT_OF_RANGE = "counts_out_of_range"
    UNKNOWN_POD_SET = "unknown_pod_set"
    USAGE_DIFFERS = "usage_differs"
    BAD_HAND_OVER = "bad_hand_over"
    BORROWING_DIFFERS = "borrowing_differs"
    FLAVOR_WITHOUT_QUOTA = "flavor_without_quota"
    FLAVOR_MISSING = "flavor_missing"
    NODE_GONE = "node_gone"
    NODE_WITHOUT_FLAVOR = "node_without_flavor"
    EMPTY_ASSIGNMENT = "empty_assignment"
    PODS_NO_LONGER_FIT = "pods_no_longer_fit"
    GPUS_NO_LONGER_FIT = "gpus_no_longer_fit"
    GANG_INCOMPLETE = "gang_incomplete"
    NO_LONGER_IDLE = "no_longer_idle"
    # --- the binder: a gang that did not bind, and what it does about it (WorkloadEvicted) ----
    BIND_BACKOFF = "bind_backoff"
    BIND_FAILURES_EXCEEDED = "bind_failures_exceeded"
    # --- reconciling the cluster against the log (ClusterReconciled) --------------------------
    RESUMED_WITHOUT_PLACEMENT = "resumed_without_placement"
    PODS_BOUND_WITHOUT_PLACEMENT = "pods_bound_without_placement"
    PODS_VANISHED = "pods_vanished"
    PODS_REPLACED = "pods_replaced"


C = ReasonCode

#: The sentence of each code (``str.format`` over its parameters).
MESSAGES: dict[ReasonCode, str] = {
    C.FITS_NOMINAL: "fits nominal quota of {cluster_queue}",
    C.FITS_BORROWING: "fits {cluster_queue} by borrowing from its cohort ({borrowed})",
    C.BEST_FIT: "best fit on {node_count} node(s): {nodes}",
    C.WITHIN_QUEUE_LOWER_PRIORITY: "withinClusterQueue {policy}: priority {victim_priority} < {priority} of {preemptor}",
    C.WITHIN_QUEUE_NEWER_EQUAL_PRIORITY: "withinClusterQueue {policy}: same priority {priority}, queued after {preemptor}",
    C.RECLAIM_WITHIN_COHORT: ("reclaimWithinCohort {policy}: {victim_queue} is borrowing and {cluster_queue} "
                              "reclaims its nominal quota for {preemptor}"),
    C.BORROW_WITHIN_COHORT: ("borrowWithinCohort LowerPriority: {preemptor} (priority {priority}) may borrow by "
                             "preempting {victim_queue}'s lower-priority workload (priority {victim_priority})"),
    C.FAIR_SHARING: "fair sharing: {victim_queue} is above its fair share of cohort {cohort}",
    C.DEFRAGMENTATION: ("defragmentation: moved so that {preemptor} ({gpus}) gets a whole placement; "
                        "every moved workload can be placed again at once"),
    C.HAND_OVER_LAPSED: ("{workload}, whose quota and room it was to take over, is late past its declared end by more "
                         "than its grace period: the hand-over lapses and it waits in its queue again"),
    C.QUEUE_DRAINED: ("{queue_kind} {queue} is stopped with stopPolicy HoldAndDrain: what it admitted is evicted, "
                      "and waits in it until its stopPolicy is None again"),
    C.ADMISSIBLE: "fits now: admission will admit it in its next cycle",
    C.NO_CONFIG: "no contract has been applied",
    C.UNKNOWN_CLUSTER_QUEUE: "ClusterQueue {cluster_queue} is not in the contract",
    C.NO_QUOTA_FOR_RESOURCES: "ClusterQueue {cluster_queue} has no quota for {resources}",
    C.NO_QUOTA_IN_FLAVOR: "ClusterQueue {cluster_queue} has no quota for {resource} in flavor {flavor}",
    C.OVER_NOMINAL_QUOTA: "{resource} ({flavor}): {wanted} in use with it, over nominal quota {nominal} of {cluster_queue}",
    C.OVER_BORROWING_LIMIT: ("{resource} ({flavor}): {wanted} in use with it, over nominal {nominal} + borrowing "
                             "limit {limit} of {cluster_queue}"),
    C.NOMINAL_QUOTA_LENT_OUT: ("{resource} ({flavor}): within the nominal quota of {cluster_queue}, but cohort "
                               "{cohort} lent it to queues that borrow: it comes back as their work ends, or "
                               "sooner where reclaimWithinCohort lets {cluster_queue} preempt them"),
    C.COHORT_EXHAUSTED: ("{resource} ({flavor}): {cluster_queue} needs to borrow {amount} beyond its own free quota, "
                         "and cohort {cohort} has {available} left to lend it"),
    C.NO_FLAVOR_ROOM: "no flavor of {cluster_queue} ({flavors}) has room for the request",
    C.QUOTA_NEVER_ENOUGH: ("{cluster_queue} can never hold it: it asks {wanted} of {resource} ({flavor}), and the "
                           "most the queue can use, with nothing else running, is {most}"),
    C.NO_PLACEMENT: "no placement for the whole gang on free capacity",
    C.TOPOLOGY_UNSATISFIABLE: "topology can never be satisfied: pod set {pod_set} has {request} topology {level}, but {missing}",
    C.NO_MATCHING_NODES: "no node can ever take pod set {pod_set}: {missing}",
    C.UNTOLERATED_TAINT: ("no flavor of {cluster_queue} for {resources} ({flavors}) may take it: pod set {pod_set} "
                          "does not tolerate flavor {flavor}'s node taint {taint} (spec.nodeTaints)"),
    C.RESERVATION_HELD: "no placement for the whole gang on free capacity",
    C.RESERVED_FOR_ANOTHER_GANG: "the room it needs is reserved for {gang}, expected to start at {start}",
    C.QUOTA_HELD_FOR_ANOTHER: ("fits its quota now, but that quota is held for {gang} of {cluster_queue}, expected "
                               "to start at {start}, and it would still be running then"),
    C.BEHIND_HIGHER_PRIORITY: "fits on its own, but workloads ahead of it (higher priority or older) take the room first",
    C.STRICT_FIFO: "StrictFIFO: behind the head of {cluster_queue}",
    C.WAITING_FOR_VICTIMS: "waiting for {victims} preempted workload(s) to exit",
    C.LOCAL_QUEUE_GONE: ("LocalQueue {local_queue} is not in the contract any more: nothing is admitted from it "
                         "until a contract brings it back"),
    C.QUEUE_STOPPED: "{queue_kind} {queue} is stopped (stopPolicy {policy}): it admits nothing until its stopPolicy is None again",
    C.UNKNOWN_WORKLOAD: "unknown workload",
    C.WORKLOAD_MOVED_ON: "workload is {phase}",
    C.DECIDED_BEFORE: "decided at offset {based_on}, before {what} (offset {since})",
    C.WRONG_CLUSTER_QUEUE: "workload belongs to {cluster_queue}",
    C.COUNTS_OUT_OF_RANGE: "pod set {pod_set}: {count} pods admitted, outside {low}..{high}",
    C.UNKNOWN_POD_SET: "no pod set {pod_set}",
    C.USAGE_DIFFERS: "usage differs from the workload's request",
    C.BAD_HAND_OVER: "takes over from itself, or names a workload twice: {after}",
    C.BORROWING_DIFFERS: "borrowing differs from the quota in force",
    C.FLAVOR_WITHOUT_QUOTA: "flavor {flavor} of {cluster_queue} has no quota for {resource}",
    C.FLAVOR_MISSING: "no flavor assigned for {resources}",
    C.NODE_GONE: "node {node} is gone",
    C.NODE_WITHOUT_FLAVOR: "node {node} does not have the admitted flavors' labels",
    C.EMPTY_ASSIGNMENT: "empty assignment",
    C.PODS_NO_LONGER_FIT: "{count} pod(s) of {pod_set} no longer fit on {node}",
    C.GPUS_NO_LONGER_FIT: "{count} pod(s) of {pod_set} no longer fit the GPUs of {node}",
    C.GANG_INCOMPLETE: "pod set {pod_set}: {placed} of {count} pods placed (a gang is all or nothing)",
    C.NO_LONGER_IDLE: "the workload is no longer running idle",
    C.BIND_BACKOFF: "backing off after {failures} failed bind(s) in a row: back in its queue at {retry_at}",
    C.BIND_FAILURES_EXCEEDED: "deactivated after {failures} failed binds in a row (limit {limit})",
    C.MAX_EXECUTION_TIME_EXCEEDED: ("admitted for {executed_s} s in all, its maximum execution time (label "
                                    "kueue.x-k8s.io/max-exec-time-seconds: {maximum_s}): deactivated"),
    C.RESUMED_WITHOUT_PLACEMENT: ("{kind} {object} was resumed with {pods} pod(s) on nodes, but the log holds no "
                                  "placement for it"),
    C.PODS_BOUND_WITHOUT_PLACEMENT: ("{kind} {object} is suspended, yet {pods} pod(s) of it are on nodes, and the "
                                     "log holds no placement for it"),
    C.PODS_VANISHED: "{kind} {object}: {pods} pod(s) of the placement of {workload} are gone from the cluster",
    C.PODS_REPLACED: "{kind} {object}: its controller replaced {pods} pod(s) of {workload} that failed or were deleted",
}

#: Optional tails, added in this order when their parameter is present.
CLAUSES: dict[str, str] = {
    "expected": ", not {expected}",
    "partial": " with {partial} (partial admission)",
    "chosen_flavor": "; flavor {chosen_flavor}",
    "of_flavor": " of flavor {of_flavor}",
    "reserved_start": "; nodes reserved for it, free by {reserved_start} if the work on them ends as declared",
    "takes_over": "; a hand-over: starts when {takes_over} has ended",
    "held_start": "; quota held for it, free by {held_start} if the admitted work ends as declared",
    "domains": " ({domains})",
    "idle_first": "; {idle_first}",
    "workload_phase": " (workload {workload_phase})",
    "last_error": ": {last_error}",
    "passed_over": "; passed over for their node taints: {passed_over}",
    "other_flavors": "; nor the other flavors': {other_flavors}",
}

#: Codes a decision event may carry, by event: what a consumer of each event type switches on.
ADMISSION_CODES = (C.FITS_NOMINAL, C.FITS_BORROWING)
PLACEMENT_CODES = (C.BEST_FIT,)
PREEMPTION_CODES = (C.WITHIN_QUEUE_LOWER_PRIORITY, C.WITHIN_QUEUE_NEWER_EQUAL_PRIORITY, C.RECLAIM_WITHIN_COHORT,
                    C.BORROW_WITHIN_COHORT, C.FAIR_SHARING, C.DEFRAGMENTATION, C.QUEUE_DRAINED, C.HAND_OVER_LAPSED,
                    C.MAX_EXECUTION_TIME_EXCEEDED)
#: The codes each decision event carries, by event type name.
DECISION_CODES: dict[str, tuple[ReasonCode, ...]] = {
    "WorkloadAdmitted": ADMISSION_CODES, "PlacementDecided": PLACEMENT_CODES, "EvictionOrdered": PREEMPTION_CODES,
}
#: Codes of what reconciling found (``ClusterReconciled``), and of a failed bind's requeue (``WorkloadEvicted``).
RECONCILE_CODES = (C.RESUMED_WITHOUT_PLACEMENT, C.PODS_BOUND_WITHOUT_PLACEMENT, C.PODS_VANISHED, C.PODS_REPLACED)
BIND_FAILURE_CODES = (C.BIND_BACKOFF, C.BIND_FAILURES_EXCEEDED)
#: An eviction with one of these codes deactivates the workload: it is never queued again.
DEACTIVATING_CODES = (C.BIND_FAILURES_EXCEEDED, C.MAX_EXECUTION_TIME_EXCEEDED)
#: Quota stands in the way of a workload, for now (the admission cycle keeps quota for the first one).
QUOTA_CODES = (C.OVER_NOMINAL_QUOTA, C.OVER_BORROWING_LIMIT, C.NOMINAL_QUOTA_LENT_OUT, C.COHORT_EXHAUSTED)
#: A workload no node of the cluster can ever take (until nodes it may use join): never waited for.
NEVER_PLACEABLE_CODES = (C.TOPOLOGY_UNSATISFIABLE, C.NO_MATCHING_NODES)
#: The contract itself stands in the way: no queue, or no quota for what is asked, or never enough.
CONFIG_CODES = (C.NO_CONFIG, C.UNKNOWN_CLUSTER_QUEUE, C.LOCAL_QUEUE_GONE, C.NO_QUOTA_FOR_RESOURCES, C.NO_QUOTA_IN_FLAVOR,
                C.QUOTA_NEVER_ENOUGH, C.UNTOLERATED_TAINT)
#: What no cycle can change (only nodes joining, or a new contract): no start to forecast, and a
#: StrictFIFO queue does not wait behind it.
NEVER_CODES = (*NEVER_PLACEABLE_CODES, C.QUOTA_NEVER_ENOUGH, C.LOCAL_QUEUE_GONE, C.UNTOLERATED_TAINT)


def render(code: ReasonCode, params: dict[str, Param]) -> str:
    """The sentence of a code with its parameters (and the clauses whose parameter is present)."""
    text = MESSAGES[code].format_map(params)
    for key, clause in CLAUSES.items():
        if key in params:
            text += clause.format_map(params)
    return text


class Reason(msgspec.Struct, frozen=True, gc=False):
    """A reason as data: its code and parameters; ``message`` is their sentence."""

    code: ReasonCode
    params: dict[str, Param] = {}

    @property
    def message(self) -> str:
        return render(self.code, self.params)

    def plus(self, **params: Param | None) -> Reason:
        """The same reason with more parameters (None values are left out)."""
        return Reason(self.code, {**self.params, **{k: v for k, v in params.items() if v is not None}})


def reason(code: ReasonCode, **params: Param | None) -> Reason:
    """A reason with the given parameters (None values are left out: their clause is not said)."""
    return Reason(code, {k: v for k, v in params.items() if v is not None})


def sentence(event) -> str:
    """An event's reason in words as readers show it: rendered from its code and parameters when it
    has a code (what the auditor checks; a recorded sentence that is not their rendering is never
    shown as fact), the recorded sentence for an event written before reasons were codes."""
    code = getattr(event, "reason_code", None)
    if code is None:
        return event.reason
    try:
        return render(code, event.reason_params)
    except (KeyError, IndexError, ValueError):
        return f"[{code}: its parameters do not fill its sentence]"


def said(why: Reason) -> dict:
    """The fields a decision event carries for a reason: ``reason``, ``reason_code``, ``reason_params``."""
    return {"reason": why.message, "reason_code": why.code, "reason_params": why.params}
