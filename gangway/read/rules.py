"""The published contract: what each team is guaranteed and risks, in words a team lead reads.

``sections(contract)`` turns the contract into headed lists of sentences (each preemption rule with
the reason code under which the log records it); ``as_text`` and
``as_html`` render them (``gangway rules [--html]``). Everything is derived from the contract the
services enforce, so the published rules cannot drift from the enforced ones.
"""

from __future__ import annotations

import html

from gangway.events.contract import WEIGHT_ONE, Backfill, ClusterQueue, Contract, FlavorQuotas, LabelSelector, PodsReady, Toleration
from gangway.events.resources import GPU
from gangway.events.state import GPU_MODEL_LABEL
from gangway.events.quantity import format_resource
from gangway.events.quota import QuotaStructure
from gangway.events.reasons import C, ReasonCode

Section = tuple[str, list[str]]


def sections(contract: Contract, digest: str = "") -> list[Section]:
    tree = QuotaStructure(contract)
    out: list[Section] = [("The scheduling contract", _overview(contract, digest))]
    for cq in sorted(contract.cluster_queues, key=lambda q: q.name):
        out.append((f"Team queue {cq.name}", _queue(contract, tree, cq)))
    if contract.cohorts or any(cq.cohort for cq in contract.cluster_queues):
        out.append(("Cohorts: who shares with whom", _cohorts(contract, tree)))
    out.append(("Priorities, grace periods and minimum runtimes", _classes(contract)))
    if contract.flavors:
        out.append(("Flavors: the nodes each one places on", _flavors(contract)))
    out.append(("Topology: where a gang's pods land together", _topology(contract)))
    if contract.prices:
        out.append(("Prices", [f"{p.flavor} {format_resource(p.resource, 1000)}: "
                               f"{p.per_hour_micros / 1e6:.4g} {contract.currency} per hour" for p in contract.prices]
                    + _billing(contract)))
    if contract.idle_rule is not None:
        rule = contract.idle_rule
        out.append(("Idle GPUs", [f"A running workload whose GPUs show {rule.words()} is flagged idle "
                                  "(DCGM's SM activity, averaged over its GPUs).",
                                  "Idle borrowers are the first to be preempted when someone needs the GPUs."
                                  if rule.preempt_first else "The flag is shown in status, explain and showback; "
                                  "it does not change who is preempted."]))
    return out


def _flavors(contract: Contract) -> list[str]:
    """Each flavor's nodes (its node labels) and the taints its pods tolerate there."""
    lines = []
    for f in sorted(contract.flavors, key=lambda f: f.name):
        nodes = ("nodes labelled " + ", ".join(f"{k}={v}" for k, v in sorted(f.node_labels.items()))
                 if f.node_labels else "any node")
        line = f"Flavor {f.name}: {nodes}"
        if f.keeping_off:
            line += "; its nodes carry " + ", ".join(map(str, f.keeping_off)) + \
                ": a job is assigned it only if its pods tolerate them, with the flavor's tolerations" + \
                _codes(C.UNTOLERATED_TAINT)
        if f.tolerations:
            line += "; its pods tolerate " + ", ".join(_toleration_words(t) for t in f.tolerations) + \
                " (on Kubernetes the binder adds them to its pod templates, as Kueue does)"
        lines.append(line + ".")
    lines.append("A pod also goes only where its own nodeSelector, required node affinity and tolerations let it.")
    return lines


def _toleration_words(t: Toleration) -> str:
    what = (t.key or "every taint") if t.operator == "Exists" else f"{t.key}={t.value}"
    return what + (f":{t.effect}" if t.effect else "")


def _topology(contract: Contract) -> list[str]:
    """Which levels a job may ask its pods to share (Kueue's TAS annotations), flavor by flavor."""
    levels = {t.name: t.levels for t in contract.topologies}
    lines = [f"Flavor {f.name} places gangs by Topology {f.topology_name}: "
             f"{' within '.join(reversed(levels[f.topology_name]))}." for f in sorted(contract.flavors, key=lambda f: f.name)
             if f.topology_name in levels]
    if len(lines) < len(contract.flavors) or not contract.flavors:
        lines.append(("On other flavors a" if lines else "A") + " level is any node label: the nodes carrying one "
                     "value of it are one domain; kubernetes.io/hostname is the node itself.")
    lines.append("A job may require (kueue.x-k8s.io/podset-required-topology) or prefer "
                 "(-preferred-topology) that each pod set's pods share one domain of a level, or come in slices "
                 "that do (-slice-required-topology, -slice-size); a preferred level falls back to coarser "
                 "levels, then to as few domains of the coarsest as hold it, then anywhere.")
    lines.append("A job requiring a label no node of the cluster carries is refused when it is submitted; a "
                 "requirement no domain could meet even with nothing running (the domains of its flavor's nodes "
                 "too small, say) is named as such while it waits, never forecast a start, and holds no queue back"
                 f"{_codes(C.TOPOLOGY_UNSATISFIABLE)}.")
    return lines


def _billing(contract: Contract) -> list[str]:
    b = contract.billing
    sharing = {"weighted": "shared by each team's cost", "even": "shared evenly among the teams billed",
               "apart": "kept apart (not on the teams' invoices)"}[b.idle_cost]
    lines = [f"Invoices are cut {b.period} (UTC), {b.settle_ms / 1000:g} s after each period ends, on the log's clock.",
             f"The cost of GPUs nobody held is {sharing}.",
             "A workload pays for what was admitted, from when it runs to when it ends; memory is priced per GiB-hour."]
    if b.credit_preemption_waste:
        lines.append("Work lost to preemption, or with a node that left the cluster or was taken out of service "
                     "under it, is credited back to the team that lost it.")
    return lines


def _overview(contract: Contract, digest: str) -> list[str]:
    queues, flavors = len(contract.cluster_queues), len(contract.flavors)
    lines = [f"{queues} team queue{'s' * (queues != 1)}, {flavors} resource flavor{'s' * (flavors != 1)}."]
    if digest:
        lines.append(f"Contract version {digest[:12]}: every decision on the log names the offset of the state it "
                     "was decided on, and so the contract version in force there.")
    lines.append("A job runs whole or not at all: all of its pods are admitted and placed together.")
    lines.append(_requeue_words(contract))
    if contract.no_preemption_back:
        proxy = (" Nor for a job that a job waiting ahead of it in its own queue could preempt at once and replace, "
                 "where one of those preempted could take that one's place back." if contract.no_proxy_preemption else "")
        if contract.no_preemption_undone:
            proxy += (" Nor for a job that, once in, a job waiting in another queue of its cohort could preempt at "
                      "once by that queue's rules.")
        lines.append("No job is preempted where one of the jobs preempted with it, back in its queue, could preempt "
                     "the preemptor at once (as Kueue's fair sharing and borrowWithinCohort can, when several jobs "
                     f"of one queue go): the preemptor waits for work to end instead.{proxy}")
    if contract.moved_first:
        lines.append("A job moved to make room for a gang blocked by scattered free GPUs keeps its quota and a place "
                     "while it leaves, and is placed again at once, right behind that gang"
                     f"{_codes(C.DEFRAGMENTATION)}.")
    if contract.model_reserve and any(GPU_MODEL_LABEL in f.node_labels for f in contract.flavors):
        lines.append("A job that may use several GPU models keeps off a model whose free GPUs are down to what the "
                     "jobs that may use only that model will need (their share of the GPUs asked lately, times the "
                     "GPUs free), while another model has room.")
    if contract.pods_ready is not None:
        lines.append(_pods_ready_words(contract.pods_ready))
    fs = contract.fair_sharing
    if fs.enable:
        decay = (f" Past usage counts too, halving every {fs.usage_half_life_ms / 3_600_000:g} h."
                 if fs.usage_half_life_ms else "")
        lines.append("Fair sharing is on: idle quota goes first to the team furthest below its weighted share; "
                     f"a team above its share may be preempted ({', '.join(fs.preemption_strategies)})"
                     f"{_codes(C.FAIR_SHARING)}.{decay}")
    if contract.checkpoint_aware:
        lines.append("When several workloads could be preempted, the one that loses least work since its "
                     "last checkpoint goes first.")
    return lines


def _requeue_words(contract: Contract) -> str:
    """Where a job ordered out goes back in its queue (``fold._keeps_place``)."""
    said = "A job preempted (or drained) goes back to its queue "
    if not contract.requeue_in_place:
        return said + "behind the jobs queued before its eviction."
    said += "where it was, ahead of the jobs queued after it (as Kueue orders a queue)"
    if contract.fair_sharing.enable:
        return said + "; one preempted for fair sharing, behind the jobs queued before its eviction."
    return said + "."


def _pods_ready_words(ready: PodsReady) -> str:
    """Kueue's waitForPodsReady as the contract sets it (the Kubernetes binder's flags, given, win)."""
    limit = (f"after {ready.backoff_limit} in a row it is deactivated" if ready.backoff_limit
             else "it is never deactivated for it")
    recovery = (f"so does a running gang short of a pod for {ready.recovery_timeout_ms / 1000:g} s"
                if ready.recovery_timeout_ms else "a running gang short of a pod is left to its controller")
    return (f"On Kubernetes, a bound gang whose pods are not all running {ready.timeout_ms / 1000:g} s after its "
            f"admission gives its nodes back and waits {ready.backoff_base_ms / 1000:g} s, doubling with each time in "
            f"a row up to {ready.backoff_max_ms / 1000:g} s, before it is admitted again ({limit}), "
            f"{'where it was in its queue' if ready.requeue_from_creation else 'behind the jobs queued before then'}; "
            f"{recovery} "
            f"(Kueue's waitForPodsReady){_codes(C.BIND_BACKOFF, C.BIND_FAILURES_EXCEEDED)}.")


def _holds_words(backfill: Backfill) -> str:
    """How many jobs that quota keeps out have quota held for them (``Backfill``)."""
    n = backfill.quota_holds_per_tree
    if n == 0:
        return "no quota is held for a job its cohort's quota keeps out (whatever fits goes first)"
    return (("the first job its cohort's quota keeps out has" if n == 1 else
             f"the first {n} jobs its cohort's quota keeps out (each cycle) have")
            + " the quota that frees soonest held against jobs of lower priority")


def _aging_words(ms_per_point: int) -> str:
    """Priority aging (``Contract.aging_ms_per_point``) in words."""
    return (f"A waiting job's priority rises one point for each {ms_per_point / 1000:g} s it has waited, in the order "
            f"jobs are admitted (and quota held) only: a job never waits behind one of higher priority queued more "
            f"than {ms_per_point / 1000:g} s a point of difference after it. Who may preempt whom stays by priority, "
            f"and a job let in ahead by its age is not preempted for one it outranked.")


#: How a queue gets back what it lent, by its reclaimWithinCohort policy.
_TAKES_BACK = {"Never": "gets it back as the borrowers' jobs end (it preempts none of them)",
               "LowerPriority": "takes it back when it needs it by preempting the borrowers' lower-priority jobs "
                                "(the others it waits for)",
               "Any": "takes it back by preemption when it needs it"}


def _flavor_words(fq: FlavorQuotas, cohort: str | None, reclaim: str = "Any") -> str:
    """One sentence per flavor: the guarantee, then borrowing and lending, grouped where they agree."""
    items = sorted(fq.resources.items(), key=lambda item: (item[0] != GPU, item[0]))
    said = f"Flavor {fq.flavor}: {', '.join(format_resource(r, q.nominal) for r, q in items)} guaranteed"
    if not cohort:
        return said + "; no cohort, so it neither borrows nor lends."
    borrow: dict[str, list[str]] = {}
    for r, q in items:
        if q.borrowing_limit is None:
            key = f"may borrow whatever cohort {cohort} leaves unused of"
        elif q.borrowing_limit == 0:
            key = "never borrows"
        else:
            key = "may borrow at most"
            r = format_resource(r, q.borrowing_limit)
        borrow.setdefault(key, []).append(r)
    for key, what in borrow.items():
        said += f"; {key}" + ("" if key == "never borrows" and len(borrow) == 1 else f" {', '.join(what)}")
    limited = [(r, q) for r, q in items if q.lending_limit is not None]
    if limited:
        said += "; lends at most " + ", ".join(format_resource(r, q.lending_limit) for r, q in limited)
        said += " (keeping the rest for itself at all times)"
    else:
        said += f"; lends whatever it does not use, and {_TAKES_BACK[reclaim]}"
    return said + "."


def _queue(contract: Contract, tree: QuotaStructure, cq: ClusterQueue) -> list[str]:
    lines = _stop_words("It", cq.stop_policy)
    mine = sorted((lq for lq in contract.local_queues if lq.cluster_queue == cq.name), key=lambda lq: (lq.namespace, lq.name))
    teams = [f"{lq.namespace}/{lq.name}" for lq in mine]
    if teams:
        lines.append(f"Jobs arrive through LocalQueue{'s' if len(teams) > 1 else ''} {', '.join(teams)}.")
    for lq, team in zip(mine, teams):
        lines.extend(_stop_words(f"LocalQueue {team}", lq.stop_policy))
    lines.extend(_namespace_words(contract, cq, teams))
    lines.extend(_flavor_words(fq, cq.cohort, cq.preemption.reclaim_within_cohort) for fq in cq.flavors)
    if len(cq.flavors) > 1:
        fung = cq.flavor_fungibility
        lines.append("Flavors are tried in the order listed"
                     + ("; a later flavor that fits without borrowing is preferred to borrowing"
                        if fung.when_can_borrow == "TryNextFlavor" else "")
                     + ("; it waits for preemption in the first flavor where someone may be preempted to "
                        "make room" if fung.when_can_preempt == "MayStopSearch" else "") + ".")
    lines.append("Jobs are admitted strictly in order: a job that does not fit blocks those behind it (one that can "
                 "never fit is set aside)" + _codes(C.STRICT_FIFO) + "." if cq.queueing_strategy == "StrictFIFO" else
                 "Jobs are admitted by priority, then age; a job that does not fit lets smaller ones pass, "
                 f"but {_holds_words(contract.backfill)}, and "
                 "a gang that fits its quota and waits for busy nodes has the nodes that free soonest kept (only jobs that end "
                 "in time, or leave it room, use them; another queue's jobs within their nominal quota are not held "
                 "back)" + _codes(C.QUOTA_HELD_FOR_ANOTHER, C.RESERVATION_HELD, C.RESERVED_FOR_ANOTHER_GANG) + ".")
    if contract.backfill.hand_over_within_ms:
        lines.append("A job quota keeps out is admitted ahead to take over from running work expected to end within "
                     f"{contract.backfill.hand_over_within_ms} ms: its pods start as that work ends.")
    if contract.aging_ms_per_point:
        lines.append(_aging_words(contract.aging_ms_per_point))
    lines.extend(_preemption_words(cq, contract.fair_sharing.enable))
    if contract.fair_sharing.enable:
        lines.append(f"Fair-sharing weight {cq.fair_weight / 1000:g}.")
    elif cq.fair_weight != WEIGHT_ONE:
        lines.append(f"Fair-sharing weight {cq.fair_weight / 1000:g} is set, but has no effect while fair sharing is "
                     "off (the SchedulingPolicy's fairSharing.enable).")
    return lines


def _stop_words(who: str, policy: str) -> list[str]:
    """A queue stopped by its stopPolicy, in words ([] when it is not)."""
    if policy == "None":
        return []
    said = f"{who} is stopped (stopPolicy {policy}): it admits nothing new" + _codes(C.QUEUE_STOPPED)
    if policy == "HoldAndDrain":
        said += "; what it admitted is ordered out, with its class's grace period" + _codes(C.QUEUE_DRAINED)
    return [said + ", until a contract sets its stopPolicy to None."]


def _namespace_words(contract: Contract, cq: ClusterQueue, teams: list[str]) -> list[str]:
    """Which namespaces the queue admits jobs from (its namespaceSelector), and which of its
    LocalQueues sit in a namespace it does not admit."""
    selector = cq.namespace_selector
    if selector is None:
        return ["It has no namespaceSelector: jobs from every namespace are admitted (Kueue admits none; "
                "namespaceSelector: {} says every namespace)."]
    if not selector.match_labels and not selector.match_expressions:
        return []
    lines = [f"Jobs are admitted only from namespaces with {_selector_words(selector)} (its namespaceSelector); "
             "others are refused [namespace_not_selected]."]
    shut = [team for team in teams if not contract.selects_namespace(cq, team.partition("/")[0])]
    if shut:
        lines.append(f"LocalQueue{'s' if len(shut) > 1 else ''} {', '.join(shut)} {'are' if len(shut) > 1 else 'is'} in "
                     f"{'namespaces' if len(shut) > 1 else 'a namespace'} it does not select: "
                     f"{'their' if len(shut) > 1 else 'its'} jobs are refused.")
    return lines


def _selector_words(selector: LabelSelector) -> str:
    said = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for req in selector.match_expressions:
        said.append({"In": f"{req.key} in ({', '.join(req.values)})",
                     "NotIn": f"{req.key} not in ({', '.join(req.values)})",
                     "Exists": f"the label {req.key}",
                     "DoesNotExist": f"no label {req.key}"}[req.operator])
    return ", ".join(said)


def _codes(*codes: ReasonCode) -> str:
    """The reason codes under which the log records what a rule does."""
    return " [" + ", ".join(codes) + "]"


def _preemption_words(cq: ClusterQueue, fair: bool = False) -> list[str]:
    """Whom its jobs may preempt; ``fair``: fair sharing is on, and decides across the cohort in place
    of reclaimWithinCohort and borrowWithinCohort (Kueue's classical preemption)."""
    p = cq.preemption
    lines = []
    within = {"Never": "never preempts its own jobs",
              "LowerPriority": "preempts its own lower-priority jobs" + _codes(C.WITHIN_QUEUE_LOWER_PRIORITY),
              "LowerOrNewerEqualPriority": "preempts its own lower-priority jobs, and newer ones of equal priority"
                                           + _codes(C.WITHIN_QUEUE_LOWER_PRIORITY, C.WITHIN_QUEUE_NEWER_EQUAL_PRIORITY)}
    lines.append(f"Within the queue, a waiting job {within[p.within_cluster_queue]}.")
    if cq.cohort and fair:
        lines.append(f"Across cohort {cq.cohort}, fair sharing decides whose jobs it may preempt (the queues furthest "
                     f"above their share first){_codes(C.FAIR_SHARING)}; reclaimWithinCohort and borrowWithinCohort "
                     "are Kueue's classical preemption and do not apply.")
    elif cq.cohort:
        reclaim = {"Never": "does not take back",
                   "LowerPriority": "takes back, by preempting lower-priority jobs,",
                   "Any": "takes back, by preempting any of their jobs,"}
        lines.append(f"When it needs its guarantee, it {reclaim[p.reclaim_within_cohort]} the quota other queues "
                     f"of cohort {cq.cohort} borrowed from it"
                     f"{'' if p.reclaim_within_cohort == 'Never' else _codes(C.RECLAIM_WITHIN_COHORT)}.")
        bwc = p.borrow_within_cohort
        if bwc.policy == "LowerPriority":
            limit = f" of priority at most {bwc.max_priority_threshold}" if bwc.max_priority_threshold is not None else ""
            lines.append(f"To borrow, it may preempt lower-priority jobs{limit} of borrowing queues in its cohort"
                         f"{_codes(C.BORROW_WITHIN_COHORT)}.")
    return lines


def _cohorts(contract: Contract, tree: QuotaStructure) -> list[str]:
    lines = []
    for name in sorted(tree.cohorts):
        node = tree.cohorts[name]
        members = [c.name for c in node.children]
        own = ", ".join(f"{format_resource(fr.partition(':')[2], v)} ({fr.partition(':')[0]})"
                        for fr, v in sorted(node.nominal.items()))
        pool = ", ".join(f"{format_resource(fr.partition(':')[2], v)} ({fr.partition(':')[0]})"
                         for fr, v in sorted(node.subtree.items()))
        line = f"Cohort {name}" + (f" (inside {node.parent})" if node.parent else "")
        line += f": {', '.join(members) or 'no members'}; shares {pool or 'nothing'}"
        if own:
            line += f", of which {own} is the cohort's own"
        borrow = _amounts((fr, limit) for fr, limit in sorted(node.borrowing_limit.items()) if limit is not None)
        if borrow:
            line += f"; its queues may borrow at most {borrow} from {node.parent} between them"
        lend = _amounts((fr, limit) for fr, limit in sorted(node.lending_limit.items()) if limit is not None)
        if lend:
            line += f"; it lends at most {lend} to {node.parent} (keeping the rest for its queues at all times)"
        if node.weight != WEIGHT_ONE:
            line += (f"; fair-sharing weight {node.weight / 1000:g}" if contract.fair_sharing.enable else
                     f"; fair-sharing weight {node.weight / 1000:g} is set, but has no effect while fair sharing is off")
        lines.append(line + ".")
    return lines


def _amounts(limits) -> str:
    """"6 nvidia.com/gpu (h100), 0 cpu (h100)" from (flavor-resource key, amount) pairs."""
    return ", ".join(f"{format_resource(fr.partition(':')[2], v)} ({fr.partition(':')[0]})" for fr, v in limits)


def _classes(contract: Contract) -> list[str]:
    default = ("the cluster's globalDefault PriorityClass's value "
               f"({contract.default_priority} without one)" if contract.default_priority_from_cluster
               else contract.default_priority)
    lines = [f"A job without a priority class has priority {default}; evicted pods get "
             f"{contract.default_grace_ms / 1000:g} s between SIGTERM and SIGKILL unless their class says otherwise."]
    for pc in sorted(contract.priority_classes, key=lambda p: -p.value):
        said = f"{pc.name}: priority {pc.value}"
        if pc.grace_ms is not None:
            said += f"; {pc.grace_ms / 1000:g} s grace when preempted"
        if pc.min_runtime_ms:
            said += f"; never preempted in its first {pc.min_runtime_ms / 1000:g} s"
        lines.append(said + ".")
    if contract.pod_priority_classes:
        named = ", ".join(f"{pc.name} {pc.value}" + (" (the default)" if pc.global_default else "")
                          for pc in sorted(contract.pod_priority_classes, key=lambda p: -p.value))
        lines.append(f"Kubernetes PriorityClasses: {named}. A job without the kueue.x-k8s.io/priority-class label "
                     "has the priority of the first of its pod templates' priorityClassName, as in Kueue; one the "
                     "contract does not hold is refused [unknown_priority_class].")
    return lines


def as_text(parts: list[Section]) -> str:
    out = []
    for title, lines in parts:
        out += [title, "=" * len(title) if not out else "-" * len(title)]
        out += [f"- {line}" for line in lines] + [""]
    return "\n".join(out)


def as_html(parts: list[Section]) -> str:
    body = []
    for i, (title, lines) in enumerate(parts):
        tag = "h1" if i == 0 else "h2"
        body.append(f"<{tag}>{html.escape(title)}</{tag}>")
        body.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
    style = "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;line-height:1.5}"
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Scheduling contract</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
