"""`gangway dry-run`: a contract, a cluster and jobs, decided offline on a simulated cluster.

What a platform team asks before it publishes rules, and what a user asks before submitting: where
would these jobs go, which would wait and why, and when would they start? No broker and no service:
the services' own ``decide`` functions run on a simulated clock (``gangway.sim``), the binder's part
played by the simulation (each pod runs for the job's declared runtime). Each job goes through the
submission service's checks, so one it would refuse is refused here, with the same reason. The log it
makes is an ordinary log: ``--export`` writes it for ``gangway explain --log`` and ``gangway replay``,
followed by the run's rejections (JobRejected, as ``gangway.rejections`` would hold them), so
``explain --log`` tells a refused job's reason too. A manifest that cannot be read is refused on its
own, as a job the submission service refuses: the other jobs of its file, and the run, go on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gangway.events.catalogue import ClockTicked, Envelope, JobRejected
from gangway.events.codec import format_time
from gangway.events.contract import Contract
from gangway.events.reasons import C
from gangway.read.explain import pending_report, standing_lines
from gangway.services.binder.cluster import read_cluster_file
from gangway.services.submission.manifests import ManifestError, iter_jobs
from gangway.services.submission.policy import Invalid, check_record_size, queue_job, workload_id
from gangway.sim import Simulation


class DryRunError(ValueError):
    """A dry run asked for something it cannot do (a submission outside the simulated time)."""


@dataclass
class DryRun:
    """The run: its log, and per job what became of it (in the order the files give them)."""

    sim: Simulation
    started_ms: int
    #: (namespace/job — or "FILE: document N" for a manifest without a name —, its workload's name or
    #: None, why it was refused ("(reason): message") or "", when it was submitted).
    jobs: list[tuple[str, str | None, str, int]] = field(default_factory=list)
    #: What the manifests asked for that gangway does not act on (as ``gangway submit`` warns).
    unread: list[str] = field(default_factory=list)
    #: The files that hold no job at all.
    empty: list[str] = field(default_factory=list)
    #: Each refusal as the submission service writes it to gangway.rejections (offsets from 0).
    rejections: list[Envelope] = field(default_factory=list)


def dry_run(contract: Contract, cluster: str, job_files: list[str], horizon_s: float,
            later: list[tuple[float, str]] = ()) -> DryRun:
    """Configure, add the nodes, submit the jobs of ``job_files`` at time 0 and those of each
    ``later`` (seconds, file) that many seconds of cluster time after it, and run ``horizon_s`` of
    cluster time from the start (or until nothing is left to do). A job whose manifest cannot be
    read is refused on its own (``run.jobs``). Raises ClusterFileError, OSError for a file that
    cannot be read, and DryRunError for a submission time outside the run."""
    for at_s, path in later:
        if not 0 <= at_s <= horizon_s:
            raise DryRunError(f"--later {at_s:g} {path}: the time must be from 0 to the run's {horizon_s:g} s")
    nodes = read_cluster_file(cluster)
    sim = Simulation(start_ms=int(time.time()) * 1000)  # (from now: dates and forecasts read as today's)
    run = DryRun(sim, sim.now_ms)
    sim.configure(contract)
    sim.add_nodes(nodes)
    for at_s, path in sorted([(0.0, path) for path in job_files] + list(later), key=lambda item: item[0]):
        if at_s:
            sim.run(until_ms=run.started_ms + int(at_s * 1000))
        _submit(run, path)
    sim.run(until_ms=run.started_ms + int(horizon_s * 1000))
    if sim.state.pending and sim.state.time_ms < sim.now_ms:
        # The log's clock to the run's end, as the binder ticks it: what still waits is told its wait
        # and its forecast from there, not from the last event before.
        sim.append(f"tick/{sim.now_ms}", sim.now_ms, ClockTicked(reason="the dry run's end"), "gangway/binder")
        sim.run(until_ms=sim.now_ms)
    return run


def _submit(run: DryRun, path: str) -> None:
    """Every job of ``path``, through the submission service's checks, at the simulation's time."""
    sim = run.sim
    found = False
    for job in iter_jobs(Path(path).read_bytes(), path, on_unread=run.unread.append):
        found = True
        submission = f"{path}#{len(run.jobs)}"
        if isinstance(job, ManifestError):
            if job.name:  # (the message names the file and the document)
                name, message = f"{job.namespace}/{job.name}" if job.namespace else job.name, str(job)
            else:
                name, message = f"{path}: document {job.document}", f"{job.field}: " * bool(job.field) + job.problem
            _refuse(run, name, job.namespace, job.name, job.reason, message, b"", submission)
            continue
        name = workload_id(job)
        try:
            check_record_size(job)  # (the service reads the record before anything else)
            queued = queue_job(job, sim.state, {}, submission)
        except Invalid as bad:
            _refuse(run, name, job.namespace, job.job_id, bad.reason, bad.message, msgspec.json.encode(job), submission)
            continue
        sim.submit(queued)
        run.jobs.append((name, queued.workload, "", sim.now_ms))
    if not found:
        run.empty.append(path)


def _refuse(run: DryRun, name: str, namespace: str, job_id: str, reason: str, message: str, original: bytes,
            submission: str) -> None:
    run.jobs.append((name, None, f"({reason}): {message}", run.sim.now_ms))
    run.rejections.append(Envelope(
        id=f"reject/{submission}", source="gangway/submission", time_ms=run.sim.now_ms, offset=len(run.rejections),
        data=JobRejected(job_id=job_id, namespace=namespace, reason=reason, message=message, original=original,
                         submission=submission)))


def report(run: DryRun) -> list[str]:
    """Per job: refused, or its course on the simulated clock (times from the start), and for one
    still waiting at the end, ``gangway explain``'s account of why and its forecast (one
    ``pending_report`` for all of them)."""
    state, lines = run.sim.state, [f"no jobs in {path}" for path in run.empty]
    reports = pending_report(state) if state.pending else {}
    for name, workload, refused, submitted_ms in run.jobs:
        later = f" at {_since(run, submitted_ms)}" if submitted_ms > run.started_ms else ""
        if refused:
            lines.append(f"{name}: rejected{later} {refused}")
            continue
        wl = state.workloads[workload]
        course = [f"submitted{later}"] if later else []
        course += [f"evicted {wl.attempt} time{'s' if wl.attempt > 1 else ''}"] if wl.attempt else []
        course += [f"{what} at {_since(run, at)}" for what, at in (
            ("admitted", wl.admitted_ms), ("started", wl.started_ms), ("finished", wl.finished_ms)) if at is not None]
        if wl.admission is not None and wl.admission.counts:  # admitted smaller (job-min-parallelism)
            sizes = {ps.name: ps.count for ps in wl.spec.pod_sets}
            course.insert(0, "; ".join(f"{n} of {sizes.get(ps, n)} pods of {ps}" for ps, n in sorted(wl.admission.counts.items())))
        nodes = sorted({a.node for a in wl.placement.assignments}) if wl.placement is not None else []
        where = f" on {', '.join(nodes)}" if nodes else ""
        phase = f"deactivated [{wl.deactivated_code or C.BIND_FAILURES_EXCEEDED}]" if wl.deactivated else wl.phase
        lines.append(f"{name}: {phase}{where}" + (f" ({'; '.join(course)})" if course else ""))
        if wl.phase == "pending":
            lines += [f"    {line}" for line in standing_lines(run.sim.log, state, workload, reports)]
    last = run.sim.log[-1].time_ms
    lines.append(f"{len(run.sim.log)} events from {format_time(run.started_ms)}, the last at {_since(run, last)}"
                 + (f"; simulated up to {_since(run, run.sim.now_ms)}" if last < run.sim.now_ms and any(
                     wl.phase != "finished" for wl in state.workloads.values()) else ""))
    return lines


def _since(run: DryRun, at_ms: int) -> str:
    """Seconds from the start, as many digits as it has (never 2.52308e+06)."""
    return f"+{(at_ms - run.started_ms) / 1000:.3f}".rstrip("0").rstrip(".") + " s"
