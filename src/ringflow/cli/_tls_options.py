"""TLS options of ``ringflow node start``, ``cluster run-node`` and ``cluster start --tls``.

A node takes Cassandra's two option maps as ``key=value`` lists (``ringflow.runtime``'s
``ClientEncryptionOptions``, ``ServerEncryptionOptions``; PEM files with Scylla's keys)::

    --client-encryption-options enabled=true,optional=false,certificate=node.crt,\\
        keyfile=node.key,truststore=ca.crt,require_client_auth=true
    --server-encryption-options internode_encryption=all,certificate=node.crt,\\
        keyfile=node.key,truststore=ca.crt

Only paths go on a command line: a key's passphrase is read from ``keyfile_password_file``.

``cluster start --tls`` makes a local CA and one certificate per node (IP SAN = the node's
address) under ``<data>/tls`` (``ringflow.runtime.make_local_tls``; keys 0600), keeps the choice
in ``cluster.json`` (``"tls"``), and starts every node with client TLS (required, or with
``--tls-optional`` served alongside plaintext; ``--tls-client-auth`` requires client
certificates from the same CA) and internode TLS ``all``. A driver connects with
``ssl_context=ringflow.runtime.client_context(<data>/tls/ca.crt)``; cqlsh with ``--ssl`` and
``SSL_CERTFILE=<data>/tls/ca.crt``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringflow.errors import ConfigurationError
from ringflow.runtime import (
    TLS_DIR_NAME,
    ClientEncryptionOptions,
    ServerEncryptionOptions,
    format_option_map,
    make_local_tls,
    parse_option_map,
)


def add_node_tls_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (cassandra.yaml option maps, PEM files)")
    group.add_argument(
        "--client-encryption-options",
        metavar="KEY=VALUE,...",
        help="native port TLS: enabled, optional, certificate, keyfile, truststore, "
        "require_client_auth, keyfile_password_file",
    )
    group.add_argument(
        "--server-encryption-options",
        metavar="KEY=VALUE,...",
        help="internode TLS (mutual): internode_encryption none|all, certificate, keyfile, "
        "truststore, keyfile_password_file",
    )


def given_node_tls(
    arguments: argparse.Namespace,
) -> tuple[ClientEncryptionOptions | None, ServerEncryptionOptions | None]:
    """The TLS option maps the command line gives (None for one it leaves out)."""
    client_text = getattr(arguments, "client_encryption_options", None)
    server_text = getattr(arguments, "server_encryption_options", None)
    client = (
        None
        if client_text is None
        else ClientEncryptionOptions.from_map(
            parse_option_map(client_text, "--client-encryption-options")
        )
    )
    server = (
        None
        if server_text is None
        else ServerEncryptionOptions.from_map(
            parse_option_map(server_text, "--server-encryption-options")
        )
    )
    return client, server


def add_cluster_tls_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS for a new local cluster")
    group.add_argument(
        "--tls",
        action="store_true",
        help="make a local CA and node certificates under DATA/tls; TLS on the native port "
        "and between nodes",
    )
    group.add_argument(
        "--tls-optional",
        action="store_true",
        help="with --tls: serve plaintext clients too on the native port",
    )
    group.add_argument(
        "--tls-client-auth",
        action="store_true",
        help="with --tls: clients must present a certificate from the cluster's CA",
    )


def cluster_tls_layout(
    arguments: argparse.Namespace, data: Path, addresses: Sequence[str]
) -> dict[str, object] | None:
    """With ``--tls``: make the CA and node certificates, and say what ``cluster.json``
    keeps (``"tls"``); None without it."""
    if not getattr(arguments, "tls", False):
        if getattr(arguments, "tls_optional", False) or getattr(arguments, "tls_client_auth", 0):
            raise ConfigurationError("--tls-optional and --tls-client-auth need --tls")
        return None
    directory = data / TLS_DIR_NAME
    make_local_tls(directory, addresses)
    return {
        "directory": str(directory),
        "optional": bool(arguments.tls_optional),
        "require_client_auth": bool(arguments.tls_client_auth),
    }


def node_tls_arguments(tls: object, address: str, *, make: bool = False) -> list[str]:
    """The ``run-node`` options of one node of a cluster laid out with ``--tls``; ``make``:
    issue the node's certificate first if it has none (a node added later)."""
    if not isinstance(tls, Mapping):
        return []
    directory = Path(str(tls["directory"]))
    if make:
        make_local_tls(directory, [address])
    certificate, key = directory / f"{address}.crt", directory / f"{address}.key"
    truststore = directory / "ca.crt"
    client = ClientEncryptionOptions(
        enabled=True,
        optional=bool(tls.get("optional")),
        certificate=certificate,
        keyfile=key,
        truststore=truststore,
        require_client_auth=bool(tls.get("require_client_auth")),
    )
    server = ServerEncryptionOptions("all", certificate, key, truststore)
    return [
        "--client-encryption-options",
        format_option_map(client.to_map()),
        "--server-encryption-options",
        format_option_map(server.to_map()),
    ]


def tls_summary(tls: object) -> str | None:
    """One ``cluster status`` line on the cluster's TLS, or None without it."""
    if not isinstance(tls, Mapping):
        return None
    client = "optional" if tls.get("optional") else "required"
    auth = ", client certificates required" if tls.get("require_client_auth") else ""
    return (
        f"TLS: native port {client}{auth}; internode all (mutual); "
        f"CA {Path(str(tls['directory'])) / 'ca.crt'}"
    )
