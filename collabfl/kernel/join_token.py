"""The join token's text form, shared by the coordinator that mints it and the machine
that spends it (coordinator/enrolment/enrolment.py says what it admits).

``cfj1.<id>.<secret>.<pin>``: ``id`` names the token (8 hex digits, safe to log),
``secret`` is 128 random bits in URL-safe base64 (the coordinator keeps only its hash),
``pin`` the SHA-256 of the federation CA's public key in hex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN_PREFIX = "cfj1"
_TOKEN = re.compile(
    rf"{TOKEN_PREFIX}\.(?P<id>[0-9a-f]{{8}})\.(?P<secret>[A-Za-z0-9_-]{{22,64}})"
    r"\.(?P<pin>[0-9a-f]{64})"
)


@dataclass(frozen=True)
class TokenParts:
    """A join token, parsed: which token, its secret, and the CA pin it carries."""

    token_id: str
    secret: str
    pin: str

    @classmethod
    def parse(cls, text: str) -> TokenParts:
        match = _TOKEN.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"not a collabfl join token (expected {TOKEN_PREFIX}.<id>.<secret>.<pin>, as "
                "`collabfl admin invite` prints it)"
            )
        return cls(match["id"], match["secret"], "sha256:" + match["pin"])

    def text(self) -> str:
        return f"{TOKEN_PREFIX}.{self.token_id}.{self.secret}.{self.pin.removeprefix('sha256:')}"
