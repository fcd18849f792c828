"""A single ringflow node: its configuration, its start-up, and the server it runs.

``NodeConfig``/``NodeRecord`` (``_config``) say what the operator chose and what the node chose
once (host id, tokens); ``_startup`` opens the store, writes the system tables, creates and
publishes the first CDC generation and runs the CQL server until SIGTERM/SIGINT. The ``_``
modules are private; everything public is re-exported here.
"""

from ringflow.node._config import (
    DEFAULT_CLUSTER_NAME,
    DEFAULT_DC,
    DEFAULT_IGNORE_MSB,
    DEFAULT_NATIVE_PORT,
    DEFAULT_NUM_TOKENS,
    DEFAULT_RACK,
    DEFAULT_SHARD_COUNT,
    LOCK_FILE_NAME,
    MAX_SHARD_COUNT,
    RECORD_FILE_NAME,
    STORE_FILE_NAME,
    DataDirLock,
    NodeConfig,
    NodeRecord,
    check_address,
    load_record,
    node_config,
    prepare_data_dir,
    save_record,
)
from ringflow.node._startup import (
    CdcGeneration,
    Node,
    ProcessorBackend,
    create_first_generation,
    ensure_cdc_generation,
    is_published,
    load_local_generation,
    load_or_create_record,
    open_node,
    publish_generation,
    run_node,
    system_clock_us,
    write_local_row,
)

__all__ = [
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_DC",
    "DEFAULT_IGNORE_MSB",
    "DEFAULT_NATIVE_PORT",
    "DEFAULT_NUM_TOKENS",
    "DEFAULT_RACK",
    "DEFAULT_SHARD_COUNT",
    "LOCK_FILE_NAME",
    "MAX_SHARD_COUNT",
    "RECORD_FILE_NAME",
    "STORE_FILE_NAME",
    "CdcGeneration",
    "DataDirLock",
    "Node",
    "NodeConfig",
    "NodeRecord",
    "ProcessorBackend",
    "check_address",
    "create_first_generation",
    "ensure_cdc_generation",
    "is_published",
    "load_local_generation",
    "load_or_create_record",
    "load_record",
    "node_config",
    "open_node",
    "prepare_data_dir",
    "publish_generation",
    "run_node",
    "save_record",
    "system_clock_us",
    "write_local_row",
]
