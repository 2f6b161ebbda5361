"""The retention plan's boundaries (storage.log_retention), modelled on Kafka's UnifiedLogTest
retention tests (shouldDeleteSizeBasedSegments, shouldDeleteTimeBasedSegmentsReadyToBeDeleted,
shouldDeleteStartOffsetBreachedSegmentsWhenPolicyDoesNotIncludeDelete, ...): each rule at its
exact limit, over stand-in segments (only base offset, size and largest timestamp are read)."""

from types import SimpleNamespace

from storage import LogConfig
from storage.log import Log
from storage.log_retention import describe_retention_plan, retention_plan
from storage.records import build_batch

NOW = 1_700_000_000_000


def segments(*specs):
    """Stand-in segments from (base_offset, size, largest_timestamp), oldest first."""
    return [SimpleNamespace(base_offset=b, size=s, largest_timestamp=t) for b, s, t in specs]


def planned(plan):
    return [(segment.base_offset, why) for segment, why in plan]


def keep_all(**config):
    """A config whose own retention deletes nothing unless the test says otherwise."""
    return LogConfig(**{"retention_ms": -1, "retention_bytes": -1, **config})


def test_start_offset_rule_deletes_segments_whose_next_segment_starts_at_or_below_it():
    """Kafka deletes a segment when the next one's base offset <= logStartOffset
    (deleteLogStartOffsetBreachedSegments), whatever cleanup.policy says."""
    segs = segments((0, 100, NOW), (3, 100, NOW), (6, 100, NOW), (9, 100, NOW))
    config = keep_all(cleanup_policy="compact")
    assert planned(retention_plan(segs, config, 6, NOW)) == [
        (0, "below the log start offset"), (3, "below the log start offset")]
    assert planned(retention_plan(segs, config, 5, NOW)) == [(0, "below the log start offset")]
    assert retention_plan(segs, config, 2, NOW) == []


def test_start_offset_at_the_active_segment_deletes_every_older_segment():
    """With logStartOffset at the active segment's base offset, all segments before it go; the
    active one (no next segment) never goes for the start offset."""
    segs = segments((0, 100, NOW), (3, 100, NOW), (6, 100, NOW))
    assert [s for s, _ in retention_plan(segs, keep_all(), 6, NOW)] == segs[:2]
    assert [s for s, _ in retention_plan(segs, keep_all(), 100, NOW)] == segs[:2]


def test_retention_ms_deletes_only_segments_strictly_older_than_it():
    """Kafka deletes when now - largestTimestamp > retention.ms: a segment exactly
    retention.ms old is kept."""
    segs = segments((0, 100, NOW - 1001), (3, 100, NOW - 1000), (6, 100, NOW))
    assert planned(retention_plan(segs, keep_all(retention_ms=1000), 0, NOW)) == [
        (0, "retention.ms=1000")]


def test_retention_ms_zero_deletes_every_segment_older_than_now():
    """retention.ms=0 is a limit (only negative is unlimited): everything older than now goes."""
    segs = segments((0, 100, NOW - 1), (3, 100, NOW))
    assert planned(retention_plan(segs, keep_all(retention_ms=0), 0, NOW)) == [
        (0, "retention.ms=0")]


def test_an_empty_active_segment_is_never_deleted():
    """Kafka never deletes the active segment while it is empty, even when every rule says so;
    a non-empty active segment that expired does go (the log then rolls)."""
    segs = segments((0, 100, NOW - 5000), (3, 0, NOW - 5000))
    assert [s for s, _ in retention_plan(segs, keep_all(retention_ms=1000), 0, NOW)] == segs[:1]
    segs = segments((0, 100, NOW - 5000), (3, 1, NOW - 5000))
    assert [s for s, _ in retention_plan(segs, keep_all(retention_ms=1000), 0, NOW)] == segs


def test_retention_bytes_deletes_a_segment_that_leaves_the_log_exactly_at_the_limit():
    """deleteRetentionSizeBreachedSegments deletes while size - retention.bytes - segment >= 0:
    what remains may equal the limit, never drop below it."""
    segs = segments((0, 100, NOW), (3, 100, NOW), (6, 100, NOW))
    assert planned(retention_plan(segs, keep_all(retention_bytes=200), 0, NOW)) == [
        (0, "retention.bytes=200")]
    assert retention_plan(segs, keep_all(retention_bytes=201), 0, NOW) == []


def test_retention_bytes_zero_deletes_every_non_empty_segment():
    """retention.bytes=0 is a limit (only negative is unlimited): every segment goes but an
    empty active one."""
    segs = segments((0, 100, NOW), (3, 100, NOW), (6, 0, NOW))
    assert planned(retention_plan(segs, keep_all(retention_bytes=0), 0, NOW)) == [
        (0, "retention.bytes=0"), (3, "retention.bytes=0")]


def test_retention_bytes_at_the_limit_still_deletes_a_leading_empty_segment():
    """With the log exactly at retention.bytes Kafka's rule runs (it returns early only when
    size < retention.bytes) and an empty segment costs nothing to drop."""
    segs = segments((0, 0, NOW), (3, 100, NOW), (6, 100, NOW))
    assert [s for s, _ in retention_plan(segs, keep_all(retention_bytes=200), 0, NOW)] == segs[:1]


def test_describe_retention_plan_says_what_goes(tmp_path):
    """The one-line summary `kfs retention` prints: segments, offsets, bytes and the rules."""
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=3 * 1100, retention_ms=1000,
                                                  retention_bytes=-1))
    try:
        for offset in range(7):
            log.append_batches(build_batch(offset, [b"v" * 1020], None, 0 if offset < 6 else NOW))
        sizes = [s.size for s in log.segments.all()]
        assert len(sizes) == 3
        plan = log.retention_plan(now=NOW)
        assert describe_retention_plan(log, plan) == (
            f"t-0: 2 of 3 segment(s), offsets 0-5 ({sizes[0] + sizes[1]} of {sum(sizes)} "
            "bytes): retention.ms=1000")
        everything = plan + [(log.segments.all()[2], "retention.bytes=0")]
        assert describe_retention_plan(log, everything) == (
            f"t-0: 3 of 3 segment(s), offsets 0-6 ({sum(sizes)} of {sum(sizes)} bytes): "
            "retention.ms=1000, retention.bytes=0")
    finally:
        log.close()
