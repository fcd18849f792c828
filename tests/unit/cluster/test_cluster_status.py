"""`ringflow cluster status` reports effective ownership, as `nodetool status <keyspace>` does.

Effective ownership is the fraction of the ring a node replicates for a keyspace with RF replicas
per DC; in each DC the nodes' shares add up to min(RF, nodes in the DC) rings.
"""

from __future__ import annotations

import math
import random

import pytest

from ringflow.cli._cluster import effective_ownership, parse_dcs, plan_layout


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
