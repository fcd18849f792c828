"""The cluster service: the shell that runs the cluster cores over a ``runtime`` (or the
simulator). Its modules are private; the names below are what tests and fuzzers may use
without reaching into them (issue 16: a valid message of every internode verb), what the
node's start-up shares with it (a node's own CDC generation rows, ``_cdc_local``), and what
the node process builds its cluster runtime from (``ringflow.node``'s ``run_cluster_node``):
the cluster service never imports the node."""

from ringflow.cluster.service._backend import ClusterBackend, connect_statement_path
from ringflow.cluster.service._bootstrap import (
    DISCOVERY_GOSSIP_INTERVAL_MS,
    RingDiscovery,
    TopologyService,
    bootstrap_state,
    discover_ring,
    joining_states,
    pick_tokens,
    save_bootstrap_state,
)
from ringflow.cluster.service._build import BuiltNode, NodeRuntime, NodeSpec, build_node
from ringflow.cluster.service._capture import ReplicaCapture
from ringflow.cluster.service._capture_services import CaptureServices
from ringflow.cluster.service._cdc_decider import (
    CDC_GENERATIONS_V2_FEATURE,
    encode_features,
)
from ringflow.cluster.service._cdc_expiry import GenerationExpiryService
from ringflow.cluster.service._cdc_generations import (
    CdcGenerationService,
    SynchronizedCdcMetadata,
)
from ringflow.cluster.service._cdc_local import (
    CDC_LOCAL_TABLE,
    GENERATION_TABLE,
    ROWS_PER_WRITE_MAX,
    STREAMS_TABLE,
    STREAMS_V1_TABLE,
    TIMESTAMPS_KEY,
    TIMESTAMPS_TABLE,
    V1_GENERATION_TABLE,
    CdcGeneration,
    internal_rows_mutation,
    is_published,
    load_local_generation,
    local_generation_id,
    publish_generation,
    read_generation_v2_rows,
    store_first_generation,
)
from ringflow.cluster.service._cdc_rewrite import StreamsRewriteService, write_rewritten_marker
from ringflow.cluster.service._codec import (
    decode_failure,
    encode_failure,
    encode_mutations_payload,
    encode_unit,
)
from ringflow.cluster.service._dispatch import (
    ANSWERED_WHEN_REFUSED,
    MEMBER_VERBS,
    OPEN_VERBS,
    VERB_STANDING,
    Standing,
)
from ringflow.cluster.service._executor import ActionExecutor
from ringflow.cluster.service._metrics import MetricsServer, NodeMetrics
from ringflow.cluster.service._node import INTERNODE_PORT, ClusterNode
from ringflow.cluster.service._plane import ClusterDataPlane
from ringflow.cluster.service._repair import RepairService
from ringflow.cluster.service._repair_procedures import register_repair_procedures
from ringflow.cluster.service._schema_sync import SchemaObserver, SchemaStep
from ringflow.cluster.service._settings import (
    CAPTURE_OPTIONS,
    CAPTURE_POLICIES,
    NODE_NETWORK_CONFIG,
    TIMING_OPTIONS,
    CaptureSettings,
    ClusterSettings,
    NodeTimings,
)
from ringflow.cluster.service._wire_samples import encode_internode_message, sample_envelopes

__all__ = [
    "ANSWERED_WHEN_REFUSED",
    "CAPTURE_OPTIONS",
    "CAPTURE_POLICIES",
    "CDC_GENERATIONS_V2_FEATURE",
    "CDC_LOCAL_TABLE",
    "DISCOVERY_GOSSIP_INTERVAL_MS",
    "GENERATION_TABLE",
    "INTERNODE_PORT",
    "MEMBER_VERBS",
    "NODE_NETWORK_CONFIG",
    "OPEN_VERBS",
    "ROWS_PER_WRITE_MAX",
    "STREAMS_TABLE",
    "STREAMS_V1_TABLE",
    "TIMESTAMPS_KEY",
    "TIMESTAMPS_TABLE",
    "TIMING_OPTIONS",
    "V1_GENERATION_TABLE",
    "VERB_STANDING",
    "ActionExecutor",
    "BuiltNode",
    "CaptureServices",
    "CaptureSettings",
    "CdcGeneration",
    "CdcGenerationService",
    "ClusterBackend",
    "ClusterDataPlane",
    "ClusterNode",
    "ClusterSettings",
    "GenerationExpiryService",
    "MetricsServer",
    "NodeMetrics",
    "NodeRuntime",
    "NodeSpec",
    "NodeTimings",
    "RepairService",
    "ReplicaCapture",
    "RingDiscovery",
    "SchemaObserver",
    "SchemaStep",
    "Standing",
    "StreamsRewriteService",
    "SynchronizedCdcMetadata",
    "TopologyService",
    "bootstrap_state",
    "build_node",
    "connect_statement_path",
    "decode_failure",
    "discover_ring",
    "encode_failure",
    "encode_features",
    "encode_internode_message",
    "encode_mutations_payload",
    "encode_unit",
    "internal_rows_mutation",
    "is_published",
    "joining_states",
    "load_local_generation",
    "local_generation_id",
    "pick_tokens",
    "publish_generation",
    "read_generation_v2_rows",
    "register_repair_procedures",
    "sample_envelopes",
    "save_bootstrap_state",
    "store_first_generation",
    "write_rewritten_marker",
]
