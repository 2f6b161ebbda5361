"""``kfs dump`` of the objects Aiven's RemoteStorageManager writes beside a segment's ``.log``
(``storage.remote.aiven``): its ``.rsm-manifest`` (the chunk index, where each index is, the
transforms; of the data key only its key pair id, never the wrapped key) and its ``.indexes``
(each index the manifest names, decrypted with ``--remote-config``'s key ring when encrypted,
its entries printed as kafka-dump-log prints the index file of that kind). The ``.log`` itself
is dumped through its manifest by the ``.log`` handler (``storage.directory``'s door)."""

from __future__ import annotations

from pathlib import Path

from storage.directory import open_segment_source, read_file
from storage.location import Location
from storage.log_files import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from storage.offset_index import OffsetIndex
from storage.producer_state import decode_snapshot
from storage.remote.aiven import INDEX_NAMES, LOG_OBJECT, parse_manifest
from storage.time_index import TimeIndex
from storage.transaction_index import AbortedTxn

MANIFEST_SUFFIX = ".rsm-manifest"
INDEXES_SUFFIX = ".indexes"


def dump_manifest(dumper, path: str) -> None:
    """The manifest at ``path``: one line (a JSON object with ``--json``) per part."""
    manifest = parse_manifest(read_file(path, dumper.options.store), Location.parse(path).display)
    index = manifest.chunk_index
    parts = {
        "chunkIndex": {"originalChunkSize": index.original_chunk_size,
                       "originalFileSize": index.original_file_size, "chunks": index.count,
                       "transformedSize": index.transformed_size},
        "segmentIndexes": {name: None if where is None else
                           {"position": where[0], "size": where[1]}
                           for name, where in manifest.indexes.items()},
        "compression": manifest.compression,
        "encryption": None if manifest.data_key is None else
        {"keyPair": manifest.data_key.partition(":")[0]},
    }
    if dumper.options.json:
        dumper.emit(parts)
        return
    ci = parts["chunkIndex"]
    dumper.line(f"chunkIndex: originalChunkSize: {ci['originalChunkSize']} originalFileSize: "
                f"{ci['originalFileSize']} chunks: {ci['chunks']} transformedSize: "
                f"{ci['transformedSize']}")
    for name, where in parts["segmentIndexes"].items():
        dumper.line(f"index: {name} " + ("none" if where is None else
                                         f"position: {where['position']} size: {where['size']}"))
    key = parts["encryption"]
    dumper.line(f"compression: {str(manifest.compression).lower()} encryption: "
                + ("none" if key is None else f"key pair {key['keyPair']}"))


def dump_indexes(dumper, path: str) -> None:
    """The indexes in the ``.indexes`` object at ``path``, each after an ``index: <name>``
    line, read through the segment's manifest (and key ring)."""
    where = Location.parse(path)
    log = (where.sibling(where.name[:-len(INDEXES_SUFFIX)] + LOG_OBJECT).text if where.is_remote
           else str(Path(path).with_name(Path(path).name[:-len(INDEXES_SUFFIX)] + LOG_OBJECT)))
    source = open_segment_source(log, dumper.options.store)
    try:
        base = int(where.name.partition("-")[0])
        for name in INDEX_NAMES:
            contents = source.index_bytes(name)
            if not dumper.options.json:
                dumper.line(f"index: {name} ({contents.length} bytes)")
            for entry in _entries(name, contents, base):
                if dumper.options.json:
                    dumper.emit({"index": name, **entry})
                else:
                    dumper.line(" ".join(f"{k}: {v}" for k, v in entry.items()))
    finally:
        source.close()


def _entries(name: str, contents, base: int):
    """The entries of index ``name`` as kafka-dump-log names their fields."""
    if name == "offset":
        index = OffsetIndex(Path(f"{base}{INDEX_SUFFIX}"), base, 0, writable=False,
                            contents=contents)
        for slot in range(index.entries):
            offset, position = index.entry(slot)
            yield {"offset": offset, "position": position}
    elif name == "timestamp":
        index = TimeIndex(Path(f"{base}{TIME_INDEX_SUFFIX}"), base, 0, writable=False,
                          contents=contents)
        for slot in range(index.entries):
            timestamp, offset = index.entry(slot)
            yield {"timestamp": timestamp, "offset": offset}
    elif name == "transaction":
        data = contents.data
        for pos in range(0, len(data) - len(data) % AbortedTxn.SIZE, AbortedTxn.SIZE):
            t = AbortedTxn.from_bytes(data, pos)
            yield {"version": t.version, "producerId": t.producer_id,
                   "firstOffset": t.first_offset, "lastOffset": t.last_offset,
                   "lastStableOffset": t.last_stable_offset}
    elif name == "producerSnapshot" and contents.data:
        for e in decode_snapshot(contents.data):
            yield {"producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                   "coordinatorEpoch": e.coordinator_epoch,
                   "currentTxnFirstOffset": e.current_txn_first_offset,
                   "lastTimestamp": e.last_timestamp}
    elif name == "leaderEpoch":
        # (the leader-epoch checkpoint's text: version, count, then "<epoch> <start offset>")
        lines = contents.data.decode("utf-8", "replace").splitlines()
        for line in lines[2:]:
            epoch, _, offset = line.partition(" ")
            yield {"epoch": epoch, "startOffset": offset}
