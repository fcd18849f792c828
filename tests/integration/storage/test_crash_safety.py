"""kill -9 never loses an acknowledged batch and never leaves half a batch (seed 000).

Method: a child process (``crash_child.py``) applies numbered batches, each a CDC-captured base
mutation (whose log rows are built inside the transaction, with image reads) plus a second base
mutation, and prints ``ack i`` after each COMMIT. The parent kills it with SIGKILL at a random
moment (after a random number of acks, plus a random sub-batch delay), 50+ times with a fixed
seed, reopens the store after every kill and checks:

* every acknowledged batch is fully present: its base rows, all its log rows, its other row;
* the batch in flight at the kill (the one after the last ack) is fully present or fully
  absent, never half of it (base without log rows, log rows without base, base without the
  other table's row).

The next child restarts after the last batch found committed (a re-applied batch would log again,
with pre-images, as a retried CDC write does). A committed but unacknowledged batch is then held
to the same standard as an acknowledged one at the final check.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringflow.schema import INT
from ringflow.schema._codec import serialize
from ringflow.storage import Store
from tests.integration.storage.crash_child import (
    BASE,
    EXPECTED_LOG_ROWS,
    LOG,
    NOW_S,
    OTHER,
    ROWS_PER_BATCH,
    base_value,
    stream_id,
)

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 50
SEED = 20_240_601


def _batch_state(store: Store, batch: int) -> tuple[int, int, int]:
    """(base rows present, log rows present, other rows present) of one batch."""
    key = (serialize(INT, batch),)
    base_rows = store.read_partition(BASE, key, now_s=NOW_S)
    for row in base_rows:
        assert row.values["v"] == base_value(batch, int.from_bytes(row.clustering[0], "big"))
    log_rows = store.read_partition(LOG, (stream_id(batch),), now_s=NOW_S)
    other = store.read_row(OTHER, key, (), now_s=NOW_S)
    return len(base_rows), len(log_rows), 0 if other is None else 1


def _run_child(database: Path, first_batch: int, rng: random.Random) -> list[int]:
    """Start a child at ``first_batch``, kill it at a random point; return the acked batches."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(database), str(first_batch)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    acks: list[int] = []
    wanted = rng.choice([0, 0, 1, 2, 3, 5, 8])
    while len(acks) < wanted:
        line = child.stdout.readline()
        assert line.startswith("ack "), line
        acks.append(int(line.split()[1]))
    time.sleep(rng.random() * 0.004)
    os.kill(child.pid, signal.SIGKILL)
    rest = child.stdout.read()  # acks printed between our last read and the kill count too
    child.wait(timeout=10)
    acks += [int(line.split()[1]) for line in rest.splitlines() if line.startswith("ack ")]
    assert child.returncode == -signal.SIGKILL
    return acks


@pytest.mark.slow
def test_kill_9_loses_no_acked_batch_and_splits_none(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    database = tmp_path / "node.sqlite"
    next_batch = 0
    acked: set[int] = set()
    in_flight_committed = 0
    for _ in range(KILLS):
        acks = _run_child(database, next_batch, rng)
        assert acks == list(range(next_batch, next_batch + len(acks)))
        acked.update(acks)
        in_flight = next_batch + len(acks)
        with Store(database) as store:
            for batch in acks:
                assert _batch_state(store, batch) == (ROWS_PER_BATCH, EXPECTED_LOG_ROWS, 1), batch
            state = _batch_state(store, in_flight)
            assert state in ((0, 0, 0), (ROWS_PER_BATCH, EXPECTED_LOG_ROWS, 1)), (in_flight, state)
            committed = state != (0, 0, 0)
        in_flight_committed += committed
        if committed:
            acked.add(in_flight)  # durable although unacknowledged: it must stay
        next_batch = in_flight + committed
    with Store(database) as store:
        for batch in sorted(acked):
            assert _batch_state(store, batch) == (ROWS_PER_BATCH, EXPECTED_LOG_ROWS, 1), batch
    assert len(acked) > KILLS  # the kills landed after real work, not only at start-up
    print(f"{KILLS} kills, {len(acked)} acked batches, {in_flight_committed} unacked commits")
