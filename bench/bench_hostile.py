"""A normal client's latency while a hostile client floods the node (issue 16): a script.

Run with the project venv: ``.venv/bin/python bench/bench_hostile.py [--quick]``.

One real ``ringflow node start`` subprocess on a free loopback address, with the issue's
settings: frame limit raised to 110 MiB (so 100 MB frames are admitted and the budget is what
is measured), ``native_transport_max_request_data_in_flight`` 128 MiB and the same per address
(``--default-limits`` keeps every default instead: 16 MiB frames, so every 100 MB frame is
refused unbuffered). The normal client is the real Python driver in this process, one request
in flight (``SELECT key FROM system.local``, each timed). The hostile client is a separate
process (so it does not share this process's GIL with the driver):

1. 2,000 idle connections from one loopback address (the per-address share keeps 256);
2. 50 clients, each from its own loopback address, each sending STARTUP then an OPTIONS frame
   announcing and carrying 100 MB (``--quick``: 20 clients).

Phases, in one run: baseline (driver alone, ``--baseline-s``), ``--floods`` floods (the
driver timed during each, from the hostile process being told to start until it reports the
flood over, its idle connections closed; ``--pause-s`` apart, untimed), baseline again. The
hostile process is started (its imports done) before the first baseline and floods when told
to: its interpreter's start-up is not part of a flood. Printed: p50/p99 per phase, the ratio of
the flood p99 to the baseline p99 (target at most 2x), the node's peak VmRSS growth (sampled
every 20 ms from ``/proc/<pid>/status``) against ``2 x budget + 64 MiB``, what each hostile
client got (answered / refused / closed), and each flood's duration. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cassandra.cluster import Session

from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.cql import (
    ErrorResponse,
    FrameDecoder,
    Opcode,
    Ready,
    Startup,
    Supported,
    decode_message,
    encode_message,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.integration...
from tests.integration.node.conftest import make_cluster

MIB = 1024 * 1024
BUDGET = 128 * MIB
STARTUP = encode_message(Startup({"CQL_VERSION": "3.4.5"}), 0)


# --- the hostile process -----------------------------------------------------------------------


def _reply(sock: socket.socket) -> object | None:
    decoder = FrameDecoder(expected_version=None)
    while True:
        frame = decoder.next_frame()
        if frame is not None:
            return decode_message(frame).message
        try:
            data = sock.recv(65536)
        except (ConnectionError, TimeoutError):
            return None
        if not data:
            return None
        decoder.feed(data)


def _big_frame(address: str, port: int, source: str, size: int, outcomes: list[str]) -> None:
    chunk = b"\x00" * MIB
    try:
        with socket.create_connection((address, port), 300, source_address=(source, 0)) as sock:
            sock.sendall(STARTUP)
            if _reply(sock) != Ready():
                outcomes.append("closed")
                return
            sock.sendall(struct.pack(">BBhBi", 0x04, 0, 7, int(Opcode.OPTIONS), size))
            try:
                for offset in range(0, size, MIB):
                    sock.sendall(chunk[: min(MIB, size - offset)])
            except (ConnectionError, TimeoutError):
                pass
            reply = _reply(sock)
            if isinstance(reply, Supported):
                outcomes.append("answered")
            elif isinstance(reply, ErrorResponse):
                outcomes.append(f"refused 0x{reply.code:04x}")
            else:
                outcomes.append("closed")
    except OSError as error:
        outcomes.append(f"failed {type(error).__name__}")


def _flood(address: str, port: int, clients: int, size: int, idle: int) -> dict[str, object]:
    """One flood: idle connections from one address, then big frames from others; the idle
    connections closed at its end (inside the flood)."""
    prefix = ".".join(address.split(".")[:3])
    idle_source = f"{prefix}.250" if not address.endswith(".250") else f"{prefix}.251"
    start = time.monotonic()
    held = []
    for _ in range(idle):
        try:
            held.append(socket.create_connection((address, port), 10, (idle_source, 0)))
        except OSError:
            break
    outcomes: list[str] = []
    sources = [f"{prefix}.{100 + i}" for i in range(clients)]
    threads = [
        threading.Thread(target=_big_frame, args=(address, port, s, size, outcomes))
        for s in sources
        if s != address
    ]
    frames_start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    frames_s = time.monotonic() - frames_start
    for sock in held:
        sock.close()
    return {
        "outcomes": outcomes,
        "seconds": frames_s,
        "total_seconds": time.monotonic() - start,
        "idle": len(held),
    }


def run_flood(address: str, port: int, clients: int, size: int, idle: int) -> None:
    """The hostile process: says ``ready``, then floods once per line on stdin (a JSON report
    on stdout after each) until stdin closes."""
    print("ready", flush=True)
    while sys.stdin.readline():
        print(json.dumps(_flood(address, port, clients, size, idle)), flush=True)


# --- the bench ---------------------------------------------------------------------------------


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def latencies_ms(session: Session, until: threading.Event | float) -> list[float]:
    samples = []
    while True:
        if isinstance(until, threading.Event):
            if until.is_set():
                break
        elif time.monotonic() >= until:
            break
        start = time.perf_counter()
        session.execute("SELECT key FROM system.local", timeout=60)
        samples.append((time.perf_counter() - start) * 1000)
        time.sleep(0.005)
    return samples


def describe(name: str, samples: list[float]) -> tuple[float, float]:
    quantiles = statistics.quantiles(samples, n=100)
    p50, p99 = quantiles[49], quantiles[98]
    print(f"  {name:<16} {len(samples):>6} requests  p50 {p50:6.2f} ms  p99 {p99:7.2f} ms")
    return p50, p99


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--default-limits", action="store_true")
    parser.add_argument("--baseline-s", type=float, default=15.0)
    parser.add_argument("--floods", type=int, default=3, help="floods in the flood phase")
    parser.add_argument("--pause-s", type=float, default=3.0, help="pause after each flood")
    parser.add_argument("--flood", nargs=5, metavar=("ADDRESS", "PORT", "N", "SIZE", "IDLE"))
    arguments = parser.parse_args()
    if arguments.flood:
        address, port, clients, size, idle = arguments.flood
        run_flood(address, int(port), int(clients), int(size), int(idle))
        return 0
    clients = 20 if arguments.quick else 50
    options: list[str] = []
    if not arguments.default_limits:
        options = [
            *("--native-transport-max-frame-size", "110MiB"),
            *("--native-transport-max-request-data-in-flight", "128MiB"),
            *("--native-transport-max-request-data-in-flight-per-ip", "128MiB"),
        ]
    base = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    with NodeProcess(base / "data", random_loopback_address(), *options).start() as node:
        pid = node.process.pid  # type: ignore[union-attr]
        cluster = make_cluster(node)
        session = cluster.connect()
        flood = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--flood",
                node.address,
                str(node.port),
                str(clients),
                str(100 * 1000 * 1000),
                "2000",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )
        assert flood.stdin is not None and flood.stdout is not None
        if flood.stdout.readline().strip() != "ready":
            raise RuntimeError("the hostile process did not start")
        latencies_ms(session, time.monotonic() + 2)  # warm up
        baseline_rss = rss(pid)
        before = latencies_ms(session, time.monotonic() + arguments.baseline_s)
        peak = [baseline_rss]
        done = threading.Event()  # the sampler's end

        def sample() -> None:
            while not done.wait(0.02):
                peak[0] = max(peak[0], rss(pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        during: list[float] = []
        reports: list[dict[str, Any]] = []
        for _ in range(arguments.floods):
            ended = threading.Event()
            found: list[str] = []

            def report(into: list[str] = found, ended: threading.Event = ended) -> None:
                into.append(flood.stdout.readline())  # type: ignore[union-attr]
                ended.set()

            flood.stdin.write("go\n")
            flood.stdin.flush()
            threading.Thread(target=report, daemon=True).start()
            during += latencies_ms(session, ended)
            reports.append(json.loads(found[0] or "{}"))
            time.sleep(arguments.pause_s)  # the refused connections' waits run out
        flood.stdin.close()
        flood.wait()
        done.set()
        after = latencies_ms(session, time.monotonic() + arguments.baseline_s)
        cluster.shutdown()
    settings = (
        "defaults (16 MiB frames)" if arguments.default_limits else "frame 110 MiB, budget 128 MiB"
    )
    print(f"bench_hostile: {clients} x 100 MB frames + 2,000 idle connections; node {settings}")
    _, p99_before = describe("baseline before", before)
    _, p99_during = describe("during flood", during)
    _, p99_after = describe("baseline after", after)
    baseline_p99 = max(p99_before, p99_after)
    print(
        f"  p99 flood / baseline: {p99_during / baseline_p99:.2f}x (target <= 2x; baseline = "
        f"the worse of before/after)"
    )
    growth = peak[0] - baseline_rss
    print(
        f"  node RSS: baseline {baseline_rss / MIB:.0f} MiB, peak growth {growth / MIB:.0f} MiB "
        f"(bound 2 x budget + 64 MiB = {(2 * BUDGET + 64 * MIB) / MIB:.0f} MiB)"
    )
    for number, flooded in enumerate(reports, 1):
        outcomes = flooded.get("outcomes", [])
        counts = {outcome: outcomes.count(outcome) for outcome in sorted(set(outcomes))}
        print(
            f"  flood {number}: hostile {counts}, {flooded.get('idle')} idle connections "
            f"opened, frames {flooded.get('seconds', 0):.1f} s, flood "
            f"{flooded.get('total_seconds', 0):.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
