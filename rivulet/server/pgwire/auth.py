"""SCRAM-SHA-256 (RFC 5802, RFC 7677), server side, as PostgreSQL speaks it.

The server keeps only the salted verifier (salt, iteration count, StoredKey, ServerKey),
derived once at start-up; the password itself is not kept. Channel binding is not offered
(the server has no TLS), so clients use the ``n,,`` GS2 header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096


class AuthFailed(Exception):
    """The client's proof or messages were wrong; the reason is for the log, not the client."""


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


@dataclass(frozen=True)
class ScramVerifier:
    """What the server needs to check a password, without the password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @staticmethod
    def from_password(password: str, iterations: int = ITERATIONS) -> ScramVerifier:
        salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return ScramVerifier(
            salt=salt,
            iterations=iterations,
            stored_key=hashlib.sha256(client_key).digest(),
            server_key=_hmac(salted, b"Server Key"),
        )

    def __repr__(self) -> str:  # never print key material
        return f"ScramVerifier(iterations={self.iterations})"


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthFailed("malformed SCRAM attribute")  # never echo what the client sent
        out.setdefault(part[0], part[2:])
    return out


class ScramExchange:
    """One client's exchange: ``first`` answers client-first, ``final`` checks the proof
    and returns the server-final message."""

    def __init__(self, verifier: ScramVerifier) -> None:
        self.verifier = verifier
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthFailed("client-first-message is not UTF-8") from None
        flag, sep, rest = text.partition(",")
        if not sep or flag not in ("n", "y"):
            raise AuthFailed("channel binding is not supported")  # 'p=...' or garbage
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise AuthFailed("malformed client-first-message")
        self._gs2_header = f"{flag},{authzid},"
        attrs = _attributes(bare)
        client_nonce = attrs.get("r")
        if not client_nonce:
            raise AuthFailed("client-first-message without a nonce")
        self._client_first_bare = bare
        self._nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode("ascii")
        salt = base64.b64encode(self.verifier.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self.verifier.iterations}"
        return self._server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        try:
            text = client_final.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthFailed("client-final-message is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise AuthFailed("client-final-message without a proof")
        attrs = _attributes(without_proof)
        expected_binding = base64.b64encode(self._gs2_header.encode("utf-8")).decode("ascii")
        if attrs.get("c") != expected_binding:
            raise AuthFailed("channel binding data does not match")
        if attrs.get("r") != self._nonce:
            raise AuthFailed("nonce does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthFailed("proof is not base64") from None
        if len(proof) != 32:
            raise AuthFailed("proof has the wrong length")
        auth_message = ",".join([self._client_first_bare, self._server_first, without_proof])
        signature = _hmac(self.verifier.stored_key, auth_message.encode("utf-8"))
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key):
            raise AuthFailed("wrong password")
        server_signature = _hmac(self.verifier.server_key, auth_message.encode("utf-8"))
        return b"v=" + base64.b64encode(server_signature)
