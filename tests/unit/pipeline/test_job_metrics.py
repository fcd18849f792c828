"""The replication job's Prometheus metrics (issue 14 §3): one family per figure labelled by
channel, unknown figures left out, served over HTTP by prometheus-client and parsed back by its
own parser; a taken port leaves the job without metrics, never stopped."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from ringflow.pipeline._job_metrics import (
    ChannelFigures,
    JobMetrics,
    metric_name,
    serve_job_metrics,
)


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["channel"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_served_figures_say_what_each_channel_did() -> None:
    metrics = JobMetrics()
    port = _free_port()
    assert serve_job_metrics(metrics, "127.0.0.1", port)
    metrics.update(
        {
            "hub": ChannelFigures(
                rows=120,
                batches=3,
                reachable=False,
                unreachable_since_seconds=1_700_000_000.0,
                failures=4,
            ),
            "lake": ChannelFigures(rows=500, batches=9, lag_seconds=2.5, backlog_slices=2),
        }
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        samples = _samples(response.read().decode())
    assert samples[metric_name("rows"), "hub"] == 120
    assert samples[metric_name("rows"), "lake"] == 500
    assert samples[metric_name("reachable"), "hub"] == 0
    assert samples[metric_name("reachable"), "lake"] == 1
    assert samples[metric_name("unreachable_since_seconds"), "hub"] == 1_700_000_000
    assert samples[metric_name("failures"), "hub"] == 4
    assert samples[metric_name("lag_seconds"), "lake"] == 2.5
    assert samples[metric_name("backlog_slices"), "lake"] == 2
    # not known: not reported (a hub's lag before its first batch, the lake's sends)
    assert (metric_name("lag_seconds"), "hub") not in samples
    assert (metric_name("sends"), "lake") not in samples
    assert metric_name("rows") == "ringflow_replication_rows_total"


def test_a_taken_port_or_port_0_serves_nothing_and_does_not_raise() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert not serve_job_metrics(JobMetrics(), "127.0.0.1", taken.getsockname()[1])
    assert not serve_job_metrics(JobMetrics(), "127.0.0.1", 0)
