"""The checkout and the fixture sets the tests read."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# Partition directories written by Kafka's own code (each set with a README.txt saying how).
FIXTURES_ROOT = TESTS / "fixtures"
KAFKA_WRITTEN = FIXTURES_ROOT / "kafka-written"
INTERNAL_TOPICS = FIXTURES_ROOT / "internal-topics"
KAFKA_CLEANED = FIXTURES_ROOT / "kafka-cleaned"
# Kafka 4.1.1 with Aiven's tiered-storage plugin: runs A (plain), B (zstd), C (AES-GCM)
AIVEN_TIERED = FIXTURES_ROOT / "aiven-tiered"
