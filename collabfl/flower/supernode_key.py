"""A client daemon's SuperNode key: how the SuperLink tells registered SuperNodes apart.

With TLS the coordinator's SuperLink runs with ``--enable-supernode-auth``: a SuperNode
joins the Fleet API only by signing its requests with a key the operator registered
(``collabfl admin register-supernode``), and the SuperLink gives it the Flower node id
that registration returned. Each client daemon therefore makes one key pair in its state
directory on first start (OpenSSH form on a NIST curve, which is what Flower reads) and
keeps it across restarts, so a restarted daemon is the same Flower node.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from collabfl.kernel.atomic import write_bytes

PRIVATE_NAME, PUBLIC_NAME = "supernode_key", "supernode_key.pub"


def ensure_supernode_key(state_dir: Path) -> tuple[Path, Path]:
    """The daemon's (private, public) key files, made on first use; private is mode 0600."""
    private_path, public_path = state_dir / PRIVATE_NAME, state_dir / PUBLIC_NAME
    if private_path.exists():
        key = serialization.load_ssh_private_key(private_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{private_path} is not an EC key: Flower needs a NIST curve")
    else:
        key = ec.generate_private_key(ec.SECP384R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        write_bytes(private_path, pem)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    write_bytes(public_path, public + b"\n", shared=True)
    return private_path, public_path


def supernode_key_pem(public_key: str) -> bytes:
    """An OpenSSH SuperNode public key as the PEM the SuperLink stores and compares (what
    ``flwr supernode register`` sends); ValueError unless it is an EC key on a NIST curve,
    which is what Flower reads."""
    try:
        key = serialization.load_ssh_public_key(public_key.strip().encode())
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ValueError("supernode_key is not an OpenSSH public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("supernode_key must be on a NIST curve (Flower's requirement)")
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
