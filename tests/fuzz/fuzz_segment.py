"""Fuzz target: a segment's bytes walked with ``iter_batches`` (v2 batches and legacy v0/v1
entries), each batch decoded as Record tuples and into Arrow columns (tests/fuzz/common.py says
what is checked).

Run by scripts/fuzz.sh and tests/fuzz/test_fuzz.py: ``python tests/fuzz/fuzz_segment.py [libFuzzer
flags] CORPUS_DIR...``.
"""

import sys

import atheris

with atheris.instrument_imports(include=["storage"]):
    import common


def test_one_input(data: bytes) -> None:
    """libFuzzer's entry point."""
    common.fuzz_segment(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
