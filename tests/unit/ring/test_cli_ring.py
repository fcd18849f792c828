"""``ringflow ring``: the table, the plot, and clean exit code 2 on bad arguments.

Proves: ``main`` prints one row per host with its effective ownership and the per-DC summary,
figures that agree with ``ownership_report`` on the same seeded ring; ``--plot`` writes a real
PNG; every bad argument ends with exit code 2, one clear line, no traceback.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import matplotlib.image
import pytest

from ringflow.cli import build_parser, main
from ringflow.cli._ring import build, hosts_of, spec_from
from ringflow.ring import grow_ring


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "ring.png"
    argv = ["ring", "--nodes", "8", "--vnodes", "8", "--rf", "3", "--dcs", "dc1:4,dc2:4"]
    argv += ["--racks", "1", "--allocator", "random", "--seed", "5", "--plot", str(plot)]
    code, out, err = run(argv, capsys)
    assert (code, err) == (0, "")
    row_pattern = (
        r"(127\.0\.0\.\d+)\s*│\s*(dc\d)\s*│\s*rack\d\s*│\s*8\s*│\s*([\d.]+) %\s*│\s*([\d.]+) %"
    )
    rows = re.findall(row_pattern, out)
    assert len(rows) == 8
    _, report = build(spec_from(build_parser().parse_args(argv)))
    expected = {
        r.host.endpoint: (
            r.host.dc,
            f"{r.primary_ownership * 100:.2f}",
            f"{r.effective_ownership * 100:.2f}",
        )
        for r in report.rows
    }
    assert {endpoint: (dc, primary, owns) for endpoint, dc, primary, owns in rows} == expected
    for dc, summary in report.by_dc:
        assert f"{dc}: 4 hosts" in out
        assert f"max/mean {summary.max_over_mean:.3f}" in out
        assert f"stddev/mean {summary.stddev_over_mean:.3f}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(plot).shape
    assert width > 1000 and height > 500


def test_same_seed_same_ring_through_the_cli_helpers() -> None:
    argv = ["ring", "--nodes", "5", "--vnodes", "4", "--rf", "2", "--seed", "9"]
    spec = spec_from(build_parser().parse_args(argv))
    first, _ = build(spec)
    rng = random.Random(9)
    hosts = hosts_of(spec, rng)
    assert [h.endpoint for h in hosts] == [f"127.0.0.{n}" for n in range(1, 6)]
    again = grow_ring(
        hosts, 4, rng, replication_factor_by_dc={"dc1": 2}, planned_rack_count_by_dc={"dc1": 1}
    )
    assert again.sorted_tokens == first.sorted_tokens


def test_default_dc_and_balanced_allocator(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["ring", "--nodes", "6", "--vnodes", "16", "--rf", "3"], capsys)
    assert code == 0
    match = re.search(r"dc1: 6 hosts, mean 50\.00 %, max/mean ([\d.]+)", out)
    assert match is not None and float(match.group(1)) <= 1.10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ring", "--nodes", "0"], "0 must be between 1 and 1000"),
        (["ring", "--nodes", "abc"], "'abc' is not an integer"),
        (["ring", "--nodes", "3", "--rf", "abc"], "'abc' is not valid"),
        (["ring", "--nodes", "3", "--rf", "0"], "'0' is not valid"),
        (["ring", "--nodes", "3", "--rf", "3/3"], "must be fewer than all replicas"),
        (["ring", "--nodes", "3", "--allocator", "fancy"], "invalid choice: 'fancy'"),
        (["ring", "--nodes", "3", "--dcs", "dc1"], "'dc1' is not <dc name>:<node count>"),
        (["ring", "--nodes", "3", "--dcs", "dc1:x"], "'dc1:x' is not <dc name>:<node count>"),
        (["ring", "--dcs", "dc1:0"], "needs at least 1 node"),
        (["ring", "--dcs", "dc1:2,dc1:2"], "listed twice"),
        (["ring", "--nodes", "5", "--dcs", "dc1:3,dc2:3"], "--nodes 5 does not match the 6"),
        (["ring"], "give --nodes N"),
        (["ring", "--nodes", "4", "--racks", "2", "--rf", "3"], "lower than its replication"),
        (["ring", "--nodes", "2", "--vnodes", "2000"], "2000 must be between 1 and 1024"),
        (["ring", "--nodes", "2", "--plot", "/nonexistent-dir/ring.png"], "cannot write the plot"),
        ([], "a command is required"),
        (["no-such-command"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_without_traceback(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["ring", "--help"], capsys)
    assert code == 0
    assert "--allocator" in out and "--plot" in out
