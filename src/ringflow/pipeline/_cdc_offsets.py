"""Offsets and window planning of the ``ringflow-cdc`` source: pure code, no clock, no driver.

An offset is a per-generation time watermark, checkpointed by Spark as JSON (pipelines-spark.md
§8.2): ``{"generation": <ms>, "watermark_ms": <ms>}`` says that every log row with a write time
in milliseconds ``<= watermark_ms`` has been read, and that the watermark lies in the generation
that starts at ``generation``. A micro-batch from offset ``a`` to offset ``b`` reads the times
``(a.watermark_ms, b.watermark_ms]`` of every generation the span touches, in query windows of at
most ``window_ms`` (``"cdc$time" > maxTimeuuid(lo) AND "cdc$time" <= maxTimeuuid(hi)``, which
covers exactly the milliseconds ``lo + 1 .. hi``). Rules, as the Scylla consumer libraries read
(scylla-cdc.md §7 "Common reading model" and the generation-switch rule):

- The watermark never passes ``now - confidence``: writes with older timestamps can still land.
- A batch never crosses a generation boundary: it stops at the next generation's start - 1 ms,
  and only an offset standing exactly there moves to the next generation (whose rows start at
  its start), so the old generation is read up to the new one's start before the switch.
- Throttling: ``max_window_ms`` bounds the span of one batch; a row budget (Spark's
  ``ReadMaxRows``) is honoured by :func:`plan_row_limited` over per-window row counts.
- The first offset starts at ``starting_ms`` (default: the earliest generation), never before
  ``now - log TTL`` (older rows have expired) nor before the earliest generation.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ringflow.pipeline._errors import PipelineConfigError

DEFAULT_WINDOW_MS = 30_000
DEFAULT_CONFIDENCE_MS = 30_000


@dataclass(frozen=True, slots=True)
class CdcOffset:
    """Everything at or before ``watermark_ms`` is read; the watermark is in ``generation``."""

    generation_ms: int
    watermark_ms: int

    def to_dict(self) -> dict[str, int]:
        """The JSON-able dict Spark checkpoints."""
        return {"generation": self.generation_ms, "watermark_ms": self.watermark_ms}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CdcOffset:
        """The offset of :meth:`to_dict`; PipelineConfigError on anything else."""
        try:
            generation = data["generation"]
            watermark = data["watermark_ms"]
        except (KeyError, TypeError):
            raise PipelineConfigError(f"not a ringflow-cdc offset: {data!r}") from None
        if not isinstance(generation, int) or not isinstance(watermark, int):
            raise PipelineConfigError(f"ringflow-cdc offset fields must be integers: {data!r}")
        if isinstance(generation, bool) or isinstance(watermark, bool):
            raise PipelineConfigError(f"ringflow-cdc offset fields must be integers: {data!r}")
        if watermark < generation - 1:
            raise PipelineConfigError(f"offset watermark before its generation's start: {data!r}")
        return cls(generation, watermark)

    @classmethod
    def from_json(cls, text: str) -> CdcOffset:
        try:
            data = json.loads(text)
        except ValueError:
            raise PipelineConfigError(f"not a ringflow-cdc offset: {text!r}") from None
        if not isinstance(data, dict):
            raise PipelineConfigError(f"not a ringflow-cdc offset: {text!r}")
        return cls.from_dict(data)


@dataclass(frozen=True, slots=True)
class GenerationSpan:
    """The times ``(after_ms, until_ms]`` of the generation starting at ``generation_ms``."""

    generation_ms: int
    after_ms: int
    until_ms: int


def _sorted_generations(generations: Sequence[int]) -> list[int]:
    ordered = sorted(set(generations))
    if not ordered:
        raise PipelineConfigError("the cluster has published no CDC generation yet")
    return ordered


def next_generation(generations: Sequence[int], generation_ms: int) -> int | None:
    """The start of the first generation after ``generation_ms``, if one is published."""
    ordered = _sorted_generations(generations)
    index = bisect.bisect_right(ordered, generation_ms)
    return ordered[index] if index < len(ordered) else None


def generation_of(generations: Sequence[int], time_ms: int) -> int:
    """The generation whose time range holds ``time_ms`` (the earliest one for earlier times)."""
    ordered = _sorted_generations(generations)
    index = bisect.bisect_right(ordered, time_ms) - 1
    return ordered[max(index, 0)]


def initial_offset(
    generations: Sequence[int], now_ms: int, log_ttl_s: int, starting_ms: int | None = None
) -> CdcOffset:
    """The offset before the first row to read (module docstring, last rule)."""
    ordered = _sorted_generations(generations)
    start = ordered[0] if starting_ms is None else starting_ms
    if log_ttl_s > 0:
        start = max(start, now_ms - log_ttl_s * 1000)
    start = max(start, ordered[0])
    return CdcOffset(generation_of(ordered, start), start - 1)


def latest_offset(
    start: CdcOffset,
    generations: Sequence[int],
    now_ms: int,
    confidence_ms: int,
    max_window_ms: int | None = None,
) -> CdcOffset:
    """The end of the next micro-batch from ``start`` (module docstring rules); ``start`` itself
    when nothing new can be read yet."""
    if confidence_ms < 0:
        raise PipelineConfigError(f"confidence window must be >= 0 ms, got {confidence_ms}")
    if max_window_ms is not None and max_window_ms <= 0:
        raise PipelineConfigError(f"max_window_ms must be positive, got {max_window_ms}")
    generation, watermark = start.generation_ms, start.watermark_ms
    following = next_generation(generations, generation)
    if following is not None and watermark >= following - 1:
        # The old generation is read up to the new one's start: switch.
        generation, following = following, next_generation(generations, following)
    limit = now_ms - confidence_ms
    if following is not None:
        limit = min(limit, following - 1)
    if max_window_ms is not None:
        limit = min(limit, watermark + max_window_ms)
    return CdcOffset(generation, max(watermark, limit))


def generation_spans(
    start: CdcOffset, end: CdcOffset, generations: Sequence[int]
) -> list[GenerationSpan]:
    """The non-empty time spans per generation that the batch ``(start, end]`` reads."""
    if end.watermark_ms < start.watermark_ms or end.generation_ms < start.generation_ms:
        raise PipelineConfigError(f"offset {end.to_json()} is before {start.to_json()}")
    ordered = _sorted_generations([*generations, start.generation_ms, end.generation_ms])
    spans = []
    for index, generation in enumerate(ordered):
        if not start.generation_ms <= generation <= end.generation_ms:
            continue
        generation_end = ordered[index + 1] - 1 if index + 1 < len(ordered) else None
        after = max(start.watermark_ms, generation - 1)
        until = (
            end.watermark_ms if generation_end is None else min(end.watermark_ms, generation_end)
        )
        if until > after:
            spans.append(GenerationSpan(generation, after, until))
    return spans


def query_windows(after_ms: int, until_ms: int, window_ms: int) -> list[tuple[int, int]]:
    """``(after_ms, until_ms]`` cut into consecutive ``(lo, hi]`` windows of <= ``window_ms``."""
    if window_ms <= 0:
        raise PipelineConfigError(f"query window must be positive, got {window_ms} ms")
    windows = []
    low = after_ms
    while low < until_ms:
        high = min(low + window_ms, until_ms)
        windows.append((low, high))
        low = high
    return windows


def plan_row_limited(
    start: CdcOffset,
    candidate: CdcOffset,
    window_ms: int,
    max_rows: int,
    count_rows: Callable[[int, int], int],
) -> CdcOffset:
    """``candidate`` cut back so that the batch holds at most ``max_rows`` rows (by the counts
    of ``count_rows(after_ms, until_ms)`` per query window), but at least one window, so the
    stream always advances. Both offsets must be in one generation's span or a switch."""
    if max_rows <= 0:
        raise PipelineConfigError(f"max rows per batch must be positive, got {max_rows}")
    total = 0
    for low, high in query_windows(start.watermark_ms, candidate.watermark_ms, window_ms):
        total += count_rows(low, high)
        if total > max_rows and low > start.watermark_ms:
            return CdcOffset(candidate.generation_ms, low)
    return candidate
