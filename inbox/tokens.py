"""The token vault: task tokens encrypted at rest, fingerprinted for duplicate detection.

A task token is opaque: it is never parsed, and its plaintext exists only in memory,
between ``token_decrypt`` and the Step Functions call that needs it. Encryption uses
MultiFernet over INBOX_TOKEN_KEYS (newest first, so keys rotate: encrypt with the
first, decrypt with any); the digest is an HMAC-SHA256 under INBOX_TOKEN_DIGEST_KEY,
which stays stable so duplicates are found across key rotations.
"""

import functools
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from config.errors import InboxError


class TokenVaultError(InboxError):
    """A stored token cannot be decrypted with any configured key."""

    status = 500
    code = "token_vault"


@functools.cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key.encode()) for key in keys])


def _vault() -> MultiFernet:
    return _fernet(tuple(settings.INBOX_TOKEN_KEYS))


def token_encrypt(token: str) -> bytes:
    """Return the token encrypted under the newest key."""
    return _vault().encrypt(token.encode())


def token_decrypt(ciphertext: bytes) -> str:
    """Return the plaintext token; raise TokenVaultError (without the token) if no key fits."""
    try:
        return _vault().decrypt(bytes(ciphertext)).decode()
    except InvalidToken:
        raise TokenVaultError(
            "A stored task token cannot be decrypted with any key in INBOX_TOKEN_KEYS; "
            "was a retired key removed before rotation finished?"
        ) from None


def token_rotate(ciphertext: bytes) -> bytes:
    """Return the ciphertext re-encrypted under the newest key."""
    try:
        return _vault().rotate(bytes(ciphertext))
    except InvalidToken:
        raise TokenVaultError(
            "A stored task token cannot be decrypted with any key in INBOX_TOKEN_KEYS."
        ) from None


def token_digest(token: str) -> str:
    """Return the keyed fingerprint of a token (hex), the same under every encryption key."""
    key = settings.INBOX_TOKEN_DIGEST_KEY.encode()
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()
