"""The garbage collector paused over work that makes many short-lived objects and next to no garbage cycles (a
scheduling pass, the simulation of a start estimate): its collections would walk every object such work keeps
alive, and every long-lived one besides, for nothing. And settled once a long-running process has started."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 10_000  # allocations (less frees) between collections of the youngest generation; Python's default is 700


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
    """Once a long-running process has started: what start-up made is frozen (no collection walks it again), and the
    youngest generation is collected every YOUNG allocations rather than 700. A controller's requests and passes make
    and free objects by the thousand, next to none of them in cycles: at 700 its collector ran some 200 times a
    thousand separate jobs, each time walking the live objects of every request and pass in flight, to free almost
    nothing; at YOUNG a few times."""
    gc.freeze()
    gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
