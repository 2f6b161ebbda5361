"""The key ring of Aiven's tiered-storage plugin, read side: the RSA key pairs a broker names in
``rsm.config.encryption.key.pairs`` (each ``<id>``'s private key in the PEM file
``rsm.config.encryption.key.pairs.<id>.private.key.file``), what unwraps each segment's data
key, and AES-GCM, what that key decrypts the segment's chunks and indexes with.

Mirrored from the plugin (github Aiven-Open/tiered-storage-for-apache-kafka):
``security/RsaEncryptionProvider.java`` wraps a segment's 32-byte AES key with
``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`` (BouncyCastle: SHA3-512 for the OAEP hash and for
MGF1, empty label), the manifest keeping it as ``"<key pair id>:<base64>"``
(``DataKeySerializer``); ``security/AesEncryptionProvider.java`` encrypts each piece with
``AES/GCM/NoPadding``, a 12-byte IV first and the 128-bit tag last, the manifest's ``aad`` as
additional data.

pycryptodome does both: its OAEP takes SHA3-512 for the hash and MGF1 (the ``cryptography``
package refuses SHA3 in OAEP padding). A key pair is loaded when a segment first needs it, so a
bad file of one pair leaves the segments of the others readable. No error, log line or
``repr`` carries key material: only key pair ids and file paths.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping
from pathlib import Path

from storage.errors import CorruptRecordError

IV_BYTES = 12  # AesEncryptionProvider / SegmentEncryptionMetadataV1.IV_SIZE
TAG_BYTES = 16  # 128-bit GCM tag
DATA_KEY_BYTES = 32  # AES-256


class RemoteSegmentError(CorruptRecordError):
    """A remote segment's objects that cannot be read as the plugin wrote them (a manifest, a
    chunk, a key): one line naming the object, never any key material. Other segments are
    still read."""


class KeyRingError(RemoteSegmentError):
    """A data key that cannot be unwrapped: its key pair is not in the ring, or the pair's
    private key file is unreadable or not an RSA private key."""


class KeyRing:
    """``{key pair id: private key file}`` (the broker's ``encryption.key.pairs``). Thread-safe;
    each private key is read once, on first use."""

    def __init__(self, private_key_files: Mapping[str, str | Path]) -> None:
        self._files = {k: Path(v) for k, v in private_key_files.items()}
        self._keys: dict[str, object] = {}
        self._data_keys: dict[str, bytes] = {}  # unwrapped, by the manifest's dataKey text
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KeyRing({sorted(self._files)})"

    @property
    def ids(self) -> list[str]:
        return sorted(self._files)

    def data_key(self, wrapped: str, where: str) -> bytes:
        """The AES key of the manifest's ``dataKey`` (``"<key pair id>:<base64>"``) of the
        segment ``where`` names. Raises KeyRingError (the key pair not in the ring, its file
        unreadable or not a key, or the wrapped key not its)."""
        with self._lock:
            key = self._data_keys.get(wrapped)
        if key is not None:
            return key
        key_id, sep, text = wrapped.partition(":")
        if not sep:
            raise KeyRingError(f"{where}: the data key names no key pair (not <id>:<key>)")
        if key_id not in self._files:
            raise KeyRingError(
                f"{where}: its data key is wrapped with key pair {key_id!r}, which is not in the "
                f"key ring (encryption.key.pairs: {', '.join(self.ids) or 'none'})")
        try:
            ciphertext = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise KeyRingError(f"{where}: the data key is not base64") from None
        from Crypto.Cipher import PKCS1_OAEP
        from Crypto.Hash import SHA3_512

        # (OAEP's MGF1 takes the same hash by default: SHA3-512, as BouncyCastle's)
        cipher = PKCS1_OAEP.new(self._private_key(key_id), hashAlgo=SHA3_512)
        try:
            key = cipher.decrypt(ciphertext)
        except (ValueError, TypeError):
            raise KeyRingError(f"{where}: the data key does not unwrap with key pair "
                               f"{key_id!r} (another key, or a damaged one)") from None
        if len(key) != DATA_KEY_BYTES:
            raise KeyRingError(f"{where}: the data key is {len(key)} bytes, not "
                               f"{DATA_KEY_BYTES}")
        with self._lock:
            self._data_keys[wrapped] = key
        return key

    def _private_key(self, key_id: str):
        with self._lock:
            key = self._keys.get(key_id)
        if key is not None:
            return key
        from Crypto.PublicKey import RSA

        path = self._files[key_id]
        try:
            pem = path.read_bytes()
        except OSError as e:
            raise KeyRingError(f"key pair {key_id!r}: its private key file {path} cannot be "
                               f"read: {e.strerror or e}") from None
        try:
            key = RSA.import_key(pem)
        except (ValueError, IndexError, TypeError):
            key = None
        if key is None or not key.has_private():
            raise KeyRingError(f"key pair {key_id!r}: {path} is not an RSA private key (PEM, "
                               "BEGIN PRIVATE KEY)")
        with self._lock:
            self._keys[key_id] = key
        return key


def decrypt(key: bytes, aad: bytes, piece: bytes, where: str) -> bytes:
    """One piece the plugin encrypted (a chunk of a ``.log``, an index): IV, ciphertext, tag.
    Raises RemoteSegmentError naming ``where`` when it is too short or its GCM tag fails
    (damaged, cut, or another key's)."""
    if len(piece) < IV_BYTES + TAG_BYTES:
        raise RemoteSegmentError(f"{where}: {len(piece)} bytes, too short for AES-GCM's IV and "
                                 "tag (truncated)")
    from Crypto.Cipher import AES

    cipher = AES.new(key, AES.MODE_GCM, nonce=piece[:IV_BYTES], mac_len=TAG_BYTES)
    cipher.update(aad)
    try:
        return cipher.decrypt_and_verify(piece[IV_BYTES:-TAG_BYTES], piece[-TAG_BYTES:])
    except ValueError:
        raise RemoteSegmentError(f"{where}: the AES-GCM tag does not match (the bytes are "
                                 "damaged or not this segment's)") from None
