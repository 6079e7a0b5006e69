"""The whole HTTP API under a property-based fuzz (tests/api/fuzz.py): zero 5xx, every 4xx body valid JSON.

Bounded to fit `make test`; bench/fuzz_api.py runs the same fuzz with many more cases.
"""

from __future__ import annotations

import asyncio

from tests.api.fuzz import fuzz
from tests.postgres import scratch_database


def test_the_api_answers_every_fuzzed_request_without_a_5xx_on_sqlite(tmp_path):
    run = fuzz(tmp_path, examples=15)
    assert run.cases > 500, run.summary()
    assert not run.failures, "\n".join([run.summary(), *run.failures[:20]])


async def test_the_api_answers_every_fuzzed_request_without_a_5xx_on_postgresql(tmp_path):
    async with scratch_database() as url:  # int32 ids and NUL in text fail only here
        run = await asyncio.to_thread(fuzz, tmp_path, 5, url)
    assert run.cases > 150, run.summary()
    assert not run.failures, "\n".join([run.summary(), *run.failures[:20]])
