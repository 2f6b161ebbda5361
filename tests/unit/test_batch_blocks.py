"""A segment's ``.log`` walked a block at a time (storage.segment.BatchBlocks, Kafka's
``FileLogInputStream``), with the next block read ahead by a thread while this one is consumed:
the same whole batches as the plain walk whatever their sizes against the block's (a batch's
tail carried into the next block, one too long to carry read again, one longer than a block),
and a walk left early gives its descriptor back."""

import pytest

from storage import LogConfig
from storage.records import build_batch
from storage.records._c.scan import batch_ends
from storage.segment import BatchBlocks, LogSegment

NAME = "00000000000000000000.log"
BLOCK = 4096  # a small block, so that a few hundred batches cross many of them


def write_segment(tmp_path, sizes):
    """A .log of one batch per value size in ``sizes`` (one record each); the opened segment
    and the batches' bytes."""
    built, offset = [], 0
    for size in sizes:
        built.append(build_batch(offset, [bytes([offset % 251]) * size], None, 1000 + offset))
        offset += 1
    (tmp_path / NAME).write_bytes(b"".join(built))
    return LogSegment(tmp_path, 0, LogConfig(), False), built


def walk(segment, read_ahead, stop_after=None):
    """The batches' bytes as a consumer of whole batches sees them block by block."""
    seen = []
    blocks = BatchBlocks(segment, 0, block_size=BLOCK, read_ahead=read_ahead)
    for block in blocks:
        starts, end = batch_ends(block)
        seen += [bytes(block[a:b]) for a, b in zip(starts, starts[1:] + [end])]
        blocks.advance(end)
        if stop_after is not None and len(seen) >= stop_after:
            break
    return seen


@pytest.mark.parametrize("sizes", [
    [100] * 300,  # tails carried in front of the block read ahead
    [700] * 100,  # tails longer than their room (an eighth of a block): read again from the file
    [50, 9000, 50, 30, 5000] * 10,  # batches longer than a block
], ids=["carried", "too-long-to-carry", "longer-than-a-block"])
def test_read_ahead_walks_the_same_batches_as_the_plain_walk(tmp_path, sizes):
    segment, built = write_segment(tmp_path, sizes)
    assert walk(segment, read_ahead=False) == built
    assert walk(segment, read_ahead=True) == built


def test_a_walk_left_early_waits_for_its_read_ahead_and_gives_the_descriptor_back(tmp_path):
    segment, built = write_segment(tmp_path, [100] * 300)
    seen = walk(segment, read_ahead=True, stop_after=50)
    assert 50 <= len(seen) < len(built) and seen == built[:len(seen)]
    # the pending read of the next block held the .log's descriptor in use until waited for
    assert segment._file.users == 0


def test_read_ahead_stops_at_end(tmp_path):
    segment, built = write_segment(tmp_path, [100] * 300)
    end = sum(len(b) for b in built[:120])
    blocks = BatchBlocks(segment, 0, end, block_size=BLOCK, read_ahead=True)
    seen = []
    for block in blocks:
        starts, stop = batch_ends(block)
        starts = [s for s in starts if blocks.position + s < end]
        seen += [bytes(block[a:a + len(built[0])]) for a in starts]
        blocks.advance(starts[-1] + len(built[0]) if starts else 0)
    assert seen == built[:120] and segment._file.users == 0


def test_a_pending_read_holds_the_descriptor_until_waited_for_once(tmp_path):
    segment, built = write_segment(tmp_path, [100] * 3)
    pending = segment.start_read_into(bytearray(BLOCK), 0)
    assert segment._file.users == 1  # (the pool cannot close it under the reading thread)
    assert bytes(pending.wait()) == b"".join(built) and segment._file.users == 0
    with pytest.raises(ValueError, match="^a read is waited for once$"):
        pending.wait()
    assert segment._file.users == 0  # (given back once, not twice)
