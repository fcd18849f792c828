"""The node's Prometheus metrics: the figures of ``status.json`` for the users' dashboards.

Issue 14 §3: backlog and lag of replica-side replication as Prometheus metrics
(``prometheus-client``) on each node. Every second the node shell hands :class:`NodeMetrics`
the status document it writes to ``status.json``; a scrape turns the latest one into metric
families (nothing is computed twice, no metric can disagree with ``ringflow cluster status``).
The exposition server (``prometheus_client``'s WSGI server, one daemon thread) listens on the
node's own address, port ``metrics_port`` (default 9180; 0: no server), as every node of a local
cluster binds its own loopback address with the same ports.

Issue 16: the internode protocol counters (``status.json``'s ``internode``: malformed messages,
refused ones, connections closed for a violation or a read timeout).

Names follow Prometheus conventions: ``ringflow_`` prefix, base units in the name (``_bytes``,
``_seconds``), ``_total`` for counters. A failure to serve (port taken) is logged once and the
node runs on without metrics: metrics are never a reason to stop serving data.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

_log = logging.getLogger(__name__)

_CAPTURE_GAUGES = (
    ("rows", "ringflow_capture_rows", "captured CDC log rows kept on this node"),
    ("size_bytes", "ringflow_capture_bytes", "bytes of captured rows kept on this node"),
    ("slices_open", "ringflow_capture_open_slices", "slices still open (not sealed)"),
    ("slices_sealed", "ringflow_capture_sealed_slices", "sealed slices kept (not yet dropped)"),
)
_CAPTURE_COUNTERS = (
    ("refused_batches", "ringflow_capture_refused_batches", "CDC writes refused at the cap"),
    ("dropped_slices", "ringflow_capture_cap_dropped_slices", "slices dropped at the cap"),
    ("unresolved_rows", "ringflow_capture_unresolved_rows", "rows with no known stream range"),
    ("duplicate_rows", "ringflow_capture_duplicate_rows", "rows captured again, kept once"),
    ("sealed_slices", "ringflow_capture_sealed_slices", "slices sealed since start"),
)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


class NodeMetrics(Collector):
    """Metric families from the node's latest status document (module docstring)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._document: Mapping[str, Any] = {}

    def update(self, document: Mapping[str, Any]) -> None:
        with self._guard:
            self._document = document

    def collect(self) -> Iterator[Metric]:
        with self._guard:
            document = self._document
        yield from _node_families(document)
        yield from _internode_families(document.get("internode"))
        capture = document.get("capture")
        if isinstance(capture, Mapping):
            yield from _capture_families(capture)


_INTERNODE_COUNTERS = (
    ("protocol_errors", "ringflow_internode_protocol_errors", "malformed internode messages"),
    ("refused_messages", "ringflow_internode_refused_messages", "internode messages refused"),
    (
        "network_protocol_violations",
        "ringflow_internode_connections_closed_for_violations",
        "internode connections closed for a protocol violation",
    ),
    (
        "network_read_timeouts",
        "ringflow_internode_read_timeouts",
        "internode connections closed for a hello or frame that did not arrive in time",
    ),
)


def _internode_families(internode: object) -> Iterator[Metric]:
    if not isinstance(internode, Mapping):
        return
    for key, name, help_text in _INTERNODE_COUNTERS:
        value = _number(internode.get(key))
        if value is not None:
            yield CounterMetricFamily(name, help_text, value)


def _node_families(document: Mapping[str, Any]) -> Iterator[Metric]:
    load = _number(document.get("load_bytes"))
    if load is not None:
        yield GaugeMetricFamily("ringflow_node_load_bytes", "bytes of the node's data", load)
    nodes = document.get("nodes")
    if isinstance(nodes, list):
        up = GaugeMetricFamily(
            "ringflow_node_peer_up", "1 if this node sees the peer up", labels=["peer"]
        )
        for node in nodes:
            if isinstance(node, Mapping):
                state = str(node.get("state", ""))
                up.add_metric([str(node.get("address"))], 1.0 if state.startswith("U") else 0.0)
        yield up


def _capture_families(capture: Mapping[str, Any]) -> Iterator[Metric]:
    for key, name, help_text in _CAPTURE_GAUGES:
        value = _number(capture.get(key))
        if value is not None:
            yield GaugeMetricFamily(name, help_text, value)
    for key, name, help_text in _CAPTURE_COUNTERS:
        value = _number(capture.get(key))
        if value is not None:
            yield CounterMetricFamily(name, help_text, value)
    age_ms = _number(capture.get("oldest_age_ms"))
    if age_ms is not None:
        yield GaugeMetricFamily(
            "ringflow_capture_oldest_age_seconds",
            "age of the oldest captured slice kept (the backlog's age)",
            age_ms / 1000,
        )
    over = _number(capture.get("over_cap"))
    if over is not None:
        yield GaugeMetricFamily("ringflow_capture_over_cap", "1 past the capture's cap", over)
    yield from _publication_families(capture.get("publication"))
    yield from _synch_delete_families(capture.get("synch_delete"))


def _publication_families(publication: object) -> Iterator[Metric]:
    if not isinstance(publication, Mapping):
        return
    published = _number(publication.get("published_slices"))
    if published is not None:
        yield CounterMetricFamily(
            "ringflow_replication_published_slices", "slices published since start", published
        )
    waiting = _number(publication.get("unpublished_slices"))
    if waiting is not None:
        yield GaugeMetricFamily(
            "ringflow_replication_unpublished_slices", "sealed slices not yet published", waiting
        )
    marks = publication.get("watermarks_ms")
    if isinstance(marks, Mapping):
        family = GaugeMetricFamily(
            "ringflow_replication_seal_watermark_seconds",
            "every slice of the table due before this time is sealed and published",
            labels=["table"],
        )
        for table, mark in sorted(marks.items()):
            value = _number(mark)
            if value is not None:
                family.add_metric([str(table)], value / 1000)
        yield family


def _synch_delete_families(synch_delete: object) -> Iterator[Metric]:
    if not isinstance(synch_delete, Mapping):
        return
    for key, name, help_text in (
        ("dropped_slices", "ringflow_replication_sent_dropped_slices", "sent slices dropped"),
        ("dropped_rows", "ringflow_replication_sent_dropped_rows", "rows of sent slices dropped"),
    ):
        value = _number(synch_delete.get(key))
        if value is not None:
            yield CounterMetricFamily(name, help_text, value)


class MetricsServer:
    """The exposition server of one node (module docstring); ``close`` stops it."""

    def __init__(self, address: str, port: int, metrics: NodeMetrics) -> None:
        self.metrics = metrics
        self._server: Any = None
        if port <= 0:
            return
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics)
        try:
            self._server, _thread = start_http_server(port, addr=address, registry=registry)
        except OSError as error:
            _log.warning("no metrics on %s:%d: %s", address, port, error)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
