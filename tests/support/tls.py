"""A throwaway certificate authority for the TLS tests, made with openssl as an operator would.

One CA (its PEM is what clients are given: librdkafka's ssl.ca.location, redis-py's
ssl_ca_certs) signs one server certificate for 127.0.0.1 and localhost (subjectAltName), so the
clients keep host-name verification on. The key and certificate are also packed into a PKCS#12
keystore for the JVM (Kafka's ssl.keystore.location).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEYSTORE_PASSWORD = "keystore-pass"


@dataclass(frozen=True)
class Certificates:
    ca: Path          # the CA certificate (PEM): what clients trust
    cert: Path        # the server certificate (PEM), signed by the CA
    key: Path         # the server's private key (PEM, unencrypted)
    keystore: Path    # cert + key as PKCS#12, password KEYSTORE_PASSWORD


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=postbox-test-ca",
         "-keyout", "ca.key", "-out", "ca.pem"],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"],
        ["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-extfile", "san.ext", "-out", "server.pem"],
        ["openssl", "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile", "ca.pem",
         "-name", "server", "-passout", f"pass:{KEYSTORE_PASSWORD}", "-out", "server.p12"],
    ]  # fmt: skip
    for argv in steps:
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} failed: {(done.stderr or done.stdout)[-1500:]}")
    return Certificates(folder / "ca.pem", folder / "server.pem", folder / "server.key", folder / "server.p12")
