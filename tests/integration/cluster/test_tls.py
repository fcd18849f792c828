"""Issue 18 (TLS) against a real 3-node cluster started with ``ringflow cluster start --tls
--tls-client-auth``: TLS on the native port with client certificates, internode TLS (mutual).

Proves, with the CA and certificates the command made under the cluster's data directory:

* the driver over TLS (with the cluster's client certificate) writes at QUORUM and reads at ALL
  through every node, so every coordinator reaches both replicas over internode TLS;
* a client certificate from a foreign CA, or none, is refused; a plaintext driver is refused
  at once with an error saying TLS is required (a refusal, not a hang);
* ``cqlsh --ssl`` (``SSL_CERTFILE`` = the CA, cqlshrc ``[ssl]`` usercert/userkey, validate)
  runs a query;
* internode: a peer whose certificate comes from a foreign CA is refused; a peer with a cluster
  certificate for another address cannot speak as a node (the hello's claimed host must be one
  of the certificate's IP SANs): closed and counted, the cluster stays UP and serving;
* ``cluster status`` names the CA and checks each native port live: plaintext refused, TLS
  served with a certificate the CA verifies, its expiry shown; keys are 0600.

One cluster for the module (~15 s to start).
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import ssl
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import NoHostAvailable, Session
from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy, WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

from ringflow.runtime import (
    PemPair,
    client_context,
    encode_hello,
    issue_certificate,
    make_ca,
    write_pair,
)
from tests.integration.cluster._internode import endpoint, internode, outsider, quorum_through_each
from tests.integration.cluster.conftest import LocalCluster, ringflow, started_cluster, wait_until
from tests.integration.node.test_cqlsh import _cqlsh_path

SOCKET_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with started_cluster(
        tmp_path_factory.mktemp("tls-cluster"), "--tls", "--tls-client-auth"
    ) as cluster:
        yield cluster


def tls_dir(cluster: LocalCluster) -> Path:
    return cluster.data / "tls"


def client_ssl(cluster: LocalCluster, identity: str | None = "client") -> ssl.SSLContext:
    directory = tls_dir(cluster)
    if identity is None:
        return client_context(directory / "ca.crt")
    return client_context(
        directory / "ca.crt",
        certificate=directory / f"{identity}.crt",
        keyfile=directory / f"{identity}.key",
    )


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A foreign CA's client certificate (``mallory.crt``/``.key``) in a directory of its own."""
    directory = tmp_path_factory.mktemp("foreign")
    ca = make_ca("foreign CA")
    write_pair(directory, "mallory", issue_certificate(ca, "mallory", ip_addresses=["127.0.0.1"]))
    return directory


def secure_session(cluster: LocalCluster) -> Session:
    """A token-aware driver session over TLS, presenting the cluster's client certificate."""
    return cluster.connect(
        cluster.addresses[0],
        TokenAwarePolicy(RoundRobinPolicy()),
        timeout_s=15.0,
        ssl_context=client_ssl(cluster),
    )


def test_driver_over_tls_quorum_writes_and_all_reads_through_every_node(
    tls_cluster: LocalCluster,
) -> None:
    session = secure_session(tls_cluster)
    session.execute(
        "CREATE KEYSPACE IF NOT EXISTS tls_ks WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute("CREATE TABLE IF NOT EXISTS tls_ks.t (k int PRIMARY KEY, v int)")
    sessions = {
        address: tls_cluster.connect(
            address,
            WhiteListRoundRobinPolicy([address]),
            timeout_s=15.0,
            ssl_context=client_ssl(tls_cluster),
        )
        for address in tls_cluster.addresses
    }
    quorum_through_each(tls_cluster, sessions, "tls_ks.t")
    for index, address in enumerate(tls_cluster.addresses):
        sessions[address].execute(
            SimpleStatement(
                "INSERT INTO tls_ks.t (k, v) VALUES (%s, %s)",
                consistency_level=ConsistencyLevel.QUORUM,
            ),
            (index, index * 10),
        )
    for address in tls_cluster.addresses:
        rows = sessions[address].execute(
            SimpleStatement(
                "SELECT k, v FROM tls_ks.t WHERE k IN (0, 1, 2)",
                consistency_level=ConsistencyLevel.ALL,
            )
        )
        assert sorted((row.k, row.v) for row in rows) == [(0, 0), (1, 10), (2, 20)], address


def test_foreign_or_missing_client_certificate_and_plaintext_are_refused(
    tls_cluster: LocalCluster, foreign: Path
) -> None:
    address = tls_cluster.addresses[0]
    policy = WhiteListRoundRobinPolicy([address])
    mallory = client_context(
        tls_dir(tls_cluster) / "ca.crt",
        certificate=foreign / "mallory.crt",
        keyfile=foreign / "mallory.key",
    )
    for context in (mallory, client_ssl(tls_cluster, None)):
        with pytest.raises(NoHostAvailable):
            tls_cluster.connect(address, policy, timeout_s=5.0, ssl_context=context)
    with pytest.raises(NoHostAvailable, match="requires TLS"):
        tls_cluster.connect(address, policy, timeout_s=5.0)


def test_cqlsh_ssl_runs_a_query(tls_cluster: LocalCluster, tmp_path: Path) -> None:
    directory = tls_dir(tls_cluster)
    (tmp_path / ".cassandra").mkdir()
    (tmp_path / ".cassandra" / "cqlshrc").write_text(
        "[ssl]\nvalidate = true\n"
        f"usercert = {directory / 'client.crt'}\nuserkey = {directory / 'client.key'}\n"
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "CQLSH_NO_BUNDLED": "TRUE",
        "SSL_CERTFILE": str(directory / "ca.crt"),
    }
    done = subprocess.run(
        [_cqlsh_path(), tls_cluster.addresses[1], "9042", "--ssl", "--request-timeout=30",
         "-e", "SELECT cluster_name, rpc_address FROM system.local"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ringflow" in done.stdout and tls_cluster.addresses[1] in done.stdout


def internode_attempt(
    cluster: LocalCluster, target: str, *, bind: str, claim: str, identity: PemPair
) -> bool:
    """A TLS connection from ``bind`` to ``target``'s internode port presenting ``identity``,
    a hello claiming ``claim``; True when the node refuses it (handshake alert or close)."""
    directory = cluster.data / "attacker"
    write_pair(directory, "peer", identity)
    context = client_context(
        tls_dir(cluster) / "ca.crt",
        certificate=directory / "peer.crt",
        keyfile=directory / "peer.key",
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as raw:
        raw.bind((bind, 0))
        raw.settimeout(SOCKET_TIMEOUT_S)
        raw.connect((target, 7000))
        try:
            with context.wrap_socket(raw, server_hostname=target) as tls:
                tls.sendall(encode_hello(endpoint(claim), endpoint(target)))
                return tls.recv(1) == b""
        except (ssl.SSLError, ConnectionError):
            return True


def test_internode_refuses_a_foreign_ca_and_a_certificate_for_another_address(
    tls_cluster: LocalCluster,
) -> None:
    target, victim = tls_cluster.addresses[0], tls_cluster.addresses[1]
    stranger = outsider(tls_cluster)
    foreign_ca = make_ca("foreign CA")
    forged = issue_certificate(foreign_ca, victim, ip_addresses=[victim])
    assert internode_attempt(tls_cluster, target, bind=victim, claim=victim, identity=forged)
    ca = tls_dir(tls_cluster)
    cluster_ca = PemPair((ca / "ca.crt").read_bytes(), (ca / "ca.key").read_bytes())
    before = internode(tls_cluster, target).get("network_protocol_violations", 0)
    elsewhere = issue_certificate(cluster_ca, stranger, ip_addresses=[stranger])
    assert internode_attempt(tls_cluster, target, bind=victim, claim=victim, identity=elsewhere)
    wait_until(
        lambda: internode(tls_cluster, target).get("network_protocol_violations", 0) > before,
        10.0,
        "the impersonation counted as a protocol violation",
    )
    session = secure_session(tls_cluster)
    statement = SimpleStatement(
        "SELECT * FROM system.local", consistency_level=ConsistencyLevel.ONE
    )
    assert session.execute(statement).one() is not None
    status = ringflow("cluster", "status", "--data", str(tls_cluster.data))
    assert status.count(" UN ") >= len(tls_cluster.addresses)
    assert f"CA {ca / 'ca.crt'}" in status


def test_cluster_status_checks_that_tls_is_required_and_when_certificates_expire(
    tls_cluster: LocalCluster,
) -> None:
    """``ringflow cluster status`` of a cluster started with ``--tls --tls-client-auth`` and no
    ``--auth``: auth off; each node's native port, checked live, refuses plaintext and serves
    TLS with a certificate verified by the cluster's CA, naming its address, with its expiry
    (``cluster start --tls`` issues certificates for 825 days)."""
    status = ringflow("cluster", "status", "--data", str(tls_cluster.data))
    assert "auth: off (AllowAllAuthenticator/AllowAllAuthorizer) on 3 running node(s)" in status
    today = datetime.datetime.now(datetime.UTC)
    for address in tls_cluster.addresses:
        line = next(x for x in status.splitlines() if x.startswith(f"TLS check {address}:"))
        assert f"certificate CN={address} verified by the cluster CA" in line, line
        match = re.search(r"TLS required \(TLSv1\.[23]\).*expires (\S+) \((\d+) days\)", line)
        assert match is not None, line
        expires = datetime.date.fromisoformat(match.group(1))
        assert 820 <= (expires - today.date()).days <= 826 and 820 <= int(match.group(2)) <= 826
        assert "plaintext refused (" in line and "requires TLS" in line, line


def test_keys_are_private(tls_cluster: LocalCluster) -> None:
    keys = sorted(tls_dir(tls_cluster).glob("*.key"))
    assert len(keys) == len(tls_cluster.addresses) + 2  # the nodes', the CA's, the client's
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
