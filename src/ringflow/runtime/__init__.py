"""What node code runs on: the ``Clock``, ``Network`` and ``Disk`` interfaces and their real shells.

Node code receives a ``Runtime`` (clock, network, disk, random) and never imports ``asyncio`` or
``time``. The real implementations here (``SystemClock``, ``AsyncioNetwork``, ``LocalDisk``) form
the asyncio shell; ``ringflow.sim`` implements the same interfaces deterministically, and
``tests/conformance`` runs one suite against both (reliability-and-style.md §B2, §B7). The
``_`` modules are private; everything public is re-exported here.
"""

from ringflow.runtime._asyncio_inbound import HELLO_MAGIC, MAX_HELLO_BYTES
from ringflow.runtime._asyncio_net import (
    AsyncioNetwork,
    AsyncioNetworkConfig,
    NetworkStats,
    encode_frame,
    encode_hello,
    reconnect_delay_ms,
)
from ringflow.runtime._clock import SystemClock
from ringflow.runtime._interfaces import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_QUEUED_MESSAGES,
    TIMER_DELAY_MS_MAX,
    Backpressure,
    Clock,
    Disk,
    DiskError,
    Endpoint,
    EndpointError,
    FrameTooLarge,
    LinkDown,
    LinkEvent,
    LinkHandler,
    LinkUp,
    Listener,
    MessageHandler,
    Network,
    NetworkError,
    NotListening,
    ProtocolViolation,
    RandomSource,
    Runtime,
    SupportsClose,
    TimerCallback,
    TimerHandle,
    check_delay_ms,
    check_limit,
    check_payload,
    format_endpoint,
    parse_endpoint,
)
from ringflow.runtime._local_disk import MAX_NAME_LENGTH, MAX_OPEN_RESOURCES, LocalDisk, check_name

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_QUEUED_MESSAGES",
    "HELLO_MAGIC",
    "MAX_HELLO_BYTES",
    "MAX_NAME_LENGTH",
    "MAX_OPEN_RESOURCES",
    "TIMER_DELAY_MS_MAX",
    "AsyncioNetwork",
    "AsyncioNetworkConfig",
    "Backpressure",
    "Clock",
    "Disk",
    "DiskError",
    "Endpoint",
    "EndpointError",
    "FrameTooLarge",
    "LinkDown",
    "LinkEvent",
    "LinkHandler",
    "LinkUp",
    "Listener",
    "LocalDisk",
    "MessageHandler",
    "Network",
    "NetworkError",
    "NetworkStats",
    "NotListening",
    "ProtocolViolation",
    "RandomSource",
    "Runtime",
    "SupportsClose",
    "SystemClock",
    "TimerCallback",
    "TimerHandle",
    "check_delay_ms",
    "check_limit",
    "check_name",
    "check_payload",
    "encode_frame",
    "encode_hello",
    "format_endpoint",
    "parse_endpoint",
    "reconnect_delay_ms",
]
