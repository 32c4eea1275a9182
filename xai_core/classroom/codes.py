"""Class codes, the instructor's key and the students' anonymous tokens.

A code is read aloud and typed on a phone: six characters from an alphabet without the pairs
people confuse (0/O, 1/I/l), upper case, typed in any case. The key and the tokens are long
random strings that the database keeps only as SHA-256 digests, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"  # no 0, O, 1, I, L
CODE_LENGTH = 6


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(raw) -> str | None:
    """The code as stored, from what someone typed (spaces and case ignored); None when it
    cannot be a code."""
    text = "".join(str(raw or "").split()).upper()
    if len(text) != CODE_LENGTH or any(char not in ALPHABET for char in text):
        return None
    return text


def new_secret() -> str:
    """A key or a session token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """What the database keeps of a key or a token (never the secret itself)."""
    return hashlib.sha256(str(secret).encode("utf-8", "surrogatepass")).hexdigest()


def matches(secret, stored_digest: str) -> bool:
    """Whether `secret` is the one whose digest is stored: a constant-time compare."""
    if not isinstance(secret, str) or not secret:
        return False
    return hmac.compare_digest(digest(secret), stored_digest)
