"""The idle-GPU hunt (pure): flag running workloads whose GPUs sit idle under the contract's rule.

The fold keeps each running workload's mean SM activity (``DCGM_FI_PROF_SM_ACTIVE``) from the
telemetry on the log and since when it has been below the rule's threshold; a workload below it
for the rule's whole window is flagged with a ``WorkloadIdle`` decision (accounting's shell
appends it; the auditor re-derives it like any decision). With the contract's ``preemptFirst``,
preemption takes idle borrowers first and says so in the eviction's reason.
"""

from __future__ import annotations

from gangway.events import money
from gangway.events.catalogue import WorkloadIdle
from gangway.events.state import State


def decide_idle(state: State) -> list[WorkloadIdle]:
    rule = state.contract.idle_rule if state.contract is not None else None
    if rule is None:
        return []
    flags = []
    for name in state.active:
        wl = state.workloads[name]
        if wl.phase != "running" or wl.idle is not None or wl.low_since_ms is None:
            continue
        if state.time_ms - wl.low_since_ms < rule.for_ms:
            continue
        mean = money.mean_sm(wl) or 0
        flags.append(WorkloadIdle(
            workload=name, attempt=wl.attempt, based_on=state.offset, rule=rule.words(), sm_active=mean,
            since_ms=wl.low_since_ms, gpu_milli=money.gpu_milli(wl),
            reason=f"{rule.words()}: SM active {mean / 10:g} % since t={wl.low_since_ms} ms",
        ))
    return flags
