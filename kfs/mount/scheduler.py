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


async def apply_retention(mgr, records) -> dict[str, int]:
    """Run retention on every log (``LogManager.cleanup_logs``, in a worker thread), then tell
    ``records`` (the mount's ``RecordFiles``) which offsets went, so the kernel's cached
    entries of them go too. Returns ``{partition: segments deleted}``."""
    names = mgr.partition_names()
    before = {name: mgr.get(name).log_start_offset for name in names}
    deleted = await trio.to_thread.run_sync(mgr.cleanup_logs)
    for name in names:
        start = mgr.get(name).log_start_offset
        if start > before[name]:
            await records.forget_below(name, start)
    return deleted


async def _log_cleaner_rounds(mgr, records, backoff_s: float) -> None:
    """Kafka's CleanerThread.doWork: clean the dirtiest log (``storage.log_cleaner``, in a
    worker thread), at once again after a pass, after ``log.cleaner.backoff.ms`` when there
    was nothing to clean (or the round failed). The offsets a pass removed read ENOENT at
    once: ``records`` forgets the kernel's entries below the end of the pass."""
    from storage.log_cleaner import for_log_manager

    cleaner = None  # (made on the first round: its offset map is large)
    while True:
        try:
            cleaner = cleaner or for_log_manager(mgr)
            result = await trio.to_thread.run_sync(cleaner.clean_filthiest_log)
            if result is not None:
                await records.forget_below(result.name, result.end)
        except Exception:  # noqa: BLE001 - keep serving; the next round retries
            log.exception("background job log cleaner failed")
            result = None
        await trio.sleep(0 if result is not None else backoff_s)


def start_jobs(nursery: trio.Nursery, fs, mgr) -> None:
    """Start the jobs of a writable mount in ``nursery`` (``fs`` a KafkaFs, told through its
    ``records`` what retention and the cleaner removed; ``mgr`` its LogManager)."""
    cfg = mgr.config
    nursery.start_soon(_every, cfg.retention_check_interval_ms / 1000,
                       lambda: apply_retention(mgr, fs.records), "retention")
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
        nursery.start_soon(_log_cleaner_rounds, mgr, fs.records, cfg.log_cleaner_backoff_ms / 1000)
