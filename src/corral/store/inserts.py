"""Insert statements that several of the store's modules run, made once and shared: a statement made anew at each
execution has its cache key worked out again each time, and one made in each module was the same statement thrice."""

from __future__ import annotations

from sqlalchemy import insert

from corral.store.schema import audit, history

INSERT_HISTORY = insert(history)  # a job's, a task's, a worker's or a deployment's history record
INSERT_AUDIT = insert(audit)  # audit log rows, the API's and the controller's own
