"""What the driver benches (``bench_cql``, ``bench_cluster``) share: one measured run of a
prepared statement over a list of parameters (rows, wall time, the server processes' and the
client's CPU, per-request latencies when run one at a time), and how its figures are read."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import PreparedStatement


@dataclass(slots=True)
class Run:
    rows: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    latencies_s: list[float]

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s

    @property
    def us_per_row(self) -> float:
        return self.wall_s / self.rows * 1e6

    def percentile_ms(self, fraction: float) -> float | None:
        if not self.latencies_s:
            return None
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1e3


def measure(
    server_cpu_s: Callable[[], float],
    session: Session,
    statement: PreparedStatement,
    params: Sequence[tuple[object, ...]],
    concurrency: int,
) -> Run:
    """``statement`` once per ``params``: one at a time (latencies kept) when ``concurrency``
    is 1, else ``concurrency`` in flight; ``server_cpu_s`` reads the server processes' CPU."""
    latencies: list[float] = []
    server_before = server_cpu_s()
    client_before = time.process_time()
    start = time.perf_counter()
    if concurrency == 1:
        for values in params:
            began = time.perf_counter()
            session.execute(statement, values)
            latencies.append(time.perf_counter() - began)
    else:
        results = execute_concurrent_with_args(
            session, statement, params, concurrency=concurrency, raise_on_first_error=True
        )
        if len(results) != len(params):
            raise RuntimeError(f"{len(results)} results for {len(params)} statements")
    wall = time.perf_counter() - start
    return Run(
        rows=len(params),
        wall_s=wall,
        server_cpu_s=server_cpu_s() - server_before,
        client_cpu_s=time.process_time() - client_before,
        latencies_s=latencies,
    )


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda run: run.us_per_row)


def fmt_ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"
