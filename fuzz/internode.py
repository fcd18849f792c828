"""Fuzz target ``internode``: internode connections and messages against a real 3-node cluster.

Inputs (seeded): one connection each, opened from a loopback address that is NOT a member
(the cluster's block + 3), to one node: a hello (the fuzzer's own endpoint, a member's identity
spoofed from the wrong address, an unknown endpoint, or a broken hello), then 1-20 envelopes of
any verb (every ``Verb``: gossip, data, schema, streaming, range reads, FAILURE_RSP), each valid,
mutated (bytes flipped, set, cut, inserted; length fields set to edge values), split across
network frames, or cut short; sometimes a network header announcing a large body that never
comes ("truncated frames"). Forged writes aim at ``fz.canary`` and a forged schema at
``fz_forged``.

Invariants (one line each; "never hang" and "alive" after every input, the rest every
``probe_every`` inputs and at the end, after ``settle_s`` of quiet so a partition shows):

* never hang: the connection and its bytes are taken within the deadline
* every node process stays alive
* cluster views stay UP: every node sees every node UP (status.json), within a deadline
* QUORUM write+read through each node works (real driver, pinned to that node)
* no forged write is applied: fz.canary read at ALL through each node is empty
* no forged schema is applied: every node keeps its keyspaces and tables
* no node logs an unexpected exception (handler errors, tracebacks)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, Session
from cassandra.query import SimpleStatement

from fuzz._core import FuzzInput, Stats, check, check_all
from fuzz._internode_messages import FORGED_KEYSPACE, envelope_frame, hello, mutate, network_frame
from fuzz._nodes import LogWatch, driver_session
from fuzz._schema import CANARY, KEYSPACE, schema_statements
from ringflow.cli._demo_cluster import LocalCluster, port_is_free
from ringflow.cluster import Verb

NODES = 3
INTERNODE_PORT = 7000
SEND_DEADLINE_S = 10.0
VIEW_DEADLINE_S = 30.0
GOSSIP_INTERVAL_MS = 200
PROBE_TABLE = "probe"
_VERBS = tuple(Verb)


class InternodeTarget:
    name = "internode"
    probe_every = 300
    settle_s = 12.0
    """Quiet time before the last probe: long enough for the failure detector to convict."""

    def inputs(self, seed: int) -> Iterator[FuzzInput]:
        rng = random.Random(seed)
        while True:
            yield self._one(rng)

    def _one(self, rng: random.Random) -> FuzzInput:
        """Addresses are placeholders here, as long as a real endpoint (``_placeholder``),
        resolved by the environment, so a seed gives the same bytes on any loopback block."""
        node = rng.randrange(NODES)
        kind = rng.choices(
            ("valid", "mutated", "split", "truncated", "huge-header", "bad-hello"),
            weights=(30, 40, 10, 10, 5, 5),
        )[0]
        identity = rng.choices(("self", "member", "unknown"), weights=(40, 45, 15))[0]
        src = _placeholder(identity if identity != "member" else f"member{rng.randrange(NODES)}")
        data = bytearray()
        if kind == "bad-hello":
            data += mutate(hello(src, _placeholder("dst")), rng)
        else:
            data += hello(src, _placeholder("dst"))
        count = rng.randint(1, 20)
        for _ in range(count):
            verb = rng.choice(_VERBS)
            claimed = rng.choice((src, src, _placeholder("member0"), _placeholder("self"), "x"))
            frame = envelope_frame(verb, rng, claimed, _placeholder("unknown"))
            if kind == "mutated" and rng.random() < 0.7:
                frame = mutate(frame, rng)
            if kind == "split" and len(frame) > 2:
                cut = rng.randrange(1, len(frame))
                data += network_frame(frame[:cut]) + network_frame(frame[cut:])
                continue
            data += network_frame(frame)
        if kind == "truncated":
            data += network_frame(
                envelope_frame(rng.choice(_VERBS), rng, src, _placeholder("unknown"))
            )[: rng.randint(1, 12)]
        if kind == "huge-header":
            data += rng.choice((16_000_000, 2**24, 2**31)).to_bytes(4, "big") + rng.randbytes(
                rng.randint(0, 64)
            )
        return FuzzInput(bytes(data), f"{kind}/{identity}", node, messages=count)

    def environment(self, workdir: Path | None) -> InternodeEnvironment:
        return InternodeEnvironment(workdir)


class InternodeEnvironment:
    """A 3-node RF=3 cluster (``ringflow cluster start``) and a 4th loopback address for us."""

    def __init__(self, workdir: Path | None) -> None:
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ringflow-fuzz-")
            workdir = Path(self._tmp.name)
        addresses = _fixed_width_block(NODES + 1)
        first = addresses[0]
        self.own_address = addresses[NODES]
        self.cluster = LocalCluster(
            workdir / "cluster", NODES, first_address=first, gossip_interval_ms=GOSSIP_INTERVAL_MS
        )
        self.cluster.start()
        self.addresses = self.cluster.addresses
        self.endpoints = [f"{a}:{INTERNODE_PORT}" for a in self.addresses]
        self.logs = [LogWatch(self.cluster.node_dir(a) / "node.log") for a in self.addresses]
        self.sessions: dict[str, tuple[Cluster, Session]] = {}
        session = self._session(self.addresses[0])
        for statement in schema_statements(replication_factor=NODES):
            session.execute(statement)
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{PROBE_TABLE} (k uuid PRIMARY KEY, v int)"
        )
        self._wait_views()
        self.schema = self._schema_seen()

    # -- inputs ----------------------------------------------------------------------------

    def resolve(self, item: FuzzInput) -> bytes:
        replacements = {
            "dst": self.endpoints[item.node],
            "self": f"{self.own_address}:{INTERNODE_PORT}",
            "unknown": f"{self.own_address.rsplit('.', 1)[0]}.254:{INTERNODE_PORT}",
        }
        for index, endpoint in enumerate(self.endpoints):
            replacements[f"member{index}"] = endpoint
        data = item.data
        for name, endpoint in replacements.items():
            data = data.replace(_placeholder(name).encode(), endpoint.encode())
        return data

    def execute(self, item: FuzzInput, stats: Stats) -> None:
        data = self.resolve(item)
        target = (self.addresses[item.node], INTERNODE_PORT)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(SEND_DEADLINE_S)
                sock.bind((self.own_address, 0))
                sock.connect(target)
                try:
                    sock.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    stats.closes += 1
        except TimeoutError:
            check(
                False,
                "never hang: the connection and its bytes are taken within the deadline",
                f"{len(data)} bytes to node {item.node}",
            )
        except OSError as error:
            self._check_alive()
            check(
                False,
                "every node accepts internode connections",
                f"{type(error).__name__}: {error}",
            )
        self._check_alive()

    # -- invariants ------------------------------------------------------------------------

    def _check_alive(self) -> None:
        for index, address in enumerate(self.cluster.addresses):
            pid_file = self.cluster.node_dir(address) / "pid"
            alive = _pid_alive(pid_file)
            check(alive, "every node process stays alive", f"node {index} ({address}) is gone")

    def _statuses(self) -> list[dict[str, object]]:
        found = []
        for address in self.addresses:
            try:
                found.append(
                    json.loads((self.cluster.node_dir(address) / "status.json").read_text())
                )
            except (OSError, ValueError):
                found.append({})
        return found

    def _views_up(self) -> str | None:
        """None if every node sees every node UP, else what is not."""
        for address, status in zip(self.addresses, self._statuses(), strict=True):
            nodes = status.get("nodes")
            if not isinstance(nodes, list) or len(nodes) != NODES:
                return f"{address} lists {nodes!r:.200}"
            down = [n for n in nodes if n.get("state") != "UN"]
            if down:
                return f"{address} sees {down!r:.300}"
        return None

    def _wait_views(self) -> None:
        deadline = time.monotonic() + VIEW_DEADLINE_S
        problem = self._views_up()
        while problem is not None and time.monotonic() < deadline:
            time.sleep(0.5)
            problem = self._views_up()
        check(problem is None, "cluster views stay UP: every node sees every node UP", str(problem))

    def _schema_seen(self) -> list[frozenset[tuple[str, str]]]:
        """Each node's keyspaces and tables, as its own ``system_schema`` lists them (what a
        forged SCHEMA_PUSH would change; the schema version alone also moves for other
        reasons, such as a node finishing a DDL's side effects late)."""
        seen = []
        for address in self.addresses:
            try:
                session = self._session(address)
                rows = session.execute("SELECT keyspace_name, table_name FROM system_schema.tables")
                tables = {(r.keyspace_name, r.table_name) for r in rows}
                rows = session.execute("SELECT keyspace_name FROM system_schema.keyspaces")
                tables |= {(r.keyspace_name, "") for r in rows}
            except Exception as error:
                tables = {("<unreadable>", repr(error)[:200])}
            seen.append(frozenset(tables))
        return seen

    def _session(self, address: str) -> Session:
        if address not in self.sessions:
            self.sessions[address] = driver_session([address])
        return self.sessions[address][1]

    def _quorum_round(self) -> None:
        for address in self.addresses:
            key = uuid.uuid4()
            try:
                session = self._session(address)
                write = SimpleStatement(
                    f"INSERT INTO {KEYSPACE}.{PROBE_TABLE} (k, v) VALUES (%s, 1)",
                    consistency_level=ConsistencyLevel.QUORUM,
                )
                session.execute(write, (key,))
                read = SimpleStatement(
                    f"SELECT v FROM {KEYSPACE}.{PROBE_TABLE} WHERE k = %s",
                    consistency_level=ConsistencyLevel.QUORUM,
                )
                row = session.execute(read, (key,)).one()
            except Exception as error:
                check(
                    False,
                    "QUORUM write+read through each node works",
                    f"via {address}: {error!r:.400}",
                )
            check(
                row is not None and row.v == 1,
                "QUORUM write+read through each node works",
                f"via {address}: read {row!r}",
            )

    def _canary(self) -> None:
        for address in self.addresses:
            statement = SimpleStatement(
                f"SELECT k FROM {KEYSPACE}.{CANARY} LIMIT 5", consistency_level=ConsistencyLevel.ALL
            )
            try:
                rows = list(self._session(address).execute(statement))
            except Exception as error:
                check(
                    False,
                    "QUORUM write+read through each node works",
                    f"ALL via {address}: {error!r:.300}",
                )
            check(
                not rows, "no forged write is applied: fz.canary is empty", f"via {address}: {rows}"
            )

    def probe(self, stats: Stats) -> None:
        check_all(
            self._check_alive,
            self._wait_views,
            self._quorum_round,
            self._canary,
            self._schema_unchanged,
            self._logs_clean,
        )

    def _schema_unchanged(self) -> None:
        now = self._schema_seen()
        for address, before, after in zip(self.addresses, self.schema, now, strict=True):
            check(
                before == after,
                "no forged schema is applied: every node keeps its keyspaces and tables",
                f"{address}: added {sorted(after - before)}, lost {sorted(before - after)}",
            )

    def _logs_clean(self) -> None:
        for index, log in enumerate(self.logs):
            problems = log.new_problems()
            check(
                not problems,
                "no node logs an unexpected exception",
                f"node {index}: {problems[:3]}",
            )

    def settle(self) -> None:
        time.sleep(InternodeTarget.settle_s)

    def recover(self) -> None:
        """Make the invariants hold again: a clean canary and schema, every node restarted if a
        view or a QUORUM round still fails."""
        try:
            self._clean()
            self._check_alive()
            self._wait_views()
            self._quorum_round()
        except Exception:
            self._restart_all()
        self.schema = self._schema_seen()
        for log in self.logs:
            log.new_problems()

    def _clean(self) -> None:
        session = self._session(self.addresses[0])
        session.execute(f"DROP KEYSPACE IF EXISTS {FORGED_KEYSPACE}")
        session.execute(
            SimpleStatement(f"TRUNCATE {KEYSPACE}.{CANARY}", consistency_level=ConsistencyLevel.ALL)
        )

    def _restart_all(self) -> None:
        """Kill and start every node, wait (bounded) for UP, clean up what forged messages
        left; the next probe says whether that worked."""
        self._close_sessions()
        for address in self.addresses:
            with contextlib.suppress(Exception):
                self.cluster.kill(address)
            self.cluster.restart(address)
        with contextlib.suppress(Exception):
            self._wait_views()
        with contextlib.suppress(Exception):
            self._clean()
        self._close_sessions()

    def _close_sessions(self) -> None:
        for cluster, _ in self.sessions.values():
            cluster.shutdown()
        self.sessions.clear()

    def close(self) -> None:
        self._close_sessions()
        try:
            self.cluster.stop()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()


ENDPOINT_WIDTH = len("127.100.100.100:7000")


def _placeholder(name: str) -> str:
    """A stand-in exactly as long as a real endpoint, so resolving it keeps every msgpack
    string header and frame length right."""
    return f"@{name}@".ljust(ENDPOINT_WIDTH, "#")


def _fixed_width_block(count: int) -> list[str]:
    """``count`` consecutive loopback addresses with three-digit octets (endpoints all
    ``ENDPOINT_WIDTH`` long) whose CQL and internode ports are free."""
    rng = random.Random()
    for _ in range(1000):
        prefix = f"127.{rng.randint(100, 253)}.{rng.randint(100, 253)}"
        last = rng.randint(100, 250 - count)
        addresses = [f"{prefix}.{last + i}" for i in range(count)]
        if all(port_is_free(a, p) for a in addresses for p in (9042, INTERNODE_PORT)):
            return addresses
    raise RuntimeError(f"no free block of {count} loopback addresses")


def _pid_alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return True
