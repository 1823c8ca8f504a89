"""A certificate authority made at test time, and certificates from it, for TLS nats-servers and their clients."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    """Files as the prod overlay's Secret `fleetpilot-nats-tls` holds them: tls.crt, tls.key, ca.crt."""

    directory: Path

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"


class TestAuthority:
    """A self-signed CA; `issue` writes a server-and-client certificate for loopback (routes use both roles)."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    def ca_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, directory: Path, common_name: str = "nats") -> Issued:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
        names = [x509.DNSName("localhost"), x509.DNSName(common_name), loopback]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        issued = Issued(directory)
        issued.cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        issued.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        issued.ca_file.write_bytes(self.ca_pem())
        return issued
