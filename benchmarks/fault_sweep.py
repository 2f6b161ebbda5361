"""Every disk fault of every workload: the sweep tests/engine/test_disk_faults.py samples in
CI (every third fault), run whole. For each workload of ``tests/helpers/faults.py`` the engine
file calls (``storage.disk_calls``) of one clean run are counted (the injection points), then
one trial fails each call once with EIO, and one fails every call from each non-truncate call
on with ENOSPC; each trial checks that nothing acknowledged is lost, nothing refused is stored,
no batch is torn, reads go on, the next open recovers and takes appends, and ``kfs verify`` is
clean. Prints per workload: injection points, trials, their outcomes, and the trials whose
checks failed (with the first problem of each kind).

    .venv/bin/python benchmarks/fault_sweep.py [WORKLOAD ...] [--dir DIR]     (all: ~2 min)
"""

from __future__ import annotations

import argparse
import collections
import errno
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from helpers.faults import WORKLOADS, fault_plans, run_trial  # noqa: E402


def outcome(trial) -> str:
    """What the fault did to the front end: a write refused (nothing of it stored), or no
    write refused (it hit a flush, a checkpoint, a background pass, the unmount)."""
    if trial.problems:
        return "FAILED CHECKS"
    return "write refused" if trial.refused else "no write refused"


def sweep(name: str, root: Path) -> tuple[int, int, collections.Counter]:
    workload = WORKLOADS[name]
    counted = run_trial(root, workload, None)
    if counted.problems:
        raise SystemExit(f"{name}: the fault-free run fails its checks: {counted.problems}")
    plans = fault_plans(counted.calls)
    outcomes: collections.Counter = collections.Counter()
    first_problem: dict[str, str] = {}
    for plan in plans:
        trial = run_trial(root, workload, plan)
        kind = f"{errno.errorcode[plan.error]}{' from then on' if plan.persist else ' once'}"
        outcomes[kind, outcome(trial)] += 1
        if trial.problems:
            first_problem.setdefault(plan.failed[0][1], f"call {plan.nth} {kind}: "
                                     f"{trial.problems[0]}")
    for call, problem in first_problem.items():
        print(f"    {call}: {problem}")
    return len(counted.calls), len(plans), outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                        help=f"of: {'; '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--dir", type=Path, help="where trials run (default: a temporary one)")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # every trial logs its fault: thousands of lines
    base = args.dir or Path(tempfile.mkdtemp(prefix="kfs-fault-sweep-"))
    totals: collections.Counter = collections.Counter()
    points = trials = 0
    start = time.monotonic()
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"no workload {unknown[0]!r}")
    for name in args.workloads or WORKLOADS:
        began = time.monotonic()
        n_points, n_trials, outcomes = sweep(name, base / "trial")
        points, trials = points + n_points, trials + n_trials
        totals.update(outcomes)
        print(f"{name}: {n_points} injection points, {n_trials} trials "
              f"({time.monotonic() - began:.1f} s): " +
              ", ".join(f"{kind} {what} {n}" for (kind, what), n in sorted(outcomes.items())))
    failed = sum(n for (_, what), n in totals.items() if what == "FAILED CHECKS")
    print(f"total: {points} injection points, {trials} trials in "
          f"{time.monotonic() - start:.0f} s; " +
          ", ".join(f"{what} {sum(n for (_, w), n in totals.items() if w == what)}"
                    for what in ("write refused", "no write refused", "FAILED CHECKS")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
