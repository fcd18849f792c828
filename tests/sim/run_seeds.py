"""Run many simulation seeds outside pytest: ``make sim SEEDS=N [FIRST=K] [SCENARIO=...]``.

Each seed of each scenario runs in a worker process (one per core); the run prints every
failing seed with the first line of its error and the command that replays it, then the totals
(seeds run, failures, wall time), and exits 1 when any seed failed. Scenarios: ``topology``
(``test_topology_sim``: two joins and a decommission under QUORUM CDC writes with faults),
``topology-wide`` (the same with clock skew, a second crash, a partition while streaming and a
join while another is in flight), ``cluster`` (``test_cluster_sim``: faults, a partition
and a crash under QUORUM CDC writes), ``cql`` (``test_cql_sim``: CQL clients, 2,000
operations per seed under faults, checked Jepsen-style) and ``repair`` (``test_repair_sim``:
Merkle-tree repair of replicas made to differ, under faults and a crash).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable

from tests.sim._seeds import replay_command

SCENARIOS = {
    "topology": "tests/sim/test_topology_sim.py::test_joins_and_a_decommission_under_quorum_writes",
    "topology-wide": (
        "tests/sim/test_topology_sim.py::"
        "test_the_same_under_skew_a_second_crash_a_partition_and_an_early_join"
    ),
    "cluster": "tests/sim/test_cluster_sim.py::test_quorum_writes_survive_faults_and_a_crash",
    "cql": (
        "tests/sim/test_cql_sim.py::test_cql_clients_see_every_acknowledged_write_and_its_cdc_row"
    ),
    "repair": (
        "tests/sim/test_repair_sim.py::"
        "test_seeded_repairs_under_faults_leave_every_replica_with_the_newest_versions"
    ),
}


def _scenario(name: str) -> Callable[[int], object]:
    if name.startswith("topology"):
        from tests.sim import test_topology_sim

        if name == "topology-wide":
            return lambda seed: test_topology_sim.run_scenario(seed, test_topology_sim.WIDE)
        return test_topology_sim.run_scenario
    if name == "cql":
        from tests.sim import test_cql_sim

        return test_cql_sim.check_seed
    if name == "repair":
        from tests.sim import test_repair_sim

        return test_repair_sim.run_scenario
    from tests.sim import test_cluster_sim

    return test_cluster_sim.run_scenario


def _run_one(job: tuple[str, int]) -> tuple[str, int, str | None, float]:
    name, seed = job
    logging.disable(logging.CRITICAL)  # the nodes' warnings would drown the summary
    started = time.perf_counter()
    try:
        _scenario(name)(seed)
        error = None
    except BaseException as failure:  # a seed's failure is data, not the end of the run
        lines = traceback.format_exception_only(failure)
        error = " ".join(lines).strip().splitlines()[0][:300]
    return name, seed, error, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds per scenario")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    options = parser.parse_args(argv)
    names = list(SCENARIOS) if options.scenario == "all" else [options.scenario]
    seeds = range(options.first, options.first + options.seeds)
    jobs = [(name, seed) for name in names for seed in seeds]
    started = time.perf_counter()
    failures: list[tuple[str, int, str]] = []
    done = 0
    with multiprocessing.Pool(options.workers) as pool:
        for name, seed, error, _seconds in pool.imap_unordered(_run_one, jobs):
            done += 1
            if error is not None:
                failures.append((name, seed, error))
                print(f"FAIL {name} seed {seed}: {error}", flush=True)
                print(f"     replay: {replay_command(f'{SCENARIOS[name]}[{seed}]', seed)}")
            if done % 50 == 0:
                print(f"... {done}/{len(jobs)} seeds, {len(failures)} failed", flush=True)
    wall_s = time.perf_counter() - started
    for name in names:
        failed = sorted(seed for n, seed, _ in failures if n == name)
        print(
            f"{name}: {len(seeds)} seeds ({seeds.start}-{seeds.stop - 1}), "
            f"{len(failed)} failed {failed if failed else ''}".rstrip()
        )
    print(f"wall time {wall_s:.0f} s on {options.workers} workers")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
