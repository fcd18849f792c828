"""TLS settings (issue 18): Cassandra-named option maps, the contexts they make, the certificates
``cluster start --tls`` writes, the pipeline's TLS options and the URL redaction.

Pure or file-only: no server runs here (``tests/unit/node/test_cql_server_tls.py`` and
``tests/integration/cluster/test_tls.py`` do that).
"""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest

from ringflow.errors import ConfigurationError
from ringflow.runtime import (
    ClientEncryptionOptions,
    ServerEncryptionOptions,
    format_option_map,
    make_local_tls,
    parse_option_map,
    peer_addresses,
)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    make_local_tls(directory, ["127.0.5.1", "127.0.5.2"])
    return directory


def test_local_tls_files_keys_private_and_node_sans(local: Path) -> None:
    names = sorted(p.name for p in local.iterdir())
    assert names == [
        "127.0.5.1.crt", "127.0.5.1.key", "127.0.5.2.crt", "127.0.5.2.key",
        "ca.crt", "ca.key", "client.crt", "client.key",
    ]  # fmt: skip
    for key in local.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    decoded = ssl._ssl._test_decode_cert(str(local / "127.0.5.2.crt"))  # type: ignore[attr-defined]
    assert peer_addresses(decoded) == frozenset({"127.0.5.2"})
    before = (local / "ca.crt").read_bytes()
    make_local_tls(local, ["127.0.5.3"])  # a node added later: same CA, a new certificate
    assert (local / "ca.crt").read_bytes() == before
    assert (local / "127.0.5.3.crt").exists()


def test_option_maps_round_trip_and_make_contexts(local: Path) -> None:
    text = (
        f"internode_encryption=all,certificate={local}/127.0.5.1.crt,"
        f"keyfile={local}/127.0.5.1.key,truststore={local}/ca.crt"
    )
    server = ServerEncryptionOptions.from_map(parse_option_map(text, "x"))
    assert server.enabled and server.require_client_auth
    again = ServerEncryptionOptions.from_map(
        parse_option_map(format_option_map(server.to_map()), "x")
    )
    assert again == server
    contexts = server.contexts()
    assert contexts.server.verify_mode == ssl.CERT_REQUIRED
    assert contexts.client.check_hostname
    client = ClientEncryptionOptions.from_map(
        {"enabled": "true", "optional": "TRUE", "certificate": f"{local}/127.0.5.1.crt",
         "keyfile": f"{local}/127.0.5.1.key"}
    )  # fmt: skip
    assert client.optional
    assert client.server_context().verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"enabled": "true"}, "needs certificate and keyfile"),
        ({"enabled": "yes"}, "must be true or false"),
        ({"enabled": "true", "certificate": "a", "keyfile": "b", "require_client_auth": "true"},
         "needs a truststore"),
        ({"keystore": "x"}, "unknown option 'keystore'"),
    ],
)  # fmt: skip
def test_bad_client_options_name_the_rule(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ClientEncryptionOptions.from_map(options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"internode_encryption": "dc"}, "must be one of"),
        ({"internode_encryption": "all"}, "needs certificate, keyfile and truststore"),
        ({"internode_encryption": "all", "certificate": "a", "keyfile": "b", "truststore": "c",
          "require_client_auth": "false"}, "always mutual"),
    ],
)  # fmt: skip
def test_bad_server_options_name_the_rule(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ServerEncryptionOptions.from_map(options)


def test_missing_files_and_a_key_of_another_certificate_fail_at_start(local: Path) -> None:
    missing = ClientEncryptionOptions(True, certificate=local / "nope.crt", keyfile=local / "x")
    with pytest.raises(ConfigurationError, match="cannot load certificate"):
        missing.server_context()
    mismatched = ClientEncryptionOptions(
        True, certificate=local / "127.0.5.1.crt", keyfile=local / "127.0.5.2.key"
    )
    with pytest.raises(ConfigurationError, match="cannot load certificate"):
        mismatched.server_context()


def test_a_keyfile_password_is_read_from_a_file_never_the_option(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from ringflow.runtime import issue_certificate, make_ca

    pair = issue_certificate(make_ca(), "node", ip_addresses=["127.0.0.1"])
    key = serialization.load_pem_private_key(pair.key, password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    (tmp_path / "node.crt").write_bytes(pair.certificate)
    (tmp_path / "node.key").write_bytes(encrypted)
    (tmp_path / "password").write_text("s3cret\n")
    options = ClientEncryptionOptions(
        True,
        certificate=tmp_path / "node.crt",
        keyfile=tmp_path / "node.key",
        keyfile_password_file=tmp_path / "password",
    )
    assert isinstance(options.server_context(), ssl.SSLContext)
    assert "s3cret" not in format_option_map(options.to_map())
    (tmp_path / "password").write_text("wrong\n")
    with pytest.raises(ConfigurationError) as error:
        options.server_context()
    assert "wrong" not in str(error.value)


def test_pipeline_tls_options_and_hub_urls(local: Path) -> None:
    pytest.importorskip("psycopg")
    from ringflow.pipeline import PipelineConfigError
    from ringflow.pipeline._cluster_client import DriverTls, driver_tls
    from ringflow.pipeline._destinations import hub_tls
    from ringflow.pipeline._postgres import redact

    ca = str(local / "ca.crt")
    assert driver_tls({}) is None
    tls = driver_tls({"ssl_ca": ca})
    assert tls == DriverTls(ca)
    with pytest.raises(PipelineConfigError, match="go together"):
        driver_tls({"ssl_ca": ca, "ssl_certfile": ca})
    with pytest.raises(PipelineConfigError, match="TLS: cannot load truststore"):
        driver_tls({"ssl_ca": str(local / "missing.crt")})
    assert hub_tls("ringflow://h/ks.t") is None
    assert hub_tls("ringflow://h/ks.t?ssl=true", tls) == tls
    assert hub_tls(f"ringflow://h/ks.t?ca={ca}") == tls
    assert hub_tls(f"ringflow://h/ks.t?ssl=false&ca={ca}") is None
    with pytest.raises(PipelineConfigError, match="needs ca=FILE"):
        hub_tls("ringflow://h/ks.t?ssl=true")
    url = "postgresql://u:pw1@h:5/db?sslmode=verify-full&sslpassword=pw2&password=pw3"
    assert "pw" not in redact(url).replace("password", "")
