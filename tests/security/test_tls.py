"""TLS: a real ZooKeeper serving TLS (netty, PKCS12 keystores made here with the JDK's keytool), reached through
kazoo's TLS options (``zkqueue.transport.security.TlsOptions``), with and without client certificates."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from zkqueue.builder import QueueBuilder
from zkqueue.server.embedded import ZooKeeperEnsemble, free_port
from zkqueue.transport.security import TlsOptions, secure_client
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import wait_for

PASSWORD = "changeit-zkq"

pytestmark = pytest.mark.skipif(
    shutil.which("keytool") is None or shutil.which("openssl") is None, reason="needs the JDK's keytool and openssl"
)


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def _keypair(folder: Path, alias: str, cn: str) -> Path:
    """A self-signed key pair in a PKCS12 keystore (SAN: localhost and 127.0.0.1)."""
    store = folder / f"{alias}.p12"
    _run("keytool", "-genkeypair", "-alias", alias, "-keyalg", "RSA", "-keysize", "2048", "-validity", "2",
         "-dname", f"CN={cn}", "-ext", "SAN=dns:localhost,ip:127.0.0.1", "-storetype", "PKCS12",
         "-keystore", str(store), "-storepass", PASSWORD, "-keypass", PASSWORD)
    return store


def _export_cert(store: Path, alias: str, pem: Path) -> Path:
    _run("keytool", "-exportcert", "-rfc", "-alias", alias, "-keystore", str(store), "-storetype", "PKCS12",
         "-storepass", PASSWORD, "-file", str(pem))
    return pem


def _truststore(folder: Path, name: str, certs: dict[str, Path]) -> Path:
    store = folder / f"{name}.p12"
    for alias, pem in certs.items():
        _run("keytool", "-importcert", "-noprompt", "-alias", alias, "-file", str(pem), "-storetype", "PKCS12",
             "-keystore", str(store), "-storepass", PASSWORD)
    return store


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    server_ks = _keypair(folder, "server", "localhost")
    client_ks = _keypair(folder, "client", "zkqueue-client")
    server_pem = _export_cert(server_ks, "server", folder / "server.pem")
    client_pem = _export_cert(client_ks, "client", folder / "client.pem")
    # kazoo (Python's ssl) wants the client's private key as PEM: out of the PKCS12 store with openssl
    client_key = folder / "client.key"
    _run("openssl", "pkcs12", "-in", str(client_ks), "-passin", f"pass:{PASSWORD}", "-nocerts", "-nodes",
         "-out", str(client_key))
    return {
        "server_ks": server_ks,
        "server_pem": server_pem,
        "client_pem": client_pem,
        "client_key": client_key,
        "server_trust": _truststore(folder, "server-trust", {"client": client_pem}),
    }


def _tls_server(pki: dict[str, Path], client_auth: str) -> tuple[ZooKeeperEnsemble, str]:
    port = free_port()
    ssl_cfg = {
        "secureClientPort": str(port),
        "ssl.keyStore.location": str(pki["server_ks"]),
        "ssl.keyStore.password": PASSWORD,
        "ssl.keyStore.type": "PKCS12",
        "ssl.trustStore.location": str(pki["server_trust"]),
        "ssl.trustStore.password": PASSWORD,
        "ssl.trustStore.type": "PKCS12",
        "ssl.clientAuth": client_auth,
    }
    server = ZooKeeperEnsemble(
        size=1,
        extra_config=ssl_cfg,
        jvm_options=["-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"],
    ).start_all()
    return server, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def tls_server(pki: dict[str, Path]) -> Iterator[str]:
    """Serves TLS on its secure port; no client certificate needed."""
    server, secure = _tls_server(pki, "none")
    yield secure
    server.close()


@pytest.fixture(scope="module")
def mtls_server(pki: dict[str, Path]) -> Iterator[str]:
    """Serves TLS and requires a client certificate it trusts."""
    server, secure = _tls_server(pki, "need")
    yield secure
    server.close()


def _started(client: KazooClient) -> KazooClient:
    client.start(timeout=30)
    return client


def _round_trip(client: KazooClient, path: str) -> list[str]:
    got: list[str] = []
    try:
        with QueueBuilder.builder(client, got.append, StrSerializer(), path).lock_path(path + "-locks").build_queue() as q:
            for item in ("one", "two", "three"):
                q.put(item)
            wait_for(lambda: len(got) == 3, timeout=30, message=f"got {got}")
    finally:
        client.stop()
        client.close()
    return got


def test_queue_over_tls_verifying_the_server(tls_server, pki) -> None:
    tls = TlsOptions(ca=str(pki["server_pem"]), check_hostname=True)
    client = _started(secure_client(tls_server.replace("127.0.0.1", "localhost"), tls=tls, timeout=10))
    assert _round_trip(client, "/tls/jobs") == ["one", "two", "three"]


def test_queue_over_mutual_tls(mtls_server, pki) -> None:
    tls = TlsOptions(ca=str(pki["server_pem"]), certfile=str(pki["client_pem"]), keyfile=str(pki["client_key"]))
    client = _started(secure_client(mtls_server, tls=tls, timeout=10))
    assert _round_trip(client, "/mtls/jobs") == ["one", "two", "three"]


def test_untrusted_server_certificate_is_refused(tls_server, pki) -> None:
    """Trusting a different certificate (the client's own) must fail the handshake, not connect anyway."""
    client = secure_client(tls_server, tls=TlsOptions(ca=str(pki["client_pem"])), timeout=5,
                           connection_retry={"max_tries": 0})
    with pytest.raises((ssl.SSLError, Exception)) as info:
        client.start(timeout=4)
    assert not client.connected, info.value
    client.stop()
    client.close()


def test_mutual_tls_without_client_certificate_is_refused(mtls_server, pki) -> None:
    client = secure_client(mtls_server, tls=TlsOptions(ca=str(pki["server_pem"])), timeout=5,
                           connection_retry={"max_tries": 0})
    with pytest.raises(Exception):
        client.start(timeout=4)
    assert not client.connected
    client.stop()
    client.close()


def test_plain_client_cannot_talk_to_the_tls_port(tls_server) -> None:
    client = KazooClient(hosts=tls_server, timeout=5, connection_retry={"max_tries": 0})
    with pytest.raises(Exception):
        client.start(timeout=4)
    assert not client.connected
    client.stop()
    client.close()
