"""The node's Prometheus metrics are the status document's figures, with Prometheus types and
units (issue 14 §3), and a document without a capture yields only the node's families."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from ringflow.cluster.service._metrics import NodeMetrics

DOCUMENT = {
    "load_bytes": 1234,
    "nodes": [
        {"address": "127.0.0.1", "state": "UN"},
        {"address": "127.0.0.2", "state": "DN"},
    ],
    "capture": {
        "rows": 351,
        "size_bytes": 104010,
        "slices_open": 7,
        "slices_sealed": 2,
        "oldest_age_ms": 33665,
        "over_cap": False,
        "refused_batches": 3,
        "publication": {
            "published_slices": 5,
            "unpublished_slices": 1,
            "watermarks_ms": {"ks.t": 60_000},
        },
        "synch_delete": {"dropped_slices": 4, "dropped_rows": 40},
    },
}


def exposition(document: dict[str, object]) -> str:
    metrics = NodeMetrics()
    metrics.update(document)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    return generate_latest(registry).decode()


def test_the_status_figures_become_typed_metrics() -> None:
    text = exposition(DOCUMENT)
    for line in (
        "ringflow_capture_rows 351.0",
        "ringflow_capture_bytes 104010.0",
        "ringflow_capture_open_slices 7.0",
        "ringflow_capture_oldest_age_seconds 33.665",
        "ringflow_capture_over_cap 0.0",
        "ringflow_capture_refused_batches_total 3.0",
        "ringflow_replication_published_slices_total 5.0",
        "ringflow_replication_unpublished_slices 1.0",
        'ringflow_replication_seal_watermark_seconds{table="ks.t"} 60.0',
        "ringflow_replication_sent_dropped_slices_total 4.0",
        'ringflow_node_peer_up{peer="127.0.0.1"} 1.0',
        'ringflow_node_peer_up{peer="127.0.0.2"} 0.0',
        "ringflow_node_load_bytes 1234.0",
    ):
        assert line in text, line
    assert "# TYPE ringflow_capture_refused_batches_total counter" in text


def test_without_a_capture_only_the_node_is_described() -> None:
    text = exposition({"load_bytes": 1, "nodes": []})
    assert "ringflow_node_load_bytes 1.0" in text
    assert "ringflow_capture" not in text
    assert exposition({}) == ""
