"""A ResourceFlavor's ``nodeTaints`` (Kueue's): a workload is assigned a flavor only when each of its
pod sets, with the flavor's own tolerations, tolerates the flavor's NoSchedule and NoExecute taints —
whatever taints the nodes themselves show (a simulated cluster, or nodes tainted later)."""

from __future__ import annotations

import msgspec
import pytest

from builders import cluster_queue, contract, line_of, node, workload
from gangway.events.contract import Taint, Toleration
from gangway.read import rules
from gangway.read.explain import explain
from gangway.sim import Simulation

SPOT = Taint(key="spot", value="true", effect="NoSchedule")


def tolerating(wq, *tolerations: Toleration):
    """``wq`` (a WorkloadQueued) with every pod set tolerating ``tolerations``."""
    return msgspec.structs.replace(wq, pod_sets=[msgspec.structs.replace(ps, tolerations=list(tolerations))
                                                 for ps in wq.pod_sets])


def cluster(c, nodes_per_flavor: int = 1) -> Simulation:
    """Nodes labelled for flavors spot and on-demand, without any taint of their own."""
    sim = Simulation()
    sim.configure(c.flavor_labels("spot", {"pool": "spot"}).flavor_labels("on-demand", {"pool": "on-demand"}).obj())
    sim.add_nodes([node(f"{pool}-{i}").gpus(8).label("pool", pool).obj()
                   for pool in ("spot", "on-demand") for i in range(nodes_per_flavor)])
    return sim


def run(sim: Simulation, *workloads) -> None:
    for wq in workloads:
        sim.submit(wq)
    sim.run(until_ms=sim.now_ms + 1000, rounds_max=50)


def flavor_of(sim: Simulation, name: str) -> str | None:
    wl = sim.state.workloads[name]
    return wl.admission.flavors.get("nvidia.com/gpu") if wl.admission is not None else None


def test_a_workload_that_does_not_tolerate_the_first_flavors_taint_is_assigned_the_next():
    sim = cluster(contract(cluster_queue("q").flavor("spot").gpus(8).flavor("on-demand").gpus(8))
                  .flavor_taints("spot", SPOT))
    run(sim, workload("plain").queue("q").gpus(4).obj(),
        tolerating(workload("tolerant").queue("q").gpus(4).obj(), Toleration(key="spot", operator="Exists")))
    assert flavor_of(sim, "plain") == "on-demand"  # on the old code: spot, whose nodes show no taint
    assert flavor_of(sim, "tolerant") == "spot"
    assert {a.node for a in sim.state.workloads["plain"].placement.assignments} == {"on-demand-0"}


@pytest.mark.parametrize("toleration, admitted", [
    pytest.param(Toleration(key="spot", value="true", effect="NoSchedule"), True, id="key, value and effect"),
    pytest.param(Toleration(key="spot", value="false"), False, id="another value"),
    pytest.param(Toleration(key="spot", operator="Exists", effect="NoExecute"), False, id="another effect"),
    pytest.param(Toleration(operator="Exists"), True, id="Exists without a key: every taint"),
])
def test_kubernetes_toleration_rules_decide(toleration, admitted):
    sim = cluster(contract(cluster_queue("q").flavor("spot").gpus(8)).flavor_taints("spot", SPOT))
    run(sim, tolerating(workload("w").queue("q").gpus(2).obj(), toleration))
    assert (flavor_of(sim, "w") == "spot") is admitted


def test_the_flavors_own_tolerations_count_and_a_prefer_no_schedule_taint_keeps_nobody_off():
    sim = cluster(contract(cluster_queue("q").flavor("spot").gpus(8).flavor("on-demand").gpus(8))
                  .flavor_taints("spot", SPOT).flavor_tolerations("spot", Toleration(key="spot", operator="Exists"))
                  .flavor_taints("on-demand", Taint(key="slow", effect="PreferNoSchedule")))
    run(sim, workload("w").queue("q").gpus(8).obj(), workload("v").queue("q").gpus(8).obj())
    assert (flavor_of(sim, "w"), flavor_of(sim, "v")) == ("spot", "on-demand")


def test_a_gang_one_pod_set_of_which_does_not_tolerate_the_taint_is_not_assigned_the_flavor():
    wq = workload("g").queue("q").pod_set("driver", 1, gpus=1).pod_set("workers", 2, gpus=2).obj()
    wq = msgspec.structs.replace(wq, pod_sets=[msgspec.structs.replace(wq.pod_sets[0], tolerations=[
        Toleration(key="spot", operator="Exists")]), wq.pod_sets[1]])
    sim = cluster(contract(cluster_queue("q").flavor("spot").gpus(8).flavor("on-demand").gpus(8))
                  .flavor_taints("spot", SPOT))
    run(sim, wq)
    assert flavor_of(sim, "g") == "on-demand"


def test_a_workload_no_flavor_tolerates_is_told_so_never_forecast_and_holds_no_strict_queue_back():
    """Only spot: the untolerating workload waits with its own reason naming the pod set, flavor and
    taint, is forecast never, and the StrictFIFO queue admits the tolerating one behind it."""
    sim = cluster(contract(cluster_queue("q").strict_fifo().flavor("spot").gpus(8)).flavor_taints("spot", SPOT))
    run(sim, workload("plain").queue("q").gpus(2).obj())
    run(sim, tolerating(workload("tolerant").queue("q").gpus(2).obj(), Toleration(key="spot", operator="Exists")))
    assert sim.state.workloads["plain"].phase == "pending"
    assert flavor_of(sim, "tolerant") == "spot"
    lines = explain(sim.log, "plain")
    assert lines[-3] == ("now pending (untolerated_taint): no flavor of q for nvidia.com/gpu (spot) may take it: pod "
                         "set main does not tolerate flavor spot's node taint spot=true:NoSchedule (spec.nodeTaints)"), lines
    assert lines[-1] == ("estimated start: never, unless it tolerates the taint or the contract gives q a flavor it "
                         "tolerates"), lines


def test_the_rules_say_which_taints_a_flavors_nodes_carry():
    c = (contract(cluster_queue("q").flavor("spot").gpus(8)).flavor_labels("spot", {"pool": "spot"})
         .flavor_taints("spot", SPOT, Taint(key="slow", effect="PreferNoSchedule")).obj())
    text = rules.as_text(rules.sections(c))
    assert ("Flavor spot: nodes labelled pool=spot; its nodes carry spot=true:NoSchedule: a job is assigned it only "
            "if its pods tolerate them, with the flavor's tolerations [untolerated_taint].") in text


def test_a_gang_another_flavor_cannot_take_either_is_told_which_flavor_its_taints_passed_over():
    """spot (16 GPUs, tainted) then on-demand (8): a 2 × 8-GPU gang not tolerating spot is told
    on-demand's reason, and that spot was passed over for its taint (else "never enough" would read
    as if the queue had no more)."""
    sim = cluster(contract(cluster_queue("q").flavor("spot").gpus(16).flavor("on-demand").gpus(8))
                  .flavor_taints("spot", SPOT), nodes_per_flavor=2)
    run(sim, workload("big").queue("q").gpus(8, pods=2).obj())
    lines = explain(sim.log, "big")
    assert line_of(lines, "now pending").startswith("now pending (quota_never_enough): q can never hold it"), lines
    assert line_of(lines, "now pending").endswith("; passed over for their node taints: spot (pod set main does not tolerate "
                              "spot=true:NoSchedule)"), lines


def test_a_workload_no_flavor_tolerates_hears_every_flavors_taint():
    """Both flavors tainted: the first flavor's taint is the reason, the second's its clause (the
    job has to tolerate one of them, and may pick either)."""
    gpu_taint = Taint(key="nvidia.com/gpu", value="present", effect="NoExecute")
    sim = cluster(contract(cluster_queue("q").flavor("spot").gpus(8).flavor("on-demand").gpus(8))
                  .flavor_taints("spot", SPOT).flavor_taints("on-demand", gpu_taint))
    run(sim, workload("plain").queue("q").gpus(2).obj())
    assert sim.state.workloads["plain"].phase == "pending"
    assert line_of(explain(sim.log, "plain"), "now pending") == (
        "now pending (untolerated_taint): no flavor of q for nvidia.com/gpu (spot, on-demand) may take it: pod set main "
        "does not tolerate flavor spot's node taint spot=true:NoSchedule (spec.nodeTaints); nor the other flavors': "
        "on-demand (pod set main does not tolerate nvidia.com/gpu=present:NoExecute)")
