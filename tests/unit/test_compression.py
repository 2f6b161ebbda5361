"""Compression framing as Kafka writes and reads it (format reference §4).

Expected bytes come from the reference, from Kafka-written fixtures, or from independent
readers (Python's gzip module, kafka-python's xerial reader, lz4.frame, zstandard), never
from this codec itself.
"""

import glob
import gzip
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import lz4.frame
import pytest
import snappy
import xxhash
import zstandard
from kafka.codec import lz4_decode, snappy_decode
from hypothesis import given, settings, strategies as st

from helpers.paths import KAFKA_WRITTEN, REPO
from storage.errors import CorruptRecordError, InvalidConfigError, InvalidRecordError
from storage.records.compression import (
    DECOMPRESSED_FLOOR,
    DECOMPRESSED_RATIO,
    CompressionType,
    compress,
    decompress,
    decompressed_limit,
)

FIXTURES = KAFKA_WRITTEN
needs_fixtures = pytest.mark.needs_fixture("kafka-written")
CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
# > 64 KiB: a compressible 64 KiB block, an incompressible one, then compressible text
BIG = bytes(range(256)) * 256 + os.urandom(65_536) + b"kafka " * 20_000

# Inputs: arbitrary bytes, plus compressible runs long enough to span several blocks.
payloads = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=64), st.integers(1, 3000)),
)


def kafka_compressed_bodies(partition: str, magic: int = 2):
    """(codec, compressed records section) of each compressed v2 batch Kafka wrote, parsed
    with a few lines of struct (independent of the codec under test)."""
    for log in sorted(glob.glob(str(FIXTURES / partition / "*.log"))):
        buf = Path(log).read_bytes()
        pos = 0
        while pos + 61 <= len(buf):
            (length,) = struct.unpack_from(">i", buf, pos + 8)
            codec = buf[pos + 22] & 7
            count = struct.unpack_from(">i", buf, pos + 57)[0]
            if buf[pos + 16] == magic and codec and count:
                yield CompressionType(codec), buf[pos + 61:pos + 12 + length]
            pos += 12 + length


# -- names ----------------------------------------------------------------------------


def test_kafka_names_and_ids():
    assert [(c.value, c.kafka_name) for c in CompressionType] == [
        (0, "none"), (1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")]
    assert CompressionType.for_name("uncompressed") is CompressionType.NONE
    assert CompressionType.for_name("none") is CompressionType.NONE
    for codec in CODECS:
        assert CompressionType.for_name(codec.kafka_name) is codec
    assert CompressionType.for_id(4) is CompressionType.ZSTD


@pytest.mark.parametrize("name", ["producer", "GZIP", "lz5", "", None])
def test_unknown_names_are_config_errors(name):
    with pytest.raises(InvalidConfigError):
        CompressionType.for_name(name)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_ids_are_invalid_records(codec_id):
    with pytest.raises(InvalidRecordError, match="Unknown compression type id"):
        CompressionType.for_id(codec_id)
    with pytest.raises(InvalidRecordError):
        decompress(codec_id, b"x")


@pytest.mark.parametrize("codec, level", [
    (CompressionType.GZIP, 0), (CompressionType.GZIP, 10), (CompressionType.LZ4, 0),
    (CompressionType.LZ4, 18), (CompressionType.ZSTD, 23), (CompressionType.ZSTD, "3"),
])
def test_levels_kafka_refuses(codec, level):
    with pytest.raises(InvalidConfigError):
        compress(codec, b"data", level)


# -- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=60, deadline=None)
@given(data=payloads)
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", BIG], ids=["empty", "one-byte", "big"])
def test_round_trip_edges(codec, data):
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, compress(codec, memoryview(data))) == data


@pytest.mark.parametrize("codec, level", [
    (CompressionType.GZIP, 1), (CompressionType.GZIP, 9), (CompressionType.GZIP, -1),
    (CompressionType.LZ4, 1), (CompressionType.LZ4, 17), (CompressionType.ZSTD, -5),
    (CompressionType.ZSTD, 19),
])
def test_round_trip_other_levels(codec, level):
    assert decompress(codec, compress(codec, BIG, level)) == BIG


def test_none_is_identity():
    assert compress(CompressionType.NONE, memoryview(b"abc")) == b"abc"
    assert decompress(CompressionType.NONE, b"abc") == b"abc"


# -- byte-identical with Kafka's writers ----------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("partition", ["codecs-0", "txn-0", "compacted-0"])
def test_gzip_snappy_zstd_output_equals_kafkas(partition):
    """Kafka's gzip (JDK zlib), snappy (snappy-java) and zstd (zstd-jni) bytes come out the
    same from this codec. lz4 is excluded: the fixtures' lz4 blocks were not produced by
    liblz4 (neither its fast nor HC compressor reproduces them), so only the frame matches."""
    checked = 0
    for codec, body in kafka_compressed_bodies(partition):
        raw = decompress(codec, body)
        if codec == CompressionType.LZ4:
            assert compress(codec, raw)[:7] == body[:7]
            assert compress(codec, raw)[-4:] == body[-4:] == b"\0\0\0\0"
        else:
            assert compress(codec, raw) == body, codec
        checked += 1
    assert checked > 0


# -- gzip ------------------------------------------------------------------------------


def test_gzip_framing():
    data = b"hello kafka " * 1000
    out = compress(CompressionType.GZIP, data)
    # GZIPOutputStream: ID1 ID2 CM=8 FLG=0 MTIME=0 XFL=0 OS=0xff (JDK 16+)
    assert out[:10] == bytes.fromhex("1f 8b 08 00 00000000 00 ff")
    assert out[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
    # one member of raw deflate at zlib's default level 6
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert out[10:-8] == deflater.compress(data) + deflater.flush()
    assert gzip.decompress(out) == data
    inflater = zlib.decompressobj(31)
    assert inflater.decompress(out) == data and inflater.eof and not inflater.unused_data


def test_gzip_header_is_the_same_at_every_level():
    for level in (1, 9):
        assert compress(CompressionType.GZIP, b"abc", level)[:10].hex() == "1f8b08000000000000ff"


def test_gzip_reader_accepts_concatenated_members_and_foreign_headers():
    a, b = b"first member ", b"second member"
    assert decompress(CompressionType.GZIP, gzip.compress(a, mtime=1) + gzip.compress(b)) == a + b


def test_gzip_reader_ignores_trailing_bytes_as_gzipinputstream():
    stream = compress(CompressionType.GZIP, b"abc") + b"\0\0"
    assert decompress(CompressionType.GZIP, stream) == b"abc"


# -- snappy ----------------------------------------------------------------------------

XERIAL_HEADER = bytes.fromhex("82 534e4150505900 00000001 00000001")


def xerial_chunks(stream: bytes) -> list[bytes]:
    """Raw snappy blocks of a single xerial stream."""
    assert stream[:16] == XERIAL_HEADER
    chunks, pos = [], 16
    while pos < len(stream):
        (length,) = struct.unpack_from(">i", stream, pos)
        chunks.append(stream[pos + 4:pos + 4 + length])
        pos += 4 + length
    assert pos == len(stream)
    return chunks


def test_snappy_xerial_framing_and_32k_chunks():
    data = os.urandom(40_000) + b"z" * 60_000  # 100,000 bytes: 32768 + 32768 + 32768 + 1696
    out = compress(CompressionType.SNAPPY, data)
    chunks = xerial_chunks(out)
    assert [len(snappy.uncompress(c)) for c in chunks] == [32768, 32768, 32768, 1696]
    assert b"".join(snappy.uncompress(c) for c in chunks) == data
    assert snappy_decode(out) == data


def test_snappy_empty_input_is_just_the_header():
    assert compress(CompressionType.SNAPPY, b"") == XERIAL_HEADER


def test_snappy_reader_accepts_raw_blocks():
    data = b"raw snappy, as Snappy.compress(byte[]) writes it " * 50
    assert decompress(CompressionType.SNAPPY, snappy.compress(data)) == data
    assert decompress(CompressionType.SNAPPY, snappy.compress(b"short")) == b"short"


def test_snappy_reader_accepts_concatenated_streams():
    a, b = b"A" * 40_000, b"second stream"
    stream = compress(CompressionType.SNAPPY, a) + compress(CompressionType.SNAPPY, b)
    assert decompress(CompressionType.SNAPPY, stream) == a + b


def test_snappy_reader_rejects_bad_chunks():
    good = compress(CompressionType.SNAPPY, b"payload " * 100)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, b"")
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, XERIAL_HEADER + struct.pack(">i", -5) + b"x" * 10)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, good[:-3])  # a chunk shorter than its length
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, good[:20] + b"\xff" * (len(good) - 20))
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, b"\xff\xff\xff\xff\x0fnot snappy")


# -- lz4 -------------------------------------------------------------------------------


def test_lz4_frame_as_lz4blockoutputstream():
    out = compress(CompressionType.LZ4, BIG)
    assert out[:7] == bytes.fromhex("04224d18604082")  # magic, FLG 0x60, BD 0x40, HC 0x82
    assert out[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum
    # blocks: little-endian size, high bit = stored; each holds at most 64 KiB of input
    pos, blocks = 7, []
    while True:
        (word,) = struct.unpack_from("<I", out, pos)
        pos += 4
        if word == 0:
            break
        size, stored = word & 0x7FFFFFFF, bool(word >> 31)
        blocks.append((size, stored))
        pos += size
    assert pos == len(out)
    assert len(blocks) == -(-len(BIG) // 65536)
    assert any(stored for _, stored in blocks)  # the os.urandom part cannot be compressed
    assert lz4.frame.decompress(out) == BIG
    # the same frame liblz4's own framing produces with Kafka's parameters
    assert out == lz4.frame.compress(
        BIG, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
        content_checksum=False, block_checksum=False, store_size=False)
    assert lz4_decode(out) == BIG


def test_lz4_empty_input():
    assert compress(CompressionType.LZ4, b"") == bytes.fromhex("04224d18604082" "00000000")


def test_lz4_magic0_header_checksum():
    out = compress(CompressionType.LZ4, b"legacy", magic=0)
    assert out[:7] == bytes.fromhex("04224d1860401a")  # KAFKA-3160's checksum over magic too
    assert decompress(CompressionType.LZ4, out, magic=0) == b"legacy"
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.LZ4, out)  # a v1+/v2 reader verifies the checksum


def legacy_lz4_wrapper_values(magic: int):
    """Values of the lz4 wrapper messages Kafka wrote in legacy-0 (v0/v1 message layout)."""
    for log in sorted(glob.glob(str(FIXTURES / "legacy-0" / "*.log"))):
        buf = Path(log).read_bytes()
        pos = 0
        while pos + 17 <= len(buf):
            (size,) = struct.unpack_from(">i", buf, pos + 8)
            if buf[pos + 16] == magic and buf[pos + 17] & 7 == 3:
                p = pos + 18 + (8 if magic == 1 else 0)
                (key_len,) = struct.unpack_from(">i", buf, p)
                p += 4 + max(key_len, 0)
                (value_len,) = struct.unpack_from(">i", buf, p)
                yield buf[p + 4:p + 4 + value_len]
            pos += 12 + size


@needs_fixtures
def test_lz4_kafka_written_legacy_frames():
    v0 = list(legacy_lz4_wrapper_values(0))
    v1 = list(legacy_lz4_wrapper_values(1))
    assert v0 and v1
    for value in v0:
        assert value[:7].hex() == "04224d1860401a"
        inner = decompress(CompressionType.LZ4, value, magic=0)
        assert inner[16] == 0  # the first inner message is a v0 message
    for value in v1:
        assert value[:7].hex() == "04224d18604082"
        assert decompress(CompressionType.LZ4, value)[16] == 1


def test_lz4_reader_accepts_other_valid_frames():
    # content size and checksums present, as other clients (kafka-python) write them
    frame = lz4.frame.compress(BIG, store_size=True, content_checksum=True, block_checksum=True)
    assert decompress(CompressionType.LZ4, frame) == BIG


def test_lz4_reader_rejects_corrupt_frames():
    good = compress(CompressionType.LZ4, b"some text " * 500)
    for bad in (good[:-10], good[:5], b"not an lz4 frame at all",
                good[:7] + b"\x10\x00\x00\x00" + b"\xff" * 16 + b"\0\0\0\0"):
        with pytest.raises(CorruptRecordError):
            decompress(CompressionType.LZ4, bad)


# -- zstd ------------------------------------------------------------------------------


def test_zstd_frame_as_zstd_jni_streams_it():
    out = compress(CompressionType.ZSTD, BIG)
    assert out[:4] == bytes.fromhex("28b52ffd")
    params = zstandard.get_frame_parameters(out)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert not params.has_checksum
    assert params.dict_id == 0
    # exactly one frame: a one-frame decoder consumes all of it
    stream = zstandard.ZstdDecompressor().decompressobj()
    assert stream.decompress(out) == BIG
    assert stream.eof and not stream.unused_data
    # Kafka's streams end with an empty last block (flush, then endStream): 3 bytes 01 00 00
    assert out[-3:] == b"\x01\x00\x00"


def test_zstd_reader_handles_content_size_and_several_frames():
    with_size = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(b"sized")
    assert zstandard.get_frame_parameters(with_size).content_size == 5
    assert decompress(CompressionType.ZSTD, with_size) == b"sized"
    two = compress(CompressionType.ZSTD, b"one,") + with_size
    assert decompress(CompressionType.ZSTD, two) == b"one,sized"


def test_zstd_reader_rejects_corrupt_frames():
    good = compress(CompressionType.ZSTD, b"zstd data " * 500)
    junk_frame = b"\x28\xb5\x2f\xfd" + b"\xff" * 20
    for bad in (good[:-2], good[:3], good + b"trailing junk", junk_frame, b""):
        with pytest.raises(CorruptRecordError):
            decompress(CompressionType.ZSTD, bad)


# -- corrupt inputs in general --------------------------------------------------------------


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_garbage_raises_corrupt_record_error(codec):
    for bad in (b"", b"\x00", os.urandom(64), b"\x1f\x8b\x08\x00" + b"\x00" * 30):
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad)


def test_gzip_bad_crc_and_truncation():
    out = bytearray(compress(CompressionType.GZIP, b"checked " * 100))
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.GZIP, bytes(out[:-9]))
    out[-8] ^= 0xFF  # CRC-32 of the trailer
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.GZIP, bytes(out))


def test_error_message_names_the_codec():
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(CompressionType.LZ4, b"garbage garbage")


# -- what a stream may expand to ----------------------------------------------------------


def _lz4_frame_claiming(size: int) -> bytes:
    """An LZ4 frame whose header claims ``size`` bytes of content but holds 5."""
    descriptor = bytes([0x68, 0x40]) + struct.pack("<Q", size)  # FLG 0x60 + content size flag
    checksum = (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF
    return (b"\x04\x22\x4d\x18" + descriptor + bytes([checksum])
            + struct.pack("<I", 5 | 0x80000000) + b"hello" + b"\0\0\0\0")


LYING = {  # a few bytes each, claiming gigabytes
    "lz4": (CompressionType.LZ4, _lz4_frame_claiming(3 << 30)),
    "raw snappy": (CompressionType.SNAPPY, b"\xff\xff\xff\xff\x0f\x00"),
    "xerial snappy": (CompressionType.SNAPPY,
                      XERIAL_HEADER + struct.pack(">i", 6) + b"\xff\xff\xff\xff\x0f\x00"),
}


@pytest.mark.parametrize("name", LYING)
def test_a_declared_size_is_never_allocated(name):
    # In a process limited to 1 GiB of address space, allocating the claim would fail (lz4:
    # MemoryError) or abort the process (snappy's Rust allocator).
    if "libasan" in Path("/proc/self/maps").read_text():
        pytest.skip("ASan's shadow memory needs more address space than the limit")
    codec, data = LYING[name]
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from storage.errors import CorruptRecordError\n"
        "from storage.records.compression import decompress\n"
        "try:\n"
        f"    decompress({int(codec)}, {data!r})\n"
        "except CorruptRecordError as e:\n"
        "    sys.exit('MemoryError' in str(e))\n"
        "sys.exit(2)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]


@pytest.mark.parametrize("codec", CODECS)
def test_output_is_capped(codec):
    data = b"\0" * 300_000
    stream = compress(codec, data)
    assert decompress(codec, stream, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match="decompression cap"):
        decompress(codec, stream, max_size=len(data) - 1)


def _zstd_rle_frame(blocks: int) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB, 4 bytes each."""
    block = ((128 * 1024) << 3 | 1 << 1).to_bytes(3, "little") + b"A"
    last = ((128 * 1024) << 3 | 1 << 1 | 1).to_bytes(3, "little") + b"A"
    return b"\x28\xb5\x2f\xfd\x00\x58" + block * (blocks - 1) + last


def test_default_cap_stops_a_zstd_bomb():
    bomb = _zstd_rle_frame(4096)  # 16 KiB that would expand to 512 MiB
    assert decompressed_limit(len(bomb)) < 512 << 20
    with pytest.raises(CorruptRecordError, match="decompression cap"):
        decompress(CompressionType.ZSTD, bomb)
    assert decompress(CompressionType.ZSTD, _zstd_rle_frame(16)) == b"A" * (2 << 20)


def test_default_cap_lets_deflate_reach_its_maximum_ratio():
    data = b"\0" * (DECOMPRESSED_FLOOR * 2)
    stream = compress(CompressionType.GZIP, data, 9)
    assert len(stream) * DECOMPRESSED_RATIO >= len(data)
    assert decompress(CompressionType.GZIP, stream) == data


# -- xerial snappy framing as snappy-java's SnappyInputStream reads it: its edges, in words ---


def xerial_chunk(data: bytes) -> bytes:
    block = snappy.compress(data)
    return struct.pack(">i", len(block)) + block


def test_concatenated_xerial_streams_are_read_whole_and_each_header_checked():
    first = XERIAL_HEADER + xerial_chunk(b"one ")
    second = XERIAL_HEADER + xerial_chunk(b"two")
    assert decompress(CompressionType.SNAPPY, first + second) == b"one two"
    assert decompress(CompressionType.SNAPPY, first + XERIAL_HEADER) == b"one "  # header only
    old = bytes.fromhex("82 534e4150505900 00000000 ffffffff")  # version 0, then its compat
    for stream in (old + xerial_chunk(b"x"), first + old + xerial_chunk(b"x")):
        with pytest.raises(CorruptRecordError, match=r"^incompatible snappy stream version 0$"):
            decompress(CompressionType.SNAPPY, stream)


def test_xerial_stream_edges_are_errors_in_words_or_a_silent_end():
    first = XERIAL_HEADER + xerial_chunk(b"one ")
    cases = {
        r"^empty snappy stream$": b"",
        r"^insufficient header size in a concatenated snappy stream$": first + XERIAL_HEADER[:15],
        r"^invalid snappy chunk length -5$": first + struct.pack(">i", -5),
        r"^truncated snappy chunk: 10 bytes declared, 3 left$": first + struct.pack(">i", 10)
        + b"abc",
    }
    for words, stream in cases.items():
        with pytest.raises(CorruptRecordError, match=words):
            decompress(CompressionType.SNAPPY, stream)
    # a partial length, and the magic's head followed by no magic, end the stream silently
    assert decompress(CompressionType.SNAPPY, first + b"\x00\x00\x01") == b"one "
    assert decompress(CompressionType.SNAPPY, first + XERIAL_HEADER[:4] + bytes(12)) == b"one "


@pytest.mark.parametrize("codec, name", [(CompressionType.GZIP, "gzip"),
                                         (CompressionType.SNAPPY, "snappy"),
                                         (CompressionType.LZ4, "lz4"),
                                         (CompressionType.ZSTD, "zstd")])
def test_a_stream_past_its_cap_or_cut_names_its_codec(codec, name):
    data = bytes(range(256)) * 2000  # 512 KB: more than one step of every codec's output
    stream = compress(codec, data)
    assert decompress(codec, stream, max_size=len(data)) == data  # exactly at the cap
    with pytest.raises(CorruptRecordError,
                       match=rf"^{name} stream expands past the decompression cap$"):
        decompress(codec, stream, max_size=len(data) - 1)
    if codec != CompressionType.SNAPPY:  # (a raw snappy block has no end to cut)
        with pytest.raises(CorruptRecordError, match=rf"^truncated {name} (stream|frame)$"):
            decompress(codec, stream[:len(stream) // 2])


@pytest.mark.parametrize("size", [128, 20_000])  # a preamble of 2 and of 3 varint bytes
def test_a_raw_snappy_block_s_preamble_is_held_to_the_cap(size):
    block = snappy.compress(bytes(range(128)) * (size // 128) + bytes(size % 128))
    assert decompress(CompressionType.SNAPPY, block, max_size=size) == snappy.uncompress(block)
    with pytest.raises(CorruptRecordError, match=r"^snappy stream expands past"):
        decompress(CompressionType.SNAPPY, block, max_size=size - 1)


def test_a_raw_snappy_block_claiming_more_than_it_can_expand_to_says_so():
    with pytest.raises(CorruptRecordError, match=r"^snappy block of 6 bytes declares 4294967295 "
                                                 r"uncompressed bytes$"):
        decompress(CompressionType.SNAPPY, b"\xff\xff\xff\xff\x0f\x00")


def test_a_magic_0_lz4_frame_with_its_content_size_is_read_whatever_its_header_checksum():
    # Kafka 0.8-0.9's lz4 (magic 0) hashed the frame's magic into HC (KAFKA-3160); readers
    # of magic 0 skip the check. A frame with the content-size flag has a 10-byte descriptor.
    data = b"kafka " * 100
    frame = bytearray(lz4.frame.compress(data, store_size=True, content_checksum=False))
    assert frame[4] & 0x08  # FLG: the content size follows BD
    frame[14] ^= 0xFF  # HC after magic, FLG, BD and the 8-byte size: wrong now
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.LZ4, bytes(frame), magic=1)
    assert decompress(CompressionType.LZ4, bytes(frame), magic=0) == data


def test_a_zstd_frame_is_kafka_s_no_checksum_no_content_size_at_the_level_asked():
    # zstd-jni's ZstdOutputStream as Kafka drives it: no pledged size, no checksum
    data = b"".join(b"record %d of a topic\n" % i for i in range(5000))
    frame = compress(CompressionType.ZSTD, data)
    descriptor = frame[4]  # Frame_Header_Descriptor
    assert frame[:4] == b"\x28\xb5\x2f\xfd" and descriptor & 0x04 == 0  # no checksum flag
    assert descriptor >> 6 == 0 and not descriptor & 0x20  # no content size, not single-segment
    fast = compress(CompressionType.ZSTD, data, level=1)
    best = compress(CompressionType.ZSTD, data, level=19)
    assert len(best) < len(fast) and compress(CompressionType.ZSTD, data, level=1) == fast
    assert decompress(CompressionType.ZSTD, best) == decompress(CompressionType.ZSTD, fast) == data


def test_lz4_s_default_level_is_the_fast_compressor_any_other_hc():
    # Kafka's Lz4BlockOutputStream: level 9 (the default) takes lz4-java's fastCompressor,
    # any other level highCompressor(level)
    import lz4.block

    data = b"".join(b"event %d: %s\n" % (i, b"abc" * (i % 7)) for i in range(3000))[:60_000]
    for level, mode in ((None, {"mode": "default"}),
                        (12, {"mode": "high_compression", "compression": 12})):
        frame = compress(CompressionType.LZ4, data, level)
        (size,) = struct.unpack_from("<I", frame, 7)
        assert frame[11:11 + size] == lz4.block.compress(data, store_size=False, **mode), level


def test_an_unknown_codec_name_or_level_is_refused_in_words():
    with pytest.raises(InvalidConfigError, match=r"^Unknown compression name: 'brotli'$"):
        CompressionType.for_name("brotli")
    with pytest.raises(InvalidConfigError, match=r"^invalid gzip compression level: 42$"):
        compress(CompressionType.GZIP, b"x", 42)
