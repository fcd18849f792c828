"""`ringflow cluster status` reports effective ownership, as `nodetool status <keyspace>` does.

Effective ownership is the fraction of the ring a node replicates for a keyspace with RF replicas
per DC; in each DC the nodes' shares add up to min(RF, nodes in the DC) rings.
"""

from __future__ import annotations

import math
import random

import pytest

from ringflow.cli._cluster import capture_summary, effective_ownership, parse_dcs, plan_layout


@pytest.mark.parametrize(
    ("nodes", "dcs", "rf"),
    [(3, None, 3), (5, "dc1:3,dc2:2", 2), (6, "dc1:4,dc2:2", 3), (4, None, 1)],
)
def test_shares_add_up_to_the_replicas_of_each_dc(nodes: int, dcs: str | None, rf: int) -> None:
    layout = {"nodes": plan_layout(parse_dcs(nodes, dcs), 1, 8, random.Random(7), "127.9.9.1")}
    owns = effective_ownership(layout, rf)
    assert set(owns) == {node["address"] for node in layout["nodes"]}
    per_dc: dict[str, list[float]] = {}
    for node in layout["nodes"]:
        per_dc.setdefault(str(node["dc"]), []).append(owns[str(node["address"])])
    for shares in per_dc.values():
        assert math.isclose(sum(shares), min(rf, len(shares)), rel_tol=1e-9)
        assert all(0.0 < share <= 1.0 for share in shares)


def test_the_capture_line_says_what_a_node_holds_and_how_far_behind_it_publishes() -> None:
    status = {
        "address": "127.0.0.2",
        "written_ms": 10_000,
        "capture": {
            "slices_open": 3, "slices_sealed": 9, "rows": 120, "size_bytes": 4096,
            "publication": {
                "unpublished_slices": 2, "failing": True,
                "watermarks_ms": {"ks.a": 8_000, "ks.b": 9_500},
            },
            "synch_delete": {"dropped_slices": 5},
        },
    }  # fmt: skip
    assert capture_summary(status) == (
        "capture 127.0.0.2: 3 open, 9 sealed (2 unpublished), 120 rows, 4096 bytes; "
        "5 dropped once sent, watermarks up to 2.0 s behind, publication FAILING"
    )
    status["capture"] = {**status["capture"], "synch_delete": None, "publication": {}}  # type: ignore[dict-item]
    assert capture_summary(status).endswith("; synch-delete off")
    assert capture_summary({"address": "127.0.0.3"}) == "capture 127.0.0.3: off"
