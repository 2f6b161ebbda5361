"""A stream (``readStream.format("kfs")``) over a live cluster: the offsets of each micro-batch
asked of the cluster (``kfs.reading.cluster.ClusterQuery``), its ranges the bucket's for what
the live remote segments hold and the brokers' for the rest, so the history comes from the
bucket in the first micro-batches (as many as ``maxOffsetsPerTrigger`` cuts it into) and new
records through the brokers as they arrive. Offsets are Spark's Kafka source's JSON, in the
checkpoint as it writes them; partitions that appear later start at their log start offset."""

from __future__ import annotations

from ..reading.cluster import ClusterQuery
from ..reading.offsets import OffsetRange
from ..reading.options import SourceOptions


class ClusterStream:
    """The cluster side of ``KfsStreamReader`` (offsets by (topic, partition))."""

    def __init__(self, opts: SourceOptions, max_bytes: int) -> None:
        self.opts, self.max_bytes = opts, max_bytes

    def initial(self) -> dict[tuple[str, int], int]:
        """Where the stream starts (``startingOffsets``, default latest)."""
        return ClusterQuery(self.opts).offsets(self.opts.starting, True)

    def latest(self, start: dict[tuple[str, int], int]
               ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """(where each partition's next batch begins, its latest offset now)."""
        query = ClusterQuery(self.opts)
        begin = {tp: start.get(tp, query.earliest[tp]) for tp in query.partitions}
        return begin, dict(query.latest)

    def ranges(self, begin: dict[tuple[str, int], int], end: dict[tuple[str, int], int]
               ) -> list[OffsetRange]:
        return ClusterQuery(self.opts).ranges(begin, end, self.max_bytes)
