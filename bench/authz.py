"""`make bench`: the cost of the authorization check per request, in microseconds.

"decide" is core.roles.decide alone (a member cancelling its own job); "identity+decide" is what a request with a
personal token pays before its route runs: the token looked up in SQLite (hash, not revoked, not expired, user
enabled, its memberships), the Principal built, then decide.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import timeit
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from corral.controller.identity import identify  # noqa: E402
from corral.core.roles import Action, Principal, Role, decide  # noqa: E402
from corral.store.database import sqlite_url  # noqa: E402
from corral.store.store import Store  # noqa: E402
from corral.store.users import insert_token, insert_user  # noqa: E402

DECIDE_CALLS = 200_000
IDENTIFY_CALLS = 2_000


def decide_micros() -> float:
    alice = Principal("alice", projects={"vision": Role.MEMBER, "audio": Role.VIEWER})
    seconds = timeit.timeit(lambda: decide(alice, Action.CANCEL, "vision", "alice"), number=DECIDE_CALLS)
    return seconds / DECIDE_CALLS * 1e6


async def identify_micros(directory: Path) -> float:
    store = await Store.open(sqlite_url(directory / "corral.db"))
    try:
        async with store.write() as connection:
            user_id = await insert_user(connection, "alice", False, None,
                                        {"vision": Role.MEMBER, "audio": Role.VIEWER}, time.time())
            await insert_token(connection, user_id, "bench", "cu_bench-token", time.time(), None)
        services = SimpleNamespace(store=store, tokens=SimpleNamespace(admin="admin-token"))
        await identify(services, "cu_bench-token", time.time())  # warm, and its last use recorded
        started = time.perf_counter()
        for _ in range(IDENTIFY_CALLS):
            principal, _ = await identify(services, "cu_bench-token", time.time())
            assert decide(principal, Action.CANCEL, "vision", "alice") is None
        return (time.perf_counter() - started) / IDENTIFY_CALLS * 1e6
    finally:
        await store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        both = asyncio.run(identify_micros(Path(directory)))
    print(f"authz: decide {decide_micros():.2f} us per check; identity+decide (personal token, SQLite) "
          f"{both:.0f} us per request")


if __name__ == "__main__":
    main()
