"""What a handler run that lost to another controller is: not an error.

With several controllers on one database, a run that finds its handler's lock held (HandlerBusy) committed nothing
and is made again soon; a run rolled back by fencing (StaleWrite: a row changed under it, or a unique key another
controller's insert took first) is counted and logged on one line, and the next pass reads what the other wrote.
"""

from __future__ import annotations

import logging

from corral.metrics import FENCED_WRITES
from corral.store.changes import StaleWrite
from corral.store.database import Conflict

FENCED = (StaleWrite, Conflict)  # errors that mean another controller got there first
BUSY_RETRY = 0.05  # seconds before a pass that found a handler busy looks again: a new job is not left waiting


def note_fenced(handler: str, error: BaseException, log: logging.Logger) -> None:
    FENCED_WRITES.labels(handler).inc()
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    log.info("%s was fenced off (another controller got there first: %s); its transaction was rolled back",
             handler, reason)
