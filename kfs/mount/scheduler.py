"""The mount's background jobs, as a broker's ``LogManager`` schedules them on its
``KafkaScheduler``: retention checks (``log.retention.check.interval.ms``), the ``flush.ms``
flusher, delayed deletion of ``.deleted`` files (``file.delete.delay.ms``), the log-dir
checkpoints (``log.flush.offset.checkpoint.interval.ms``,
``log.flush.start.offset.checkpoint.interval.ms``), and, as a transaction coordinator does,
the abort of transactions open longer than ``transaction.timeout.ms``
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``), and the log cleaner of
compacted topics (``log.cleaner.enable``, ``log.cleaner.backoff.ms``).

Every job is a task of the serve loop's nursery, so unmounting cancels them all before the
logs close; each run happens in a worker thread (it does disk I/O), and a failing run is
logged and retried at the next interval rather than taking the mount down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger(__name__)

# How often the cheap per-log checks (flush.ms, due .deleted files) run.
TICK_S = 1.0


async def _every(interval_s: float, job: Callable[[], Awaitable[object]], name: str) -> None:
    while True:
        await trio.sleep(interval_s)
        try:
            await job()
        except Exception:  # noqa: BLE001 - keep serving; the next run retries
            log.exception("background job %s failed", name)


def _in_thread(fn: Callable[..., object], *args: object) -> Callable[[], Awaitable[object]]:
    return lambda: trio.to_thread.run_sync(fn, *args)


async def _log_cleaner_rounds(fs, backoff_s: float) -> None:
    """Kafka's CleanerThread.doWork: clean the dirtiest log, at once again after a pass,
    after ``log.cleaner.backoff.ms`` when there was nothing to clean (or the round failed)."""
    while True:
        try:
            cleaned = await fs.run_log_cleaner()
        except Exception:  # noqa: BLE001 - keep serving; the next round retries
            log.exception("background job log cleaner failed")
            cleaned = False
        await trio.sleep(0 if cleaned else backoff_s)


def start_jobs(nursery: trio.Nursery, fs, mgr) -> None:
    """Start the jobs of a writable mount in ``nursery`` (``fs`` a KafkaFs, ``mgr`` its
    LogManager)."""
    cfg = mgr.config
    nursery.start_soon(_every, cfg.retention_check_interval_ms / 1000, fs.apply_retention,
                       "retention")
    nursery.start_soon(_every, TICK_S, lambda: trio.to_thread.run_sync(
        lambda: (mgr.flush_dirty_logs(mgr.clock.milliseconds()), mgr.delete_due_files())), "flush")
    nursery.start_soon(_every, cfg.flush_offset_checkpoint_interval_ms / 1000,
                       _in_thread(mgr.checkpoint_recovery_points), "recovery-point checkpoint")
    nursery.start_soon(_every, cfg.flush_start_offset_checkpoint_interval_ms / 1000,
                       _in_thread(mgr.checkpoint_log_start_offsets), "log-start-offset checkpoint")
    nursery.start_soon(_every,
                       cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000,
                       _in_thread(mgr.abort_timed_out_transactions), "transaction timeouts")
    if cfg.log_cleaner_enable:
        nursery.start_soon(_log_cleaner_rounds, fs, cfg.log_cleaner_backoff_ms / 1000)
