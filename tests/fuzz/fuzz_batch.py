"""Fuzz target: one record batch (any magic) decoded every way the codec offers
(tests/fuzz/common.py says what is checked), plus ``encode_lines`` over the same bytes.

Run by scripts/fuzz.sh and tests/fuzz/test_fuzz.py: ``python tests/fuzz/fuzz_batch.py [libFuzzer
flags] CORPUS_DIR...``.
"""

import sys

import atheris

with atheris.instrument_imports(include=["storage"]):
    import common


def test_one_input(data: bytes) -> None:
    """libFuzzer's entry point."""
    common.fuzz_batch(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
