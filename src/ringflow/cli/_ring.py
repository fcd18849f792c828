"""``ringflow ring``: build a sample ring, print its ownership table, optionally plot it.

A thin shell over ``ringflow.ring`` (cassandra-core.md §3-4): hosts are laid out DC by DC with
racks assigned round-robin, joined one at a time (DCs interleaved) with the chosen allocator,
and measured under NetworkTopologyStrategy with ``--rf`` in every DC. ``--dcs dc1:3,dc2:3``
gives each DC's node count. Everything is seeded by ``--seed``.
"""

from __future__ import annotations

import argparse
import math
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ringflow.errors import ClientError
from ringflow.ring import (
    Host,
    OwnershipReport,
    ReplicationFactor,
    RingError,
    TokenMetadata,
    grow_ring,
    ownership_report,
    replication_strategy,
    unbias,
)

if TYPE_CHECKING:
    from ringflow.cli import Subcommands

MAX_NODES = 1000
MAX_VNODES = 1024
MAX_RACKS = 64
_BALANCED_TOKENS_WARNING = 20_000


@dataclass(frozen=True, slots=True)
class RingSpec:
    """The cluster the command builds."""

    nodes_by_dc: tuple[tuple[str, int], ...]
    vnodes: int
    replication_factor: ReplicationFactor
    racks: int
    allocator: str
    seed: int

    @property
    def node_count(self) -> int:
        return sum(count for _, count in self.nodes_by_dc)


def _positive(limit: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not 1 <= value <= limit:
            raise argparse.ArgumentTypeError(f"{value} must be between 1 and {limit}")
        return value

    return parse


def _replication_factor(text: str) -> ReplicationFactor:
    try:
        return ReplicationFactor.parse(text)
    except RingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _datacenters(text: str) -> tuple[tuple[str, int], ...]:
    """Parse ``dc1:3,dc2:3`` (DC name: node count)."""
    parsed: list[tuple[str, int]] = []
    for item in text.split(","):
        name, separator, count = item.strip().partition(":")
        if not separator or not name or not count.strip().isdigit():
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not <dc name>:<node count>, e.g. dc1:3,dc2:3"
            )
        if int(count) < 1:
            raise argparse.ArgumentTypeError(f"datacenter {name!r} needs at least 1 node")
        if name in dict(parsed):
            raise argparse.ArgumentTypeError(f"datacenter {name!r} is listed twice")
        parsed.append((name, int(count)))
    return tuple(parsed)


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "ring",
        help="build a sample token ring and show each host's effective ownership",
        description="Build a sample token ring and show each host's effective ownership "
        "under NetworkTopologyStrategy with --rf in every datacenter.",
    )
    parser.add_argument("--nodes", type=_positive(MAX_NODES), help="total node count")
    parser.add_argument("--vnodes", type=_positive(MAX_VNODES), default=16, help="tokens per node")
    parser.add_argument(
        "--rf", type=_replication_factor, default=ReplicationFactor(3), help="RF per DC: 3 or 3/1"
    )
    parser.add_argument(
        "--dcs", type=_datacenters, help="node count per datacenter, e.g. dc1:3,dc2:3"
    )
    parser.add_argument(
        "--racks", type=_positive(MAX_RACKS), default=1, help="racks per DC (round-robin)"
    )
    parser.add_argument("--allocator", choices=("random", "balanced"), default="balanced")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write a ring plot to this file")
    parser.set_defaults(handler=run)


def spec_from(arguments: argparse.Namespace) -> RingSpec:
    """Cross-check the arguments; a contradiction is a RingError (exit 2)."""
    nodes: int | None = arguments.nodes
    datacenters: tuple[tuple[str, int], ...] | None = arguments.dcs
    if datacenters is None:
        if nodes is None:
            raise RingError("give --nodes N, or --dcs with each DC's node count")
        datacenters = (("dc1", nodes),)
    total = sum(count for _, count in datacenters)
    if nodes is not None and nodes != total:
        raise RingError(f"--nodes {nodes} does not match the {total} nodes of --dcs")
    if total > MAX_NODES:
        raise RingError(f"--dcs adds up to {total} nodes; the limit is {MAX_NODES}")
    return RingSpec(
        nodes_by_dc=datacenters,
        vnodes=arguments.vnodes,
        replication_factor=arguments.rf,
        racks=arguments.racks,
        allocator=arguments.allocator,
        seed=arguments.seed,
    )


def hosts_of(spec: RingSpec, rng: random.Random) -> list[Host]:
    """Hosts in join order: DCs interleaved, racks round-robin inside each DC."""
    per_dc: list[list[tuple[str, str]]] = [
        [(dc, f"rack{index % spec.racks + 1}") for index in range(count)]
        for dc, count in spec.nodes_by_dc
    ]
    order: list[tuple[str, str]] = []
    for row in range(max(len(column) for column in per_dc)):
        order.extend(column[row] for column in per_dc if row < len(column))
    hosts = []
    for number, (dc, rack) in enumerate(order):
        endpoint = f"127.0.{number // 254}.{number % 254 + 1}"
        hosts.append(Host(uuid.UUID(int=rng.getrandbits(128), version=4), endpoint, dc, rack))
    return hosts


def build(spec: RingSpec) -> tuple[TokenMetadata, OwnershipReport]:
    rng = random.Random(spec.seed)
    hosts = hosts_of(spec, rng)
    factor = spec.replication_factor
    metadata = grow_ring(
        hosts,
        spec.vnodes,
        rng,
        allocator="balanced" if spec.allocator == "balanced" else "random",
        replication_factor_by_dc={dc: factor.all_replicas for dc, _ in spec.nodes_by_dc},
        planned_rack_count_by_dc={dc: min(spec.racks, n) for dc, n in spec.nodes_by_dc},
    )
    strategy = replication_strategy(
        {"class": "NetworkTopologyStrategy", **{dc: str(factor) for dc, _ in spec.nodes_by_dc}}
    )
    return metadata, ownership_report(metadata, strategy)


def _title(spec: RingSpec) -> str:
    return (
        f"{spec.node_count} nodes x {spec.vnodes} vnodes, RF {spec.replication_factor} per DC, "
        f"{spec.allocator} allocator, seed {spec.seed}"
    )


def print_report(console: Console, spec: RingSpec, report: OwnershipReport) -> None:
    table = Table(title=f"Effective ownership: {_title(spec)}", title_justify="left")
    for header in ("Host", "DC", "Rack", "Tokens", "Primary", "Owns (effective)", "vs DC mean"):
        table.add_column(header, justify="right" if header[0] in "TPOv" else "left")
    dc_means = {dc: summary.mean_ownership for dc, summary in report.by_dc}
    for row in report.rows:
        mean = dc_means.get(row.host.dc, 0.0)
        ratio = f"{row.effective_ownership / mean:.3f}" if mean else "-"
        table.add_row(
            row.host.endpoint,
            row.host.dc,
            row.host.rack,
            str(row.token_count),
            f"{row.primary_ownership * 100:.2f} %",
            f"{row.effective_ownership * 100:.2f} %",
            ratio,
        )
    console.print(table)
    for dc, summary in report.by_dc:
        console.print(
            f"{dc}: {summary.host_count} hosts, mean {summary.mean_ownership * 100:.2f} %, "
            f"max/mean {summary.max_over_mean:.3f}, min/mean {summary.min_over_mean:.3f}, "
            f"stddev/mean {summary.stddev_over_mean:.3f}"
        )


def run(arguments: argparse.Namespace) -> int:
    spec = spec_from(arguments)
    console = Console()
    if spec.allocator == "balanced" and spec.node_count * spec.vnodes > _BALANCED_TOKENS_WARNING:
        console.print(
            f"[yellow]note:[/] balanced allocation of {spec.node_count * spec.vnodes} tokens "
            "takes a while (pure Python); --allocator random is instant"
        )
    metadata, report = build(spec)
    print_report(console, spec, report)
    if arguments.plot is not None:
        plot_ring(arguments.plot, spec, metadata, report)
        console.print(f"ring plot written to {arguments.plot}")
    return 0


# -- the plot --------------------------------------------------------------------------------


def _angle(token: int) -> float:
    return 2 * math.pi * unbias(token) / 2**64


def _host_colours(count: int) -> list[Any]:
    from matplotlib import colormaps

    palette = colormaps["tab20"] if count > 10 else colormaps["tab10"]
    return [palette(index % palette.N) for index in range(count)]


def _draw_ring(axis: Any, metadata: TokenMetadata, colours: list[Any], dc_colours: Any) -> None:
    """Outer band: each token's primary range in its host's colour; inner band: the host's DC."""
    axis.set_theta_zero_location("N")
    axis.set_theta_direction(-1)  # clockwise, the direction replicas are found in
    tokens = metadata.sorted_tokens
    owners = metadata.owner_indices.tolist()
    starts = [_angle(tokens[index - 1]) for index in range(len(tokens))]
    widths = [metadata.range_ending_at(index).size * 2 * math.pi for index in range(len(tokens))]
    host_colours = [colours[owner] for owner in owners]
    axis.bar(
        starts,
        0.45,
        width=widths,
        bottom=0.55,
        align="edge",
        color=host_colours,
        edgecolor="white",
        linewidth=0.3,
    )
    dcs = [metadata.hosts[owner].dc for owner in owners]
    axis.bar(
        starts,
        0.12,
        width=widths,
        bottom=0.4,
        align="edge",
        color=[dc_colours[dc] for dc in dcs],
        linewidth=0,
    )
    axis.set_ylim(0, 1.02)
    axis.set_yticks([])
    axis.set_xticks([0, math.pi / 2, math.pi, 3 * math.pi / 2])
    axis.set_xticklabels(["MIN / MAX", "-2^62", "0", "2^62"], fontsize=8)
    axis.grid(False)
    axis.spines["polar"].set_visible(False)
    axis.set_title("Token ring: primary ranges by host (outer), by DC (inner)", fontsize=10)


def _draw_bars(axis: Any, report: OwnershipReport, colours: list[Any]) -> None:
    rows = report.rows
    positions = list(range(len(rows)))
    values = [row.effective_ownership * 100 for row in rows]
    axis.barh(positions, values, color=colours, edgecolor="black", linewidth=0.3)
    dc_means = {dc: summary.mean_ownership * 100 for dc, summary in report.by_dc}
    if len(rows) <= 40:
        for position, value, row in zip(positions, values, rows, strict=True):
            mean = dc_means.get(row.host.dc, 0.0)
            ratio = f" ({value / mean:.2f}x)" if mean else ""
            axis.text(value, position, f" {value:.1f} %{ratio}", va="center", fontsize=7)
    labels = [f"{row.host.endpoint} {row.host.dc}/{row.host.rack}" for row in rows]
    axis.set_yticks(positions)
    axis.set_yticklabels(labels, fontsize=8 if len(rows) <= 40 else 5)
    axis.invert_yaxis()
    styles = ["--", ":", "-.", (0, (5, 1, 1, 1))]
    for index, (dc, summary) in enumerate(report.by_dc):
        mean = summary.mean_ownership * 100
        axis.axvline(
            mean,
            color="black",
            linestyle=styles[index % len(styles)],
            linewidth=0.9,
            label=f"{dc} mean {mean:.1f} %",
        )
    if report.by_dc:
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    axis.set_xlabel("effective ownership (% of the ring replicated on the host)")
    summary_lines = [
        f"{dc}: max/mean {s.max_over_mean:.3f}  min/mean {s.min_over_mean:.3f}  "
        f"stddev/mean {s.stddev_over_mean:.3f}"
        for dc, s in report.by_dc
    ]
    axis.set_title("\n".join(summary_lines), fontsize=9)
    axis.set_xlim(0, max(values) * 1.25)  # room for the value labels


def plot_ring(path: Path, spec: RingSpec, metadata: TokenMetadata, report: OwnershipReport) -> None:
    """Write a PNG: the ring coloured by host next to each host's effective ownership."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    colours = _host_colours(len(metadata.hosts))
    dc_names = list(metadata.datacenters())
    dc_palette = matplotlib.colormaps["Dark2"]
    dc_colours = {dc: dc_palette(index % dc_palette.N) for index, dc in enumerate(dc_names)}
    height = max(6.0, 0.22 * len(metadata.hosts) + 2)
    figure = pyplot.figure(figsize=(15, height))
    ring_axis = figure.add_subplot(1, 2, 1, projection="polar")
    _draw_ring(ring_axis, metadata, colours, dc_colours)
    ring_axis.legend(
        handles=[Patch(color=dc_colours[dc], label=dc) for dc in dc_names],
        loc="center",
        fontsize=9,
        frameon=False,
    )
    _draw_bars(figure.add_subplot(1, 2, 2), report, colours)
    figure.suptitle(f"ringflow ring: {_title(spec)}", fontsize=12)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=110)
    except OSError as error:
        raise ClientError(f"cannot write the plot to {path}: {error.strerror}") from None
    finally:
        pyplot.close(figure)
