"""The frame Kafka's ``AbstractApiMessageSerde`` puts around a message, as ``__cluster_metadata``
(``MetadataRecordSerde``) and ``__remote_log_metadata`` (``RemoteLogMetadataSerde``) record
values carry it: the frame version (1), the message's api key and its version, each an unsigned
varint that must fit a Java short, then the message itself.
"""

from __future__ import annotations

__all__ = ["FRAME_VERSION", "FrameError", "read_frame"]

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION
_SHORT_MAX = 0x7FFF


class FrameError(ValueError):
    """A frame that does not read: ``kafka_message`` is the message of the exception Kafka
    throws for it (``MetadataParseException``); ``str()`` is kfs's reason when it says more."""

    def __init__(self, kafka_message: str, reason: str | None = None) -> None:
        super().__init__(reason or kafka_message)
        self.kafka_message, self.reason = kafka_message, reason


def read_frame(value: bytes) -> tuple[int, int, int]:
    """(api key, message version, position of the message) of a framed value
    (``AbstractApiMessageSerde.read`` up to the message). Raises FrameError for a frame version
    other than 1 or a field that does not read, with Kafka's messages."""
    frame, pos = _unsigned_short(value, 0, "frame version")
    if frame == 0:
        raise FrameError(
            "Could not deserialize metadata record with frame version 0. Note that upgrades from "
            "the preview release of KRaft in 2.8 to newer versions are not supported.")
    if frame != FRAME_VERSION:
        raise FrameError(
            f"Could not deserialize metadata record due to unknown frame version {frame}"
            f"(only frame version {FRAME_VERSION} is supported)")
    api_key, pos = _unsigned_short(value, pos, "type")
    version, pos = _unsigned_short(value, pos, "version")
    return api_key, version, pos


def _unsigned_short(value: bytes, pos: int, entity: str) -> tuple[int, int]:
    """``AbstractApiMessageSerde.unsignedIntToShort``: an unsigned varint (at most 5 bytes,
    into a Java int) that must fit a short. Returns (value, position after it)."""
    result = 0
    for i in range(5):
        if pos >= len(value):
            raise FrameError(f"Error while reading {entity}",
                             f"the value ends inside its {entity} (byte {pos})")
        b = value[pos]
        pos += 1
        result |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            result &= 0xFFFFFFFF
            if result >= 1 << 31:
                result -= 1 << 32
            if result > _SHORT_MAX:
                raise FrameError(f"Value for {entity} was too large.")
            # (short) of a negative int keeps its low 16 bits
            return ((result + 0x8000) & 0xFFFF) - 0x8000, pos
    raise FrameError(f"Error while reading {entity}",
                     f"its {entity} is a varint longer than 5 bytes")
