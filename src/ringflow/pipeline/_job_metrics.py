"""The replication job's Prometheus metrics: per channel what its status line says.

Issue 14 §3: backlog and lag as Prometheus metrics (``prometheus-client``) on each node
(``cluster.service._metrics``) *and on the job*, so the users' dashboards show them. The job's
loop hands :class:`JobMetrics` one :class:`ChannelFigures` per channel each round; a scrape
turns the latest ones into metric families (one source: a metric never disagrees with the
job's own status). ``ringflow replicate --metrics-port P`` serves them on the driver's host
(``--metrics-host``, default 127.0.0.1), port P; 0 (the default) serves nothing. A port that is
taken is reported once and the job runs on without metrics.

Names: ``ringflow_replication_`` prefix, label ``channel``; base units in the name, ``_total``
for counters. Figures the job does not know (a backlog in ``--capture log`` mode, sends per
unique change before the first batch) are left out rather than reported as 0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

_log = logging.getLogger(__name__)
_PREFIX = "ringflow_replication_"


@dataclass(frozen=True, slots=True)
class ChannelFigures:
    """One channel's figures at one moment (None: not known)."""

    rows: int = 0
    batches: int = 0
    lag_seconds: float | None = None
    reachable: bool = True
    unreachable_since_seconds: float | None = None
    failures: int = 0
    backlog_slices: int | None = None
    backlog_rows: int | None = None
    backlog_oldest_seconds: float | None = None
    sends: int | None = None
    unique_changes: int | None = None


_HELP: Mapping[str, tuple[str, str]] = {
    "rows": ("counter", "change rows handed to the channel's sink (committed batches)"),
    "batches": ("counter", "micro-batches committed by the channel's sink"),
    "lag_seconds": ("gauge", "end of the last committed batch minus its source watermark"),
    "reachable": ("gauge", "1 while the destination takes batches, 0 while it backs off"),
    "unreachable_since_seconds": ("gauge", "unix time the destination became unreachable"),
    "failures": ("counter", "failed runs of the channel's query (each retried)"),
    "backlog_slices": ("gauge", "sealed slices still to deliver to the channel"),
    "backlog_rows": ("gauge", "rows in the slices still to deliver to the channel"),
    "backlog_oldest_seconds": ("gauge", "age of the oldest slice still to deliver"),
    "sends": ("counter", "change rows sent to the channel (a replay counts again)"),
    "unique_changes": ("counter", "distinct changes sent to the channel"),
}


def metric_name(field: str) -> str:
    kind, _ = _HELP[field]
    return _PREFIX + field + ("_total" if kind == "counter" else "")


class JobMetrics(Collector):
    """Metric families from the channels' latest figures (module docstring)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._figures: dict[str, ChannelFigures] = {}

    def update(self, figures: Mapping[str, ChannelFigures]) -> None:
        with self._guard:
            self._figures = dict(figures)

    def collect(self) -> Iterator[Metric]:
        with self._guard:
            figures = dict(self._figures)
        for field in fields(ChannelFigures):
            kind, text = _HELP[field.name]
            family_of = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = family_of(_PREFIX + field.name, text, labels=["channel"])
            for channel, channel_figures in sorted(figures.items()):
                value = getattr(channel_figures, field.name)
                if value is not None:
                    family.add_metric([channel], float(value))
            yield family


def serve_job_metrics(metrics: JobMetrics, host: str, port: int) -> bool:
    """Serve ``metrics`` on ``host:port`` (a daemon thread); False (logged) when it cannot."""
    if port == 0:
        return False
    registry = CollectorRegistry(auto_describe=True)
    registry.register(metrics)
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        _log.warning("job metrics not served on %s:%d: %s", host, port, error)
        return False
    return True
