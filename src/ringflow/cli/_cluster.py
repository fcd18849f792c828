"""``ringflow cluster start|status|stop|kill|restart|run-node``: a local cluster of real node
processes on loopback (127.0.0.1 .. 127.0.0.N, the same ports on every node).

``start`` lays the cluster out once (``cluster.json`` in ``--data``): per node an address, a DC
and a rack (``--dcs dc1:3,dc2:2``, racks round-robin within a DC), a host id and tokens from
the balanced allocator (cassandra-core.md §4.2), saved as each node's record before its first
start, so ``ringflow.node`` keeps them. Each node runs ``run-node`` in its own session (log in
``<data>/<node>/node.log`` at ``--log-level``, WARNING unless a ``start`` said otherwise, kept in
``cluster.json``; pid in ``pid``); every node lists the first node of each DC as a
seed. ``start`` returns when every node reports every other one UP with one schema version
and the same CDC generation loaded (read from the nodes' ``status.json``), or fails after
``--timeout``. ``kill`` sends SIGKILL (a crash), ``restart`` starts a killed node again with its
data, ``stop`` sends SIGTERM to all.

Timing settings (``--gossip-interval-ms``, ``--phi-convict-threshold``, ``--write-timeout-ms``,
``--read-timeout-ms``, ``--range-timeout-ms``, ``--max-hint-window-ms``,
``--hint-dispatch-interval-ms``, ``--schema-agreement-timeout-ms``: ``TIMING_OPTIONS``) are
validated (a bad value is a usage error, exit 2), kept in ``cluster.json`` (a later ``start``
may change them; restarted nodes get them too) and passed to every ``run-node``; so are the
replica capture's (``--slice-width-s``, ``--slice-count``, ``--capture-max-bytes``,
``--capture-max-age-s``, ``--capture-policy refuse|drop-oldest``, ``--replica-capture on|off``,
``--drop-sent-slices on|off``: ``CaptureSettings``, seed 002). ``status`` adds one line per
running node on its capture (slices open, sealed, unpublished, rows, bytes, dropped once sent).

``start --tls`` (``_tls_options``) makes a local CA and per-node certificates under
``<data>/tls`` and runs every node with TLS on the native port and between nodes; ``status``
then names the CA a client needs. ``status`` also shows the auth mode the running nodes report
and checks each one's native port live: whether it requires TLS and when its certificate
expires (``_security_status``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ringflow.cli import EXIT_OK
from ringflow.cli._native_options import (
    SWITCH_INTERVAL_S,
    add_auth_options,
    add_native_options,
    auth_arguments,
    auth_settings_of,
    given_auth_options,
    given_native_limits,
    given_native_options,
    native_arguments,
)
from ringflow.cli._security_status import auth_summary, tls_checks
from ringflow.cli._tls_options import (
    add_cluster_tls_options,
    add_node_tls_options,
    cluster_tls_layout,
    given_node_tls,
    node_tls_arguments,
    tls_summary,
)
from ringflow.cluster.service import (
    CAPTURE_OPTIONS,
    CAPTURE_POLICIES,
    TIMING_OPTIONS,
    CaptureSettings,
    NodeTimings,
)
from ringflow.errors import ConfigurationError, RingflowError
from ringflow.node import (
    DEFAULT_IGNORE_MSB,
    DEFAULT_SHARD_COUNT,
    NodeRecord,
    node_config,
    prepare_data_dir,
    save_record,
)
from ringflow.ring import (
    Host,
    TokenMetadata,
    allocate_balanced,
    allocate_random,
    ownership_report,
    replication_strategy,
)
from ringflow.runtime import run_event_loop

if TYPE_CHECKING:
    from ringflow.cli import Subcommands

LAYOUT_FILE = "cluster.json"
STATUS_FILE = "status.json"
PID_FILE = "pid"
LOG_FILE = "node.log"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_NODES = 32
_LAUNCH = "import sys; from ringflow.cli import main; sys.exit(main())"


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("cluster", help="run a local multi-process cluster")
    actions = parser.add_subparsers(dest="cluster_command", metavar="<action>", required=True)
    start = actions.add_parser("start", help="lay out (once) and start a local cluster")
    start.add_argument("--nodes", type=int, default=3)
    start.add_argument("--dcs", help="data centers and their node counts, e.g. dc1:3,dc2:2")
    start.add_argument("--racks", type=int, default=1, help="racks per data center")
    start.add_argument("--num-tokens", type=int, default=8)
    start.add_argument(
        "--first-address", default="127.0.0.1", help="node i listens on this address + i - 1"
    )
    add_timing_options(start)
    add_capture_options(start)
    add_native_options(start)
    add_cluster_tls_options(start)
    add_auth_options(start, shorthand=True)
    start.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for UP")
    start.add_argument("--data", required=True, type=Path)
    start.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="the nodes' log level in node.log (default WARNING; kept for later starts)",
    )
    add_feature_options(start)
    start.set_defaults(handler=run_cluster_start)
    for name, handler, text in (
        ("status", run_cluster_status, "print every node's view of the cluster"),
        ("stop", run_cluster_stop, "stop every node (SIGTERM)"),
    ):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("--data", required=True, type=Path)
        if name == "status":
            sub.add_argument(
                "--rf", type=int, default=3, help="replicas per DC for the effective ownership"
            )
        sub.set_defaults(handler=handler)
    for name, handler, text in (
        ("kill", run_node_kill, "SIGKILL one node (a crash)"),
        ("restart", run_node_restart, "start a stopped or killed node again"),
    ):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("address")
        sub.add_argument("--data", required=True, type=Path)
        if name == "restart":
            add_feature_options(sub)
        sub.set_defaults(handler=handler)
    from ringflow.cli._cdc_admin import register_cdc_admin

    register_cdc_admin(actions)  # new-cdc-generation
    from ringflow.cli._topology import register_cluster

    register_cluster(actions)  # add, decommission, join-node
    from ringflow.cli._repair import register_repair

    register_repair(actions)  # repair
    node = actions.add_parser("run-node", help="(internal) run one cluster node in the foreground")
    node.add_argument("--address", required=True)
    node.add_argument("--data", required=True, type=Path)
    node.add_argument("--seeds", required=True, help="comma-separated seed addresses")
    add_timing_options(node)
    add_capture_options(node)
    add_native_options(node)
    add_node_tls_options(node)
    add_auth_options(node)
    add_feature_options(node)
    node.add_argument("--log-level", default="WARNING", choices=LOG_LEVELS)
    node.set_defaults(handler=run_cluster_node_command)


# -- timing options --------------------------------------------------------------------------


def add_timing_options(parser: argparse.ArgumentParser) -> None:
    """One option per node timing setting (``--write-timeout-ms`` ...), all optional."""
    group = parser.add_argument_group("node timings (default: the node's defaults)")
    defaults = NodeTimings()
    for option in TIMING_OPTIONS:
        group.add_argument(
            option.flag,
            dest=option.name,
            type=option.kind,
            metavar="N",
            help=f"{option.help} ({option.low:g}..{option.high:g}, default "
            f"{getattr(defaults, option.name):g})",
        )


def given_timings(arguments: argparse.Namespace) -> dict[str, int | float]:
    """The timing options given on the command line, validated (ConfigurationError: exit 2)."""
    given = {
        option.name: getattr(arguments, option.name)
        for option in TIMING_OPTIONS
        if getattr(arguments, option.name, None) is not None
    }
    NodeTimings.of(given)
    return given


def timing_arguments(timings: dict[str, int | float]) -> list[str]:
    """``timings`` as command-line options (for a node process)."""
    NodeTimings.of(timings)
    flags = {option.name: option.flag for option in TIMING_OPTIONS}
    return [part for name, value in sorted(timings.items()) for part in (flags[name], str(value))]


# -- replica capture options ------------------------------------------------------------------


def add_capture_options(parser: argparse.ArgumentParser) -> None:
    """The replica-side capture's options (``CAPTURE_OPTIONS``, the policy, the switch)."""
    group = parser.add_argument_group("replica capture (default: the node's defaults)")
    defaults = CaptureSettings()
    for option in CAPTURE_OPTIONS:
        group.add_argument(
            option.flag,
            dest=option.name,
            type=option.kind,
            default=None,
            help=f"{option.help} ({option.low}..{option.high}, default "
            f"{getattr(defaults, option.name)})",
        )
    group.add_argument(
        "--capture-policy",
        dest="capture_policy",
        choices=CAPTURE_POLICIES,
        default=None,
        help="past the cap: refuse CDC writes, or drop the oldest sealed slices (default "
        f"{defaults.capture_policy})",
    )
    group.add_argument(
        "--replica-capture",
        dest="replica_capture",
        choices=("on", "off"),
        default=None,
        help="capture every CDC log row on every replica into time slices (default on)",
    )
    group.add_argument(
        "--drop-sent-slices",
        dest="drop_sent_slices",
        choices=("on", "off"),
        default=None,
        help="drop a captured slice once every collecting channel of its table has it sent, "
        "at once for a table without one (synch-delete; default on; off: keep every slice "
        "until the capture's cap)",
    )


def given_capture(arguments: argparse.Namespace) -> dict[str, object]:
    """The capture options given on the command line, validated (ConfigurationError: exit 2)."""
    given: dict[str, object] = {
        option.name: getattr(arguments, option.name)
        for option in CAPTURE_OPTIONS
        if getattr(arguments, option.name, None) is not None
    }
    if getattr(arguments, "capture_policy", None) is not None:
        given["capture_policy"] = arguments.capture_policy
    if getattr(arguments, "replica_capture", None) is not None:
        given["enabled"] = arguments.replica_capture == "on"
    if getattr(arguments, "drop_sent_slices", None) is not None:
        given["drop_sent_slices"] = arguments.drop_sent_slices == "on"
    CaptureSettings.of(given)
    return given


def capture_arguments(values: dict[str, object]) -> list[str]:
    """Capture settings as command-line options (for a node process)."""
    settings = CaptureSettings.of(values)
    parts: list[str] = []
    for name in sorted(values):
        if name == "enabled":
            parts += ["--replica-capture", "on" if settings.enabled else "off"]
        elif name == "drop_sent_slices":
            parts += ["--drop-sent-slices", "on" if settings.drop_sent_slices else "off"]
        else:
            parts += ["--" + name.replace("_", "-"), str(values[name])]
    return parts


def layout_capture(layout: dict[str, object]) -> dict[str, object]:
    saved = layout.get("capture")
    return dict(saved) if isinstance(saved, dict) else {}


def _layout_timings(layout: dict[str, object]) -> dict[str, int | float]:
    saved = layout.get("timings")
    timings = dict(saved) if isinstance(saved, dict) else {}
    legacy = layout.get("gossip_interval_ms")  # layouts written before "timings"
    if isinstance(legacy, int) and "gossip_interval_ms" not in timings:
        timings["gossip_interval_ms"] = legacy
    return timings


# -- layout ----------------------------------------------------------------------------------


def parse_dcs(nodes: int, dcs: str | None) -> list[tuple[str, int]]:
    """``dc1:3,dc2:2`` as ``[("dc1", 3), ("dc2", 2)]``; one ``datacenter1`` of ``nodes`` if None."""
    if dcs is None:
        return [("datacenter1", nodes)]
    result = []
    for part in dcs.split(","):
        name, _, count = part.partition(":")
        if not name or not count.isdigit() or int(count) < 1:
            raise ConfigurationError(f"--dcs: {part!r} is not 'name:count'")
        result.append((name, int(count)))
    return result


def plan_layout(
    dcs: list[tuple[str, int]],
    racks: int,
    num_tokens: int,
    rng: random.Random,
    first_address: str = "127.0.0.1",
) -> list[dict[str, object]]:
    """Addresses, DCs, racks, host ids and balanced tokens of every node."""
    total = sum(count for _, count in dcs)
    if not 1 <= total <= MAX_NODES:
        raise ConfigurationError(f"a local cluster has 1..{MAX_NODES} nodes, not {total}")
    if racks < 1:
        raise ConfigurationError(f"--racks must be >= 1, got {racks}")
    first = ipaddress.IPv4Address(first_address)
    if not first.is_loopback or not (first + total - 1).is_loopback:
        raise ConfigurationError(f"--first-address {first_address}: the nodes must be on loopback")
    ring = TokenMetadata()
    nodes: list[dict[str, object]] = []
    for dc, count in dcs:
        for index in range(count):
            address = str(first + len(nodes))
            rack = f"rack{index % racks + 1}"
            host = Host(uuid.UUID(int=rng.getrandbits(128), version=4), f"{address}:7000", dc, rack)
            try:
                tokens = allocate_balanced(
                    ring, host, num_tokens, min(3, count), rng, planned_rack_count=min(racks, count)
                )
            except RingflowError:
                tokens = allocate_random(ring, num_tokens, rng)
            ring = ring.with_tokens(host, tokens)
            nodes.append(
                {
                    "address": address,
                    "dc": dc,
                    "rack": rack,
                    "host_id": str(host.host_id),
                    "tokens": sorted(tokens),
                    "dir": f"node{len(nodes) + 1}",
                }
            )
    return nodes


def _load_layout(data: Path) -> dict[str, object]:
    path = data / LAYOUT_FILE
    if not path.exists():
        raise ConfigurationError(f"{path} does not exist: run 'ringflow cluster start' first")
    layout: dict[str, object] = json.loads(path.read_text())
    return layout


def _nodes(layout: dict[str, object]) -> list[dict[str, object]]:
    nodes = layout["nodes"]
    assert isinstance(nodes, list)
    return nodes


def _seeds(nodes: list[dict[str, object]]) -> list[str]:
    first: dict[object, str] = {}
    for node in nodes:
        first.setdefault(node["dc"], str(node["address"]))
    return list(first.values())


def _create(data: Path, arguments: argparse.Namespace) -> dict[str, object]:
    rng = random.Random()
    dcs = parse_dcs(arguments.nodes, arguments.dcs)
    nodes = plan_layout(dcs, arguments.racks, arguments.num_tokens, rng, arguments.first_address)
    for node in nodes:
        directory = data / str(node["dir"])
        prepare_data_dir(directory)
        tokens = node["tokens"]
        assert isinstance(tokens, list)
        record = NodeRecord(
            host_id=uuid.UUID(str(node["host_id"])),
            tokens=tuple(int(token) for token in tokens),
            cluster_name="ringflow",
            dc=str(node["dc"]),
            rack=str(node["rack"]),
            shard_count=DEFAULT_SHARD_COUNT,
            ignore_msb=DEFAULT_IGNORE_MSB,
        )
        save_record(directory, record)
    layout: dict[str, object] = {
        "nodes": nodes,
        "timings": given_timings(arguments),
        "capture": given_capture(arguments),
        "native": given_native_options(arguments),
        "auth": given_auth_options(arguments),
    }
    tls = cluster_tls_layout(arguments, data, [str(node["address"]) for node in nodes])
    if tls is not None:
        layout["tls"] = tls
    data.mkdir(parents=True, exist_ok=True)
    (data / LAYOUT_FILE).write_text(json.dumps(layout, indent=1))
    return layout


# -- processes -------------------------------------------------------------------------------


def _pid(directory: Path) -> int | None:
    """The pid of the node running in ``directory``, or None if it is not running."""
    try:
        pid = int((directory / PID_FILE).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return None if _is_zombie(pid) else pid


def _is_zombie(pid: int) -> bool:
    """A killed process nobody has reaped yet still answers ``kill(pid, 0)``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].startswith("Z")


def _wait_gone(directory: Path, timeout_s: float) -> None:
    """Block until the node in ``directory`` has exited (a kill is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while _pid(directory) is not None:
        if time.monotonic() > deadline:
            raise ConfigurationError(f"the node in {directory} did not exit within {timeout_s} s")
        time.sleep(0.05)


def add_feature_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cdc-generations-v2",
        action="store_true",
        help="do not advertise the CDC_GENERATIONS_V2 feature (act as an older version: v1 CDC "
        "generations only); a node started without this option has it",
    )


def feature_arguments(arguments: argparse.Namespace) -> list[str]:
    """The feature options of ``arguments`` for a ``run-node`` command line."""
    return ["--no-cdc-generations-v2"] if getattr(arguments, "no_cdc_generations_v2", False) else []


def _spawn(
    data: Path, layout: dict[str, object], node: dict[str, object], extra: Sequence[str] = ()
) -> int:
    directory = data / str(node["dir"])
    if (pid := _pid(directory)) is not None:
        return pid
    (directory / STATUS_FILE).unlink(missing_ok=True)
    command = [
        sys.executable,
        "-c",
        _LAUNCH,
        "cluster",
        "run-node",
        "--address",
        str(node["address"]),
        "--data",
        str(directory),
        "--seeds",
        ",".join(_seeds(_nodes(layout))),
        *timing_arguments(_layout_timings(layout)),
        *capture_arguments(layout_capture(layout)),
        *native_arguments(layout.get("native")),
        *node_tls_arguments(layout.get("tls"), str(node["address"])),
        *auth_arguments(layout.get("auth")),
    ]
    if isinstance(level := layout.get("log_level"), str):
        command.extend(("--log-level", level))
    command.extend(extra)
    with (directory / LOG_FILE).open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    (directory / PID_FILE).write_text(str(process.pid))
    return process.pid


def _statuses(data: Path, layout: dict[str, object]) -> list[dict[str, object] | None]:
    found: list[dict[str, object] | None] = []
    for node in _nodes(layout):
        path = data / str(node["dir"]) / STATUS_FILE
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            document = None
        if _pid(data / str(node["dir"])) is None:
            document = None
        found.append(document)
    return found


def cluster_ready(data: Path, layout: dict[str, object]) -> bool:
    """Every running node sees every other one UP, all with one schema version and one CDC
    generation loaded (so CDC writes are accepted as soon as ``start`` returns)."""
    statuses = _statuses(data, layout)
    expected = len(_nodes(layout))
    versions: set[object] = set()
    generations: set[object] = set()
    for status in statuses:
        if status is None:
            return False
        nodes = status["nodes"]
        if not isinstance(nodes, list) or len(nodes) != expected:
            return False
        if any(node["state"] != "UN" for node in nodes):
            return False
        versions.add(status["schema_version"])
        # A node gossips its CDC generation id once it has loaded that generation.
        generations.update(node.get("cdc_generation") for node in nodes)
    return len(versions) == 1 and len(generations) == 1 and None not in generations


def wait_ready(data: Path, layout: dict[str, object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not cluster_ready(data, layout):
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"the cluster in {data} was not UP with schema agreement and one CDC generation "
                f"after {timeout_s} s; "
                "see the nodes' node.log"
            )
        time.sleep(0.2)


# -- commands ----------------------------------------------------------------------------------


def run_cluster_start(arguments: argparse.Namespace) -> int:
    data: Path = arguments.data
    timings = given_timings(arguments)
    capture = given_capture(arguments)
    native = given_native_options(arguments)
    changed = False  # new settings for the nodes started from now on, saved once
    if (data / LAYOUT_FILE).exists():
        layout = _load_layout(data)
        if getattr(arguments, "tls", False) and "tls" not in layout:
            raise ConfigurationError(f"{data} holds a cluster laid out without --tls")
        if timings or capture or native:
            layout["timings"] = {**_layout_timings(layout), **timings}
            layout["capture"] = {**layout_capture(layout), **capture}
            saved_native = layout.get("native")
            layout["native"] = {
                **(saved_native if isinstance(saved_native, dict) else {}),
                **native,
            }
            changed = True
    else:
        layout = _create(data, arguments)
    auth = given_auth_options(arguments)
    if auth and auth != layout.get("auth"):
        layout["auth"] = auth
        changed = True
    level = getattr(arguments, "log_level", None)
    if level and level != layout.get("log_level"):
        layout["log_level"] = level
        changed = True
    if changed:
        (data / LAYOUT_FILE).write_text(json.dumps(layout, indent=1))
    for node in _nodes(layout):
        _spawn(data, layout, node, feature_arguments(arguments))
    wait_ready(data, layout, arguments.timeout)
    print(f"ringflow cluster of {len(_nodes(layout))} nodes is UP in {data}", flush=True)
    return EXIT_OK


def effective_ownership(layout: dict[str, object], rf: int) -> dict[str, float]:
    """Each node's effective ownership (fraction of the ring it replicates) for a keyspace with
    ``rf`` replicas in every DC (NetworkTopologyStrategy), as ``nodetool status <keyspace>``."""
    tokens_by_host = {}
    for node in _nodes(layout):
        tokens = node["tokens"]
        host = Host(
            uuid.UUID(str(node["host_id"])),
            str(node["address"]),
            str(node["dc"]),
            str(node["rack"]),
        )
        tokens_by_host[host] = [int(t) for t in tokens] if isinstance(tokens, list) else []
    metadata = TokenMetadata(tokens_by_host)
    options = {"class": "NetworkTopologyStrategy"}
    options.update({dc: str(rf) for dc in metadata.datacenters()})
    report = ownership_report(metadata, replication_strategy(options))
    return {row.host.endpoint: row.effective_ownership for row in report.rows}


def format_status(data: Path, layout: dict[str, object], rf: int = 3) -> str:
    """A nodetool-status-like table, from the first running node's view."""
    statuses = [s for s in _statuses(data, layout) if s is not None]
    lines = [
        f"Address    State Load(B)    Tokens Owns (effective, RF {rf} per DC)  Host ID"
        "                              Rack   Schema                               CDC generation"
    ]
    if not statuses:
        return "no node is running"
    view = statuses[0]
    loads = {s["address"]: s["load_bytes"] for s in statuses}
    nodes = view["nodes"]
    if not isinstance(nodes, list):
        raise ConfigurationError(f"malformed status document in {data}")
    owns = effective_ownership(layout, rf)
    for node in _nodes(layout):
        seen = next((n for n in nodes if n["address"] == node["address"]), None)
        state = "DN" if seen is None else seen["state"]
        tokens = len(node["tokens"]) if isinstance(node["tokens"], list) else 0
        share = f"{100 * owns.get(str(node['address']), 0.0):.1f}%"
        lines.append(
            f"{node['address']:<10} {state:<5} {loads.get(node['address'], '?')!s:<10} "
            f"{tokens:<6} {share:<33} {node['host_id']} {node['rack']:<6} "
            f"{None if seen is None else seen['schema_version']} "
            f"{None if seen is None else seen['cdc_generation']}"
        )
    lines.extend(
        capture_summary(status) for status in statuses if isinstance(status.get("capture"), dict)
    )
    lines.append(auth_summary(statuses, layout))
    tls = tls_summary(layout.get("tls"))
    if tls is not None:
        lines.append(tls)
    lines.extend(tls_checks(statuses, layout, data))
    from ringflow.cli._repair import format_last_repairs

    lines.extend(format_last_repairs(data, layout))
    return "\n".join(lines)


def capture_summary(status: Mapping[str, object]) -> str:
    """One line on a node's replica capture, from its ``status.json``: slices open, sealed and
    not yet published, rows and bytes held, slices dropped once sent (synch-delete), and how
    far its oldest seal watermark is behind the time the status was written."""
    capture = status.get("capture")
    if not isinstance(capture, Mapping):
        return f"capture {status.get('address')}: off"
    publication = capture.get("publication")
    publication = publication if isinstance(publication, Mapping) else {}
    synch = capture.get("synch_delete")
    dropped = (
        f"{synch.get('dropped_slices')} dropped once sent"
        if isinstance(synch, Mapping)
        else "synch-delete off"
    )
    marks = publication.get("watermarks_ms")
    written = status.get("written_ms")
    lag = ""
    if isinstance(marks, Mapping) and marks and isinstance(written, int):
        behind_s = (written - min(int(str(mark)) for mark in marks.values())) / 1000
        lag = f", watermarks up to {behind_s:.1f} s behind"
    failing = ", publication FAILING" if publication.get("failing") else ""
    return (
        f"capture {status.get('address')}: {capture.get('slices_open')} open, "
        f"{capture.get('slices_sealed')} sealed ({publication.get('unpublished_slices')} "
        f"unpublished), {capture.get('rows')} rows, {capture.get('size_bytes')} bytes; "
        f"{dropped}{lag}{failing}"
    )


def run_cluster_status(arguments: argparse.Namespace) -> int:
    print(format_status(arguments.data, _load_layout(arguments.data), arguments.rf), flush=True)
    return EXIT_OK


def _signal_node(data: Path, node: dict[str, object], signal_number: int) -> bool:
    pid = _pid(data / str(node["dir"]))
    if pid is None:
        return False
    os.kill(pid, signal_number)
    return True


def run_cluster_stop(arguments: argparse.Namespace) -> int:
    data: Path = arguments.data
    layout = _load_layout(data)
    for node in _nodes(layout):
        _signal_node(data, node, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while any(_pid(data / str(n["dir"])) for n in _nodes(layout)):
        if time.monotonic() > deadline:
            for node in _nodes(layout):
                _signal_node(data, node, signal.SIGKILL)
            break
        time.sleep(0.1)
    print("ringflow cluster stopped", flush=True)
    return EXIT_OK


def _node_at(layout: dict[str, object], address: str) -> dict[str, object]:
    for node in _nodes(layout):
        if node["address"] == address:
            return node
    raise ConfigurationError(f"no node of this cluster has address {address}")


def run_node_kill(arguments: argparse.Namespace) -> int:
    layout = _load_layout(arguments.data)
    node = _node_at(layout, arguments.address)
    if not _signal_node(arguments.data, node, signal.SIGKILL):
        raise ConfigurationError(f"node {arguments.address} is not running")
    _wait_gone(arguments.data / str(node["dir"]), timeout_s=10.0)
    print(f"killed {arguments.address}", flush=True)
    return EXIT_OK


def run_node_restart(arguments: argparse.Namespace) -> int:
    layout = _load_layout(arguments.data)
    node = _node_at(layout, arguments.address)
    pid = _spawn(arguments.data, layout, node, feature_arguments(arguments))
    print(f"started {arguments.address} (pid {pid})", flush=True)
    return EXIT_OK


def run_cluster_node_command(arguments: argparse.Namespace) -> int:
    from ringflow.node import run_cluster_node

    logging.basicConfig(
        level=arguments.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    client_encryption, server_encryption = given_node_tls(arguments)
    config = node_config(
        address=arguments.address,
        data_dir=arguments.data,
        limits=given_native_limits(arguments),
        client_encryption=client_encryption,
        server_encryption=server_encryption,
        auth=auth_settings_of(given_auth_options(arguments)),
    )
    seeds = [seed for seed in arguments.seeds.split(",") if seed]
    timings = NodeTimings.of(given_timings(arguments))
    capture = CaptureSettings.of(given_capture(arguments))

    def announce(line: str) -> None:
        print(line, flush=True)

    run_event_loop(
        run_cluster_node(
            config,
            seeds=seeds,
            cdc_generations_v2=not arguments.no_cdc_generations_v2,
            timings=timings,
            capture=capture,
            on_ready=announce,
        )
    )
    return EXIT_OK
