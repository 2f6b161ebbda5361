"""Where the log cleaner of a backing directory has got to (a compacted partition ``c-0``)."""

from __future__ import annotations

from storage.log_files import CLEANER_OFFSET_CHECKPOINT, offset_from_file_name


def cleaned_to(backing, name="c 0"):
    try:
        lines = (backing / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()[2:]
    except FileNotFoundError:
        return 0
    return max([int(line.split()[2]) for line in lines if line.startswith(name + " ")],
               default=0)


def active_base(backing):
    return max(offset_from_file_name(p.name) for p in (backing / "c-0").iterdir()
               if p.name.endswith(".log"))
