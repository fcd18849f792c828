"""cqlsh (``scylla-cqlsh`` from PyPI) against a real node: scripted ``-e`` and ``-f`` sessions.

Proves that the tool operators use works unchanged: it connects (its own handshake and
``system.local`` reads), runs DDL for a CDC table, DML (insert, update, delete), and prints the
base table, the CDC log table and the CDC description tables in its table format. Nothing is
skipped: if cqlsh is not installed or cannot run, the test fails and says why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringflow.cli._demo_cluster import NodeProcess

CQLSH_TIMEOUT_S = 60


def _cqlsh_path() -> str:
    beside = Path(sys.executable).parent / "cqlsh"
    found = str(beside) if beside.exists() else shutil.which("cqlsh")
    if found is None:
        pytest.fail(
            "cqlsh is not installed: install the dev dependency scylla-cqlsh "
            "(pip install scylla-cqlsh) into this environment"
        )
    return found


def cqlsh(node: NodeProcess, home: Path, *arguments: str) -> str:
    """Run cqlsh against ``node``; its stdout, or a failure with its stderr."""
    command = [_cqlsh_path(), node.address, str(node.port), "--request-timeout=30", *arguments]
    env = {**os.environ, "HOME": str(home), "CQLSH_NO_BUNDLED": "TRUE"}
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=CQLSH_TIMEOUT_S,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"cqlsh timed out after {CQLSH_TIMEOUT_S}s: {error.stderr!r}")
    if done.returncode != 0 or "Error" in done.stderr:
        pytest.fail(
            f"cqlsh {' '.join(arguments)!r} failed ({done.returncode}):\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}\nnode log:\n{node.log()}"
        )
    return done.stdout


def test_cqlsh_runs_in_this_environment() -> None:
    done = subprocess.run(
        [_cqlsh_path(), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cqlsh ")


SCRIPT = """
CREATE KEYSPACE shop WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
CREATE TABLE shop.orders (id int, item text, qty int, PRIMARY KEY (id, item))
    WITH cdc = {'enabled': true, 'preimage': true};
INSERT INTO shop.orders (id, item, qty) VALUES (1, 'apple', 3);
INSERT INTO shop.orders (id, item, qty) VALUES (1, 'pear', 5);
INSERT INTO shop.orders (id, item, qty) VALUES (2, 'plum', 7);
UPDATE shop.orders SET qty = 4 WHERE id = 1 AND item = 'apple';
DELETE FROM shop.orders WHERE id = 1 AND item = 'pear';
SELECT id, item, qty FROM shop.orders;
"""
# The log table is read by a later cqlsh: the driver learns of it from a SCHEMA_CHANGE event,
# debounced (``schema_event_refresh_window``), as with Scylla, whose answer to the CREATE TABLE
# names the base table only.


def tables(output: str) -> list[list[list[str]]]:
    """cqlsh's printed result tables: for each, its header and rows as lists of cells."""
    found = []
    for chunk in re.split(r"\(\d+ rows\)", output)[:-1]:
        lines = [line for line in chunk.splitlines() if line.strip()]
        separator = next(i for i, line in enumerate(lines) if set(line.strip()) <= {"-", "+"})
        rows = [lines[separator - 1], *lines[separator + 1 :]]
        found.append([[cell.strip() for cell in row.split("|")] for row in rows])
    return found


def test_cqlsh_file_and_commands_over_base_log_and_description_tables(
    node: NodeProcess, tmp_path: Path
) -> None:
    script = tmp_path / "script.cql"
    script.write_text(SCRIPT)
    (base,) = tables(cqlsh(node, tmp_path, "-f", str(script)))
    assert base[0] == ["id", "item", "qty"]
    assert sorted(map(tuple, base[1:])) == [("1", "apple", "4"), ("2", "plum", "7")]

    output = cqlsh(
        node,
        tmp_path,
        "-e",
        'SELECT "cdc$operation", id, item, qty FROM shop.orders_scylla_cdc_log; '
        "SELECT key, time FROM system_distributed.cdc_generation_timestamps; "
        "SELECT range_end, streams FROM system_distributed.cdc_streams_descriptions_v2; "
        "SELECT release_version FROM system.local; "
        "DESCRIBE KEYSPACES",
    )
    log, timestamps, streams, version = tables(output)
    assert log[0] == ["cdc$operation", "id", "item", "qty"]
    # 3 inserts (2), 1 update (1) with its pre-image (0), 1 row deletion (3) with its pre-image.
    assert sorted(int(row[0]) for row in log[1:]) == [0, 0, 1, 2, 2, 2, 3], log

    assert timestamps[0] == ["key", "time"] and [row[0] for row in timestamps[1:]] == ["timestamps"]
    assert streams[0] == ["range_end", "streams"] and len(streams) == 1 + 16
    assert all(row[1].startswith("{0x") for row in streams[1:])
    assert version == [["release_version"], ["3.0.8"]]
    assert "shop" in output and "system_schema" in output
