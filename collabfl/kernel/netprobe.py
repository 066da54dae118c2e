"""What this machine can see of a server: does HOST:PORT answer, which certificate it shows.

A client daemon that cannot join, and ``collabfl doctor``, say why in words an operator can
act on ("connection refused", "the certificate names coord.example.org"); these probes
find those facts. They judge nothing about trust: the certificate is read without
verifying it, so that a wrong name or CA can be reported; verifying is the caller's job.
"""

from __future__ import annotations

import socket
import ssl

from cryptography import x509

PROBE_TIMEOUT_S = 3.0


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for an IPv6 literal) as (host, port); ValueError if not."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT (a host name or IP, a port 1-65535)")
    return host, int(port)


def unreachable(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why no TCP connection to ``host:port`` opens, or None when one does."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"cannot resolve {host}: {error.strerror}"
    reasons = []
    for family, kind, proto, _, target in addresses:
        try:
            with socket.socket(family, kind, proto) as connection:
                connection.settimeout(timeout_s)
                connection.connect(target)
                return None
        except TimeoutError:
            reasons.append(f"no answer within {timeout_s:g} s (a firewall dropping it?)")
        except OSError as error:
            reasons.append((error.strerror or str(error)).lower())
    return "; ".join(dict.fromkeys(reasons)) or f"{host} has no address"


def presented_certificate(
    host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S
) -> x509.Certificate:
    """The certificate the TLS server on ``host:port`` presents, read WITHOUT verifying it.

    OSError (ssl.SSLError included) when no TLS handshake completes.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((host, port), timeout=timeout_s) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    if der is None:
        raise ssl.SSLError(f"{host}:{port} presented no certificate")
    return x509.load_der_x509_certificate(der)


def certificate_names(certificate: x509.Certificate) -> list[str]:
    """The host names and IP addresses a certificate is valid for (its subject alt names)."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    dns = names.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    return [*dns, *ips]
