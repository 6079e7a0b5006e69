"""The garbage collector paused over work that makes many short-lived objects and next to no garbage cycles (a
scheduling pass, the simulation of a start estimate): its collections would walk every object such work keeps
alive, and every long-lived one besides, for nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
