"""Growable C buffers and ``OwnedBuffer`` (type stub of the compiled ``buffers.pyx``)."""

class OwnedBuffer:
    """Memory from the codec, handed to Arrow without a copy (buffer protocol, read-only); only
    the codec makes one."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
