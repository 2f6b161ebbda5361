"""Compression codecs framed exactly as Kafka's writers frame them (``CompressionType``,
``GzipCompression``, ``SnappyCompression``, ``Lz4Compression``/``Lz4BlockOutputStream``,
``ZstdCompression`` in ``org.apache.kafka.common.compress``).

The compressors themselves are the libraries' (zlib, python-snappy, lz4, zstandard); only the
framing around them is written here, because the framing is what Kafka's readers depend on:

* gzip: one RFC 1952 member with ``java.util.zip.GZIPOutputStream``'s header (MTIME 0, XFL 0,
  OS 0xff), zlib level 6 by default.
* snappy: snappy-java's ``SnappyOutputStream`` stream (16-byte xerial header, then big-endian
  length-prefixed raw blocks of at most 32 KiB of input each).
* lz4: the LZ4 frame ``Lz4BlockOutputStream`` writes (FLG 0x60, BD 0x40: independent 64 KiB
  blocks, no checksums, no content size), fast compressor at the default level 9, LZ4-HC for
  any other level.
* zstd: one streamed frame (no content size, no checksum), level 3 by default.

Readers accept what Kafka's readers accept; a corrupt stream raises CorruptRecordError.
Readers hold the whole decompressed section in memory, so what they may produce is capped
(:func:`decompressed_limit`) and they stream against that cap: no size a stream declares
(lz4's content size, snappy's length preamble) is allocated before it is checked.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib

import lz4.block
import lz4.frame
import snappy
import xxhash
import zstandard

from storage.errors import CorruptRecordError, InvalidConfigError, InvalidRecordError

__all__ = ["CompressionType", "compress", "decompress"]


class CompressionType(enum.IntEnum):
    """Codec id stored in bits 0-2 of a batch's attributes (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the codec: 'none', 'gzip', 'snappy', 'lz4' or 'zstd'."""
        return self.name.lower()

    @classmethod
    def for_id(cls, codec_id: int) -> "CompressionType":
        """The codec with attribute id ``codec_id`` (``CompressionType.forId``).

        Raises InvalidRecordError for an unknown id (5-7).
        """
        try:
            return cls(codec_id)
        except ValueError:
            raise InvalidRecordError(f"Unknown compression type id: {codec_id}") from None

    @classmethod
    def for_name(cls, name: str) -> "CompressionType":
        """The codec for a ``compression.type`` value: 'uncompressed' or 'none', 'gzip',
        'snappy', 'lz4', 'zstd' (case-sensitive, as Kafka's config validation).

        'producer' is not a codec (it means "keep the producer's"); callers handle it before
        calling this. Raises InvalidConfigError for anything else.
        """
        codec = _BY_NAME.get(name) if isinstance(name, str) else None
        if codec is None:
            raise InvalidConfigError(f"Unknown compression name: {name!r}")
        return codec


_BY_NAME = {
    "uncompressed": CompressionType.NONE,
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}

# Kafka's level ranges and defaults (compression.{gzip,lz4,zstd}.level).
GZIP_DEFAULT_LEVEL = -1  # Deflater.DEFAULT_COMPRESSION, i.e. zlib level 6
LZ4_DEFAULT_LEVEL = 9
ZSTD_DEFAULT_LEVEL = 3
ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL = -131072, 22


def compress(codec: int, data, level: int | None = None, *, magic: int = 2) -> bytes:
    """Compress ``data`` (bytes-like) into the stream Kafka's writer for ``codec`` produces.

    ``level`` None means Kafka's default (gzip -1 = 6, lz4 9, zstd 3); snappy has no level.
    ``magic`` only matters for lz4: magic 0 batches carry Kafka's historical wrong header
    checksum. Codec NONE returns the bytes unchanged. Raises InvalidConfigError for a level
    Kafka would refuse and InvalidRecordError for an unknown codec id.
    """
    codec = CompressionType.for_id(codec)
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.SNAPPY:
        return _snappy_compress(data)
    level = check_level(codec, level)
    if codec == CompressionType.GZIP:
        return _gzip_compress(data, level)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data, level, magic)
    return _zstd_compress(data, level)


# The cap on a decompressed records section: DECOMPRESSED_RATIO times the compressed size
# (deflate's maximum, 258 bytes per 2-bit code, so no gzip stream reaches it; lz4 and snappy
# stay far below; only zstd goes beyond), and at least DECOMPRESSED_FLOOR: a 1 MiB batch
# (max.message.bytes) may expand to about 1 GiB.
DECOMPRESSED_RATIO = 1032
DECOMPRESSED_FLOOR = 64 * 1024 * 1024


def decompressed_limit(compressed_size: int) -> int:
    """The most bytes :func:`decompress` lets ``compressed_size`` bytes expand to by default."""
    return max(DECOMPRESSED_FLOOR, DECOMPRESSED_RATIO * compressed_size)


def decompress(codec: int, data, *, magic: int = 2, max_size: int | None = None) -> bytes:
    """Decompress one Kafka-written stream of ``codec`` from ``data`` (bytes or memoryview).

    Accepts what Kafka's readers accept: concatenated gzip members; xerial snappy streams,
    concatenated ones and headerless raw snappy; LZ4 frames (for ``magic`` 0 the header
    checksum is not verified, as Kafka); one or more zstd frames with or without a content size.
    At most ``max_size`` bytes come out (None: :func:`decompressed_limit` of the input's size).
    Raises CorruptRecordError for a corrupt or truncated stream or one that expands past the
    cap, InvalidRecordError for an unknown codec id.
    """
    codec = CompressionType.for_id(codec)
    if codec == CompressionType.NONE:
        return bytes(data)
    limit = decompressed_limit(len(data)) if max_size is None else max_size
    try:
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, limit, magic)
        return _DECODERS[codec](data, limit)
    except CorruptRecordError:
        raise
    except Exception as exc:  # any library failure on these bytes means a corrupt stream
        raise CorruptRecordError(
            f"corrupt {codec.kafka_name} stream ({len(data)} bytes): "
            f"{type(exc).__name__}: {exc}") from exc


def _too_big(codec: str) -> CorruptRecordError:
    """The error for a stream that decompresses to more than its cap."""
    return CorruptRecordError(f"{codec} stream expands past the decompression cap")


# codec -> (default, lowest, highest, one more allowed value)
_LEVELS = {
    CompressionType.GZIP: (GZIP_DEFAULT_LEVEL, 1, 9, -1),
    CompressionType.LZ4: (LZ4_DEFAULT_LEVEL, 1, 17, None),
    CompressionType.ZSTD: (ZSTD_DEFAULT_LEVEL, ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL, None),
}


def check_level(codec: int, level: int | None) -> int | None:
    """The level Kafka's writer for ``codec`` uses: ``level``, or the codec's default for None
    (None for codecs without levels). Raises InvalidConfigError for a level outside Kafka's
    range (``compression.gzip.level`` -1 or 1..9, ``.lz4.level`` 1..17, ``.zstd.level``
    -131072..22)."""
    codec = CompressionType.for_id(codec)
    if codec not in _LEVELS:
        return None
    default, low, high, extra = _LEVELS[codec]
    if level is None:
        return default
    if isinstance(level, bool) or not isinstance(level, int) or not (
            low <= level <= high or level == extra):
        raise InvalidConfigError(f"invalid {codec.kafka_name} compression level: {level!r}")
    return level


# gzip: java.util.zip.GZIPOutputStream writes MTIME 0, XFL 0 and OS 0xff (JDK 16+) whatever
# the level, so the header is written here rather than by zlib (which sets XFL/OS itself).
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_TRAILER = struct.Struct("<II")


def _gzip_compress(data, level: int) -> bytes:
    deflater = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflater.compress(data) + deflater.flush()
    trailer = _GZIP_TRAILER.pack(zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join((GZIP_HEADER, body, trailer))


def _gzip_decompress(data, limit: int) -> bytes:
    # GZIPInputStream reads concatenated members and ignores trailing bytes that do not
    # start another member; zlib (wbits 31) checks each member's CRC-32 and size. Asking for
    # one byte more than the room left tells a full stop from a stream that goes on.
    out = []
    rest = data
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(inflater.decompress(rest, limit + 1))
        limit -= len(out[-1])
        if limit < 0:
            raise _too_big("gzip")
        if not inflater.eof:
            raise CorruptRecordError("truncated gzip stream")
        rest = inflater.unused_data
        if rest[:2] != b"\x1f\x8b":
            return b"".join(out)


# snappy: snappy-java's SnappyOutputStream (xerial) framing, 32 KiB of input per block.
SNAPPY_MAGIC = b"\x82SNAPPY\x00"
SNAPPY_HEADER = SNAPPY_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
SNAPPY_BLOCK_SIZE = 32 * 1024
_SNAPPY_MAGIC_HEAD = 0x82534E41  # the magic's first 4 bytes read as a chunk length
_SNAPPY_MAX_CHUNK = 512 * 1024 * 1024
# A snappy op yields at most 64 bytes per 3 (a copy with a 2-byte offset): a block claiming
# more than 22 times its size lies, and the library would allocate the claim up front.
_SNAPPY_MAX_EXPANSION = 22
_INT32_BE = struct.Struct(">i")


def _snappy_compress(data) -> bytes:
    view = memoryview(data).cast("B")
    parts = [SNAPPY_HEADER]
    pack = _INT32_BE.pack
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE):
        block = snappy.compress(view[start:start + SNAPPY_BLOCK_SIZE])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_uncompress(block: bytes, limit: int) -> bytes:
    """One raw snappy block, its length preamble checked before the library allocates it."""
    declared, shift = 0, 0
    for byte in block[:5]:
        declared |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    if declared > _SNAPPY_MAX_EXPANSION * len(block):
        raise CorruptRecordError(
            f"snappy block of {len(block)} bytes declares {declared} uncompressed bytes")
    if declared > limit:
        raise _too_big("snappy")
    return snappy.uncompress(block)


def _snappy_decompress(data, limit: int) -> bytes:
    # SnappyInputStream: no xerial magic (or under 16 bytes) => the whole input is one raw
    # block; otherwise chunks, where a "length" equal to the magic's head starts another
    # concatenated stream.
    data = bytes(data)
    if not data:
        raise CorruptRecordError("empty snappy stream")
    if len(data) < 16 or not data.startswith(SNAPPY_MAGIC):
        return _snappy_uncompress(data, limit)
    _check_snappy_version(data, 0)
    out = []
    pos, end = 16, len(data)
    while end - pos >= 4:  # snappy-java stops silently before a partial length
        (length,) = _INT32_BE.unpack_from(data, pos)
        pos += 4
        if length == _SNAPPY_MAGIC_HEAD - (1 << 32):
            if end - pos < 12:
                raise CorruptRecordError("insufficient header size in a concatenated snappy stream")
            if data[pos - 4:pos + 4] != SNAPPY_MAGIC:
                break
            _check_snappy_version(data, pos - 4)
            pos += 12
            continue
        if length < 0 or length > _SNAPPY_MAX_CHUNK:
            raise CorruptRecordError(f"invalid snappy chunk length {length}")
        if end - pos < length:
            raise CorruptRecordError(
                f"truncated snappy chunk: {length} bytes declared, {end - pos} left")
        out.append(_snappy_uncompress(data[pos:pos + length], limit))
        limit -= len(out[-1])
        pos += length
    return b"".join(out)


def _check_snappy_version(data: bytes, pos: int) -> None:
    (version,) = _INT32_BE.unpack_from(data, pos + 8)
    if version < 1:
        raise CorruptRecordError(f"incompatible snappy stream version {version}")


# lz4: Lz4BlockOutputStream's frame. Header = magic, FLG 0x60 (version 01, independent
# blocks), BD 0x40 (64 KiB blocks), HC = second byte of xxh32(descriptor); for magic 0 Kafka
# hashed the magic too (KAFKA-3160), which gives 0x1a.
LZ4_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
LZ4_HEADER_MAGIC_V0 = b"\x04\x22\x4d\x18\x60\x40\x1a"
LZ4_END_MARK = b"\x00\x00\x00\x00"
LZ4_BLOCK_SIZE = 64 * 1024
_LZ4_STORED = 0x80000000
_UINT32_LE = struct.Struct("<I")


def _lz4_compress(data, level: int, magic: int) -> bytes:
    # lz4-java: the default level 9 picks the fast compressor, any other level LZ4-HC.
    if level == LZ4_DEFAULT_LEVEL:
        kwargs = {"mode": "default"}
    else:
        kwargs = {"mode": "high_compression", "compression": level}
    view = memoryview(data).cast("B")
    parts = [LZ4_HEADER_MAGIC_V0 if magic == 0 else LZ4_HEADER]
    pack = _UINT32_LE.pack
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start:start + LZ4_BLOCK_SIZE]
        block = lz4.block.compress(chunk, store_size=False, **kwargs)
        if len(block) >= len(chunk):  # incompressible: store it, high bit set
            parts.append(pack(len(chunk) | _LZ4_STORED))
            parts.append(chunk)
        else:
            parts.append(pack(len(block)))
            parts.append(block)
    parts.append(LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data, limit: int, magic: int) -> bytes:
    # One frame, trailing bytes ignored (as lz4.frame.decompress, which would allocate a
    # declared content size up front: the output comes in bounded steps instead).
    if magic == 0:
        data = _lz4_fix_header_checksum(bytes(data))
    frame = lz4.frame.LZ4FrameDecompressor()
    step = max(LZ4_BLOCK_SIZE, 4 * len(data))
    out = [frame.decompress(data, max_length=min(step, limit + 1))]
    while True:
        limit -= len(out[-1])
        if limit < 0:
            raise _too_big("lz4")
        if frame.eof:
            return b"".join(out)
        if frame.needs_input or not out[-1]:
            raise CorruptRecordError("truncated lz4 frame")
        step = min(2 * step, 1 << 24)
        out.append(frame.decompress(b"", max_length=min(step, limit + 1)))


def _lz4_fix_header_checksum(data: bytes) -> bytes:
    # Kafka does not verify HC for magic 0; rewrite it so lz4.frame's check passes.
    if len(data) < 7 or data[:4] != LZ4_HEADER[:4]:
        return data
    descriptor_len = 10 if data[4] & 0x08 else 2  # FLG, BD (+ 8-byte content size if flagged)
    hc = 4 + descriptor_len
    if len(data) <= hc:
        return data
    checksum = (xxhash.xxh32_intdigest(data[4:hc]) >> 8) & 0xFF
    return data[:hc] + bytes((checksum,)) + data[hc + 1:]


# zstd: zstd-jni streams the records through ZSTD_compressStream2 without a pledged size, so
# the frame has no content size; on close Kafka's BufferedOutputStream flushes (ending the
# last data block) before endStream writes an empty last block. compressobj() with a block
# flush then a frame flush does the same, which gives Kafka's bytes. Contexts are per thread
# because zstandard's are not thread-safe and the mount decodes on worker threads.
_zstd_local = threading.local()


def _zstd_compress(data, level: int) -> bytes:
    cache = _zstd_local.__dict__.setdefault("compressors", {})
    cctx = cache.get(level)
    if cctx is None:
        cctx = cache[level] = zstandard.ZstdCompressor(
            level=level, write_checksum=False, write_content_size=False)
    stream = cctx.compressobj()
    return b"".join((stream.compress(data), stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK),
                     stream.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)))


def _zstd_decompress(data, limit: int) -> bytes:
    # ZstdInputStream decodes consecutive frames and fails on a truncated one or trailing junk.
    # decompressobj() has no output bound, so the input goes in slices: a block (>= 4 bytes)
    # yields at most 128 KiB, so a slice of max(1 KiB, room / 2**15) bytes yields at most the
    # room left (or 32 MiB) and a couple of blocks before the cap is checked.
    dctx = getattr(_zstd_local, "decompressor", None)
    if dctx is None:
        dctx = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    out = []
    view = memoryview(data)
    pos, end = 0, len(view)
    stream = dctx.decompressobj()
    while True:
        step = max(1024, limit >> 15)
        out.append(stream.decompress(view[pos:pos + step] if pos or step < end else view))
        limit -= len(out[-1])
        if limit < 0:
            raise _too_big("zstd")
        pos = min(pos + step, end)
        if stream.eof:
            pos -= len(stream.unused_data)
            if pos == end:
                return b"".join(out)
            stream = dctx.decompressobj()
        elif pos == end:
            raise CorruptRecordError("truncated zstd frame")


_DECODERS = {
    CompressionType.GZIP: _gzip_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
    CompressionType.LZ4: _lz4_decompress,
    CompressionType.ZSTD: _zstd_decompress,
}
