"""CQL inside the simulator, checked Jepsen-style (issue 21 §3).

Three simulated nodes serve CQL through the node's own statement path (``serve_cql``: codec,
``ServerConnection``, ``ClusterBackend``, ``QueryProcessor``, ``ClusterDataPlane``,
coordinator, SQLite store) and three simulated clients send it 2,000 operations per seed
(``_cql_workload``: prepared INSERTs and LOGGED batches at QUORUM with client timestamps,
QUORUM reads, paged QUORUM scans, the DDL through CQL, an ALTER and a repair (``CALL
NodeOps.repairWithOptions``) mid-run) under the seed's faults (delays, drops, reordering, a
crash and restart, a partition, a skewed clock). ``_jepsen`` checks the history and the final
state read at ALL: every acknowledged write visible to later QUORUM reads, no
value that was never written, no value from the future, and CDC log rows that match the base
writes exactly.

CI runs a window of ``SEEDS_PER_RUN`` (10) seeds that moves with every commit (``_seeds``), each
2,000 operations; ``make sim SCENARIO=cql SEEDS=500`` runs more. A failing seed names the
command that replays it.
"""

from __future__ import annotations

import concurrent.futures

import pytest

from ringflow.cluster.service._plane import ClusterDataPlane
from tests.sim._cql_workload import Run, run_workload
from tests.sim._jepsen import check_final, check_history, summary
from tests.sim._seeds import ci_seeds

pytestmark = pytest.mark.timeout(300)
OPERATIONS = 2_000
SEEDS_PER_RUN = 10
"""About 7 s of CPU each (5.5 before the mid-run repair, when CI ran 12), on one pytest worker
(the file's): about 80 s of the CI budget, as before."""
SEEDS = ci_seeds((67,), per_run=SEEDS_PER_RUN, pool=10_000)
"""Regression seeds: 67 (the gossiper fed the wall clock, which the seed skews back: every
round refused "time went backwards", fixed by ``ClusterNode.gossip_now_ms``)."""


def violations(run: Run) -> list[str]:
    """What the checker finds in the run's history and final state, and any error a fault
    cannot explain (an Invalid or Syntax error is a bug of the statement path)."""
    return [
        *check_history(run.history),
        *check_final(run.history, run.final, run.log),
        *(f"unexpected error: {text}" for text in run.unexpected),
    ]


def check_seed(seed: int, operations: int = OPERATIONS) -> Run:
    """Run ``seed`` and fail with every violation found (``make sim SCENARIO=cql`` too)."""
    run = run_workload(seed, operations)
    found = violations(run)
    assert not found, f"seed {seed}: {len(found)} violations; {summary(run.history)}\n" + "\n".join(
        found[:20]
    )
    acknowledged = [op for op in run.history.writes() if op.outcome == "ok"]
    assert len(acknowledged) > operations // 10, summary(run.history)
    assert run.log, "no CDC log row was read back"
    return run


@pytest.mark.parametrize("seed", SEEDS)
def test_cql_clients_see_every_acknowledged_write_and_its_cdc_row(seed: int) -> None:
    check_seed(seed)


def test_same_seed_same_history() -> None:
    """A seed replays: the same operations, outcomes and final state, the same trace."""
    first, second = run_workload(11, 300), run_workload(11, 300)
    assert first.history.ops == second.history.ops
    assert (first.final, first.log) == (second.final, second.log)
    assert first.sim.trace.digest() == second.sim.trace.digest()


def test_the_checker_catches_a_node_that_acknowledges_writes_it_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole loop can fail: a data plane that acknowledges one write in eight without
    sending it is caught (lost writes, missing CDC rows)."""
    submit = ClusterDataPlane.submit
    calls = [0]

    def lossy(self: ClusterDataPlane, batch, captures, consistency, now_us):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] % 8 == 0 and any(m.keyspace == "ks" for m in batch):
            lost: concurrent.futures.Future[None] = concurrent.futures.Future()
            lost.set_result(None)  # acknowledged, never sent
            return lost
        return submit(self, batch, captures, consistency, now_us)

    monkeypatch.setattr(ClusterDataPlane, "submit", lossy)
    run = run_workload(5, 400)
    found = violations(run)
    assert any(text.startswith("lost write") for text in found), found[:5]
    assert any(text.startswith("missing log row") for text in found), found[:5]
