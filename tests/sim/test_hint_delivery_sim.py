"""Hint replay survives a target that crashes in the middle of a delivery.

A HINT_REQ whose answer is lost (the target crashed, the connection dropped) used to leave the
coordinator's replay for that target in flight forever: those hints were never sent again until
the coordinator restarted. Seeded simulation of the real ClusterNode (tests/sim/test_cluster_sim).
"""

from __future__ import annotations

from ringflow.cluster._hints import ReplayPhase
from tests.sim._harness import QUORUM, kv_key, kv_value, kv_write
from tests.sim.test_cluster_sim import boot


def test_hints_replay_after_the_target_crashed_during_delivery() -> None:
    sim, cluster = boot(7)
    with sim:
        n1 = cluster.node("n1")
        sim.crash("n3")
        target = next(
            info.host.host_id
            for endpoint, info in n1.membership.members.items()
            if endpoint.startswith("10.0.0.3")
        )
        assert sim.run_until_true(
            lambda: not n1.gossiper.is_alive("10.0.0.3:7000"), timeout_ms=60_000
        )
        acked: list[tuple[int, object]] = []
        for key in range(20):
            n1.write(
                [kv_write(key, key, n1.clock.now_us())],
                {},
                QUORUM,
                lambda error, k=key: acked.append((k, error)),
            )
        assert sim.run_until_true(lambda: len(acked) == 20, timeout_ms=10_000)
        assert all(error is None for _, error in acked)
        sim.restart("n3")
        assert sim.run_until_true(
            lambda: n1.hints.phase_of(target) is ReplayPhase.DELIVERING, timeout_ms=60_000
        )
        sim.crash("n3")  # mid-delivery: the answers are lost
        sim.run_for(5_000)
        sim.restart("n3")
        sim.run_for(120_000)
        n3 = cluster.node("n3")
        missing = [
            key
            for key in range(20)
            if kv_value(n3.store.read_mutation(("ks", "kv"), kv_key(key))) != key
        ]
        assert not missing, f"n3 misses hinted writes {missing}: {n1.hints.story()[-4:]}"
