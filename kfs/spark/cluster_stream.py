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
    """The cluster side of ``KfsStreamReader`` (offsets by (topic, partition)). One client
    for the query's life, as Spark's Kafka source keeps its admin client; once a batch begins
    past every partition's remote tier, the next batches read no ``__remote_log_metadata``
    (what is tiered after that is still served by the brokers)."""

    def __init__(self, opts: SourceOptions, max_bytes: int) -> None:
        self.opts, self.max_bytes = opts, max_bytes
        self._client = None  # (made on first use: the reader is built where it is not used)
        self._latest: dict[tuple[str, int], int] | None = None
        self._remote_ends: dict[tuple[str, int], int] | None = None

    def _query(self) -> ClusterQuery:
        query = ClusterQuery(self.opts, self._client)
        self._client = query.client
        return query

    def initial(self) -> dict[tuple[str, int], int]:
        """Where the stream starts (``startingOffsets``, default latest)."""
        return self._query().offsets(self.opts.starting, True)

    def latest(self, start: dict[tuple[str, int], int]
               ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """(where each partition's next batch begins, its latest offset now)."""
        query = self._query()
        begin = {tp: start.get(tp, query.earliest[tp]) for tp in query.partitions}
        self._latest = dict(query.latest)
        return begin, dict(query.latest)

    def reported_latest(self) -> dict[tuple[str, int], int]:
        """The latest offsets the last :meth:`latest` saw (Spark reports them after asking)."""
        return dict(self._latest) if self._latest is not None else self.latest({})[1]

    def ranges(self, begin: dict[tuple[str, int], int], end: dict[tuple[str, int], int]
               ) -> list[OffsetRange]:
        query = self._query()
        past = self._remote_ends is not None and all(
            begin.get(tp, 0) >= self._remote_ends.get(tp, 0) for tp in end)
        ranges = query.ranges(begin, end, self.max_bytes, remote_tier=not past)
        if not past:
            self._remote_ends = query.remote_ends
        return ranges
