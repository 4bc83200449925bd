"""The `gpucert` command's own process: how it collects garbage from its start to its end. The console script
(gpucert/__main__.py, and `python -m gpucert.cli.main`) calls `at_start` before the command and `before_exit` after
it; a command may stop the collector (`stop_collecting`) only in a process the script owns, never where the process
goes on (tests call `cli.main.main` in theirs)."""

from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "at_start", "before_exit", "stop_collecting"]

# the cyclic collector's thresholds for a command's process: (young allocations before a young collection, young
# collections before a middle one, middle ones before a full one is considered); Python's are (700, 10, 10)
THRESHOLDS = (50_000, 20, 10)

_owned = False  # at_start ran: this process runs one command and ends


def at_start() -> None:
    """The process runs one command and ends: the collector looks at young objects after 50,000 allocations instead
    of 700. A run builds a heap of long-lived objects (each node's evidence, each check's outcome) and leaves next to
    no garbage in cycles, yet with Python's thresholds every growth of that heap by a quarter cost a full collection
    walking all of it: a re-test at 1,024 x 8 ran 17 of them, 3.9 s of CPU, each finding 0-750 objects to free; with
    these none ran, the re-test's CPU 17.7 -> 15.0 s user, its peak RSS the same (508 MiB; benchmarks/RESULTS.md).
    Never called where the process goes on (tests call `main`)."""
    global _owned
    _owned = True
    gc.set_threshold(*THRESHOLDS)


def stop_collecting() -> None:
    """From here to the process's end, no cyclic collection, in a process `at_start` owns (elsewhere nothing).

    For what a one-command process does last: evaluate its run folder and sign it. Young and middle collections
    still walked every object the evaluation kept, once or twice each as it aged (a young collection at 50,000 walks
    the 50,000, a larger threshold walks more at once): at 1,024 x 8, 0.53 s of a re-test's CPU in 203 young and 17
    middle collections (timed by gc.callbacks), 0.15 s with the collector stopped at the evaluation (what is left:
    the imports and the preparation); a full run's peak RSS the same with it stopped throughout (914 and 915 MiB),
    its cyclic garbage at the end 200,497 objects. Not before the evaluation: measuring a cluster polls its API for
    as long as the pods take, and that garbage is collected as ever. Not restarted after: the young generation would
    then hold every object the evaluation made, and its next collection walk them all (`before_exit` freezes them)."""
    if _owned:
        gc.disable()


def before_exit() -> None:
    """The command has returned and the process is about to end: what it built is frozen (gc.freeze), so the
    interpreter's teardown does not walk it again. That walk, the collections at shutdown over every object the run
    left alive, was about a tenth of a certification's wall (32 x 8: 1.9-2.3 s after the command returned, 0.08 s
    frozen; benchmarks/RESULTS.md, issue 28). The teardown still runs as ever: atexit handlers (logging's, execnet's
    for xdist), buffered streams flushed, objects freed by their counts; only the cycles among frozen objects are
    not collected, and a process that ends needs nothing of them (os._exit, which skips all of it, gained 0.04 s
    more). Never called where the process goes on (tests call `main`)."""
    gc.freeze()
