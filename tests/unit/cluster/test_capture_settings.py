"""A node's replica capture (seed 002): its settings and command-line options (validated, kept
in the layout, passed to every node process), and its range resolver over the CDC generations
the node knows (in memory, or only in its store's internal description rows)."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from ringflow.cdc import CdcMetadata, generate_topology_description
from ringflow.cli import EXIT_USAGE, build_parser, main
from ringflow.cli._cluster import capture_arguments, given_capture, layout_capture
from ringflow.cluster.service._capture import StreamRangeResolver, stored_descriptions
from ringflow.cluster.service._settings import CAPTURE_OPTIONS, CaptureSettings
from ringflow.cql._exec_system import ensure_system_tables
from ringflow.errors import ConfigurationError
from ringflow.node import NodeRecord, create_first_generation
from ringflow.replication import SliceSettings
from ringflow.storage import CapturePolicy, Store

NOW_US = 1_700_000_000_000_000


def test_defaults_are_seed_002s_and_map_to_the_storage_settings() -> None:
    settings = CaptureSettings()
    assert settings.enabled and settings.slice_settings == SliceSettings(60, 5)
    assert settings.cap.policy is CapturePolicy.REFUSE
    assert settings.cap.max_bytes == 4 * 1024**3


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"slice_width_s": 0}, "--slice-width-s: 0 is out of range"),
        ({"slice_count": 61}, "--slice-count: 61 is out of range"),
        ({"capture_max_bytes": 1.5}, "--capture-max-bytes: expected an integer"),
        ({"capture_policy": "drop"}, "--capture-policy: expected one of refuse, drop-oldest"),
        ({"enabled": "yes"}, "capture enabled must be a bool"),
        ({"drop_sent_slices": 1}, "capture drop_sent_slices must be a bool"),
        ({"slices": 2}, "unknown capture settings: slices"),
    ],
)
def test_bad_settings_are_configuration_errors(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        CaptureSettings.of(values)


def test_options_of_cluster_start_pass_through_the_layout_to_run_node(tmp_path: Path) -> None:
    argv = ["cluster", "start", "--data", str(tmp_path), "--slice-width-s", "2"]
    argv += ["--slice-count", "3", "--capture-policy", "drop-oldest", "--replica-capture", "off"]
    argv += ["--drop-sent-slices", "off"]
    given = given_capture(build_parser().parse_args(argv))
    assert given == {
        "slice_width_s": 2, "slice_count": 3, "capture_policy": "drop-oldest", "enabled": False,
        "drop_sent_slices": False,
    }  # fmt: skip
    node = ["cluster", "run-node", "--address", "127.0.0.1", "--data", "d", "--seeds", "x"]
    layout: dict[str, object] = {"capture": given}
    arguments = build_parser().parse_args([*node, *capture_arguments(layout_capture(layout))])
    settings = CaptureSettings.of(given_capture(arguments))
    assert settings == CaptureSettings(
        False, 2, 3, capture_policy="drop-oldest", drop_sent_slices=False
    )
    assert CaptureSettings().drop_sent_slices  # synch-delete is on by default
    assert {option.name for option in CAPTURE_OPTIONS} <= set(settings.as_dict())


def test_cluster_start_refuses_a_bad_capture_option_before_laying_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "cluster"
    assert main(["cluster", "start", "--data", str(data), "--slice-width-s", "0"]) == EXIT_USAGE
    assert "--slice-width-s: 0 is out of range" in capsys.readouterr().err
    assert not (data / "cluster.json").exists()


def test_the_resolver_finds_streams_of_loaded_and_stored_generations(tmp_path: Path) -> None:
    """A generation only in the store (written before this process started, no longer in
    the metadata) and one learnt later by the metadata: both resolve; an unknown stream not."""
    store = Store(tmp_path / "store.sqlite", synchronous="NORMAL")
    ensure_system_tables(store)
    record = NodeRecord(uuid.UUID(int=1), (-100, 0, 100), "c", "dc1", "r1", 1, 12)
    old = create_first_generation(store, record, now_us=NOW_US, rng=random.Random(1))
    cdc = CdcMetadata()
    resolver = StreamRangeResolver(cdc)
    resolver.add(stored_descriptions(store, NOW_US))
    stream = next(iter(old.description.all_streams())).to_bytes()
    assert resolver("ks", stream, NOW_US) == (100, -100)  # entry 0 wraps
    new = generate_topology_description([-5, 5], lambda _t: (2, 12), random.Random(2))
    new_stream = next(iter(new.all_streams())).to_bytes()
    assert resolver("ks", new_stream, NOW_US) is None
    cdc.insert(NOW_US // 1000, new, NOW_US)
    assert resolver("ks", new_stream, NOW_US) == (5, -5)
    assert resolver("ks", bytes(16), NOW_US) is None
    store.close()
