"""The mount's one errno mapping: every FUSE handler goes through :func:`fuse_errors`, which
turns storage errors and OSErrors into the errno a FUSE reply carries (:func:`errno_for`).
pyfuse3 ends its whole main loop on any exception but ``FUSEError``."""

from __future__ import annotations

import errno
import functools
import logging
from typing import Any, Callable

import pyfuse3

from storage import errors as serr

from .append import InvalidJsonLineError

log = logging.getLogger(__name__)


class InvalidBatchesError(ValueError):
    """Bytes written to ``append-batches`` that a broker would refuse from a producer: not
    whole v2 batches, a bad CRC, a partial batch at close, or a producer-state violation
    (sequence, epoch, transaction state). The mount answers EINVAL."""


_ERRNO_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (serr.UnknownTopicOrPartitionError, errno.ENOENT),
    (serr.OffsetOutOfRangeError, errno.ENOENT),
    (serr.InvalidTopicError, errno.EINVAL),
    (serr.InvalidConfigError, errno.EINVAL),
    (serr.PartitionExistsError, errno.EEXIST),
    (serr.RecordTooLargeError, errno.EFBIG),
    (serr.ReadOnlyLogError, errno.EROFS),
    (serr.DamagedLogError, errno.EIO),  # (the load logged the damage)
    (serr.OfflineLogError, errno.EIO),  # (going offline logged the I/O error, once)
    (serr.KeySeparatorMissingError, errno.EINVAL),
    (InvalidBatchesError, errno.EINVAL),
    (InvalidJsonLineError, errno.EINVAL),
    (OverflowError, errno.EOVERFLOW),
)


def errno_for(exc: BaseException) -> int:
    """The errno a FUSE reply carries for ``exc``.

    UnknownTopicOrPartition/OffsetOutOfRange -> ENOENT, InvalidTopic/InvalidConfig -> EINVAL,
    PartitionExists -> EEXIST, RecordTooLarge -> EFBIG, ReadOnlyLog -> EROFS, a keyed line
    without separator or bad ``append-batches`` input -> EINVAL, an offset beyond the inode
    space -> EOVERFLOW, OSError -> its own errno (ENOSPC, EIO...), CorruptRecord/InvalidRecord
    and anything else -> EIO (logged, with a traceback when unexpected).
    """
    if isinstance(exc, pyfuse3.FUSEError):
        return exc.errno
    if isinstance(exc, serr.KeylessRecordError):
        log.warning("append refused: %s", exc)  # the errno alone would not say why
        return errno.EINVAL
    if isinstance(exc, serr.InvalidTimestampError):  # (the errno alone would not say why)
        log.warning("append refused (EINVAL), nothing of it stored: %s", exc)
        return errno.EINVAL
    if isinstance(exc, InvalidJsonLineError):
        log.warning("append.jsonl write refused (EINVAL), nothing of it stored: %s", exc)
        return errno.EINVAL
    for cls, code in _ERRNO_BY_ERROR:
        if isinstance(exc, cls):
            if code in (errno.EINVAL, errno.EFBIG, errno.EEXIST, errno.EROFS):
                log.info("refused (%s): %s", errno.errorcode[code], exc)  # the errno says less
            return code
    if isinstance(exc, OSError):
        if exc.errno:
            if exc.errno in (errno.EIO, errno.ENOSPC, errno.EDQUOT):
                log.warning("storage I/O error: %s", exc)
            return exc.errno
        log.error("OSError without errno", exc_info=exc)
        return errno.EIO
    if isinstance(exc, (serr.CorruptRecordError, serr.InvalidRecordError)):
        log.error("bad record data on disk: %s", exc)
        return errno.EIO
    log.error("unexpected error in a FUSE handler", exc_info=exc)
    return errno.EIO


def fuse_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Make a handler raise only FUSEError: pyfuse3 ends the whole main loop on any other
    exception.  trio.Cancelled and KeyboardInterrupt (BaseException) still propagate."""

    @functools.wraps(handler)
    async def wrapper(*args: Any) -> Any:
        try:
            return await handler(*args)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # noqa: BLE001 - this is the one mapping point
            raise pyfuse3.FUSEError(errno_for(exc)) from None

    return wrapper


def fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)
