"""Usage-based fair share (Slurm's PriorityDecayHalfLife, KAI's time-based fairshare): pure.

With ``fair_sharing.usage_half_life_ms`` set, each ClusterQueue carries an exponentially weighted
average of what it used (per flavor-resource, milli units), halving the weight of the past every
half-life. Fair-sharing order then counts a queue's usage as the larger of now and that average:
a team that just ran a large burst waits behind one that did not, even once its burst is over.

The fold brings the average up to date whenever the queue's usage changes (usage is constant in
between, so the update is exact); readers extrapolate it to the state's time. Integers throughout
(rounded), so every replay computes the same shares.
"""

from __future__ import annotations

from gangway.events.state import State


def _kept(elapsed_ms: int, half_life_ms: int) -> float:
    return 0.5 ** (elapsed_ms / half_life_ms)


def average_at(state: State, queue: str, now_ms: int) -> dict[str, int]:
    """The queue's decayed average usage per flavor-resource at ``now_ms``."""
    half_life = state.contract.fair_sharing.usage_half_life_ms if state.contract else None
    if not half_life:
        return {}
    past = state.usage_average.get(queue, {})
    current = state.usage.get(queue, {})
    kept = _kept(max(0, now_ms - state.usage_average_ms.get(queue, now_ms)), half_life)
    return {fr: round(past.get(fr, 0) * kept + current.get(fr, 0) * (1 - kept)) for fr in sorted({*past, *current})}


def bring_up_to_date(state: State, queue: str) -> None:
    """Fold the time since the last change into the average (call before the usage changes)."""
    if not state.contract or not state.contract.fair_sharing.usage_half_life_ms:
        return
    state.usage_average[queue] = {fr: v for fr, v in average_at(state, queue, state.time_ms).items() if v}
    state.usage_average_ms[queue] = state.time_ms


def averages(state: State) -> dict[str, dict[str, int]]:
    """Every queue's decayed average at the state's time ({} when usage decay is off)."""
    if not state.contract or not state.contract.fair_sharing.usage_half_life_ms:
        return {}
    queues = sorted({*state.usage, *state.usage_average})
    return {q: average_at(state, q, state.time_ms) for q in queues}
