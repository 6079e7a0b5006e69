"""The garbage collector paused over work that makes many short-lived objects and next to no garbage cycles (a
scheduling pass, the simulation of a start estimate): its collections would walk every object such work keeps
alive, and every long-lived one besides, for nothing. And settled once a long-running process has started."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 2_000  # allocations (less frees) between collections of the youngest generation; Python's default is 700
OLDEST = 100  # collections of the middle generation between full ones; Python's default is 10


@contextmanager
def paused() -> Iterator[None]:
    """The collector off while the block runs, and on again after it only if it was on before: a block that starts
    while another (in another thread) has it off leaves it to that one, so whichever found it on turns it back on
    and it is never left off. What the block left as garbage is collected once the collector runs again."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def settle() -> None:
    """Once a long-running process has started: what start-up made is frozen (no collection walks it again), the
    youngest generation collected every YOUNG allocations and the whole heap every OLDEST collections of the middle
    one. Over 2,000 separate jobs the controller at Python's (700, 10, 10) ran some 700 young collections, 65 middle
    and 5 or 6 full ones of some 27 ms each, 0.3 s of CPU in all, to free next to nothing: its requests and passes
    free what they make by reference counts. Not further: garbage in cycles (a refused request's traceback and the
    body its frames hold) waits for a collection, and at a youngest generation of 10,000 a flood of 1,000 refused
    registrations grew the controller 58.9 MiB (tests/e2e/test_rogue_worker.py allows 16)."""
    gc.freeze()
    gc.set_threshold(YOUNG, gc.get_threshold()[1], OLDEST)
