"""A larger one-off fuzz of the HTTP API than the suite's (tests/api/test_fuzz.py): cases run and 5xx found.

    python bench/fuzz_api.py [--examples 200] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.api.fuzz import fuzz  # noqa: E402
from tests.postgres import scratch_database  # noqa: E402


async def _on_postgres(data_dir: Path, examples: int):
    async with scratch_database() as url:
        return await asyncio.to_thread(fuzz, data_dir, examples, url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200,
                        help="cases per operation, valid and invalid by its schema")
    parser.add_argument("--postgres", action="store_true", help="on a scratch PostgreSQL database, not SQLite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        run = (asyncio.run(_on_postgres(Path(data_dir), args.examples)) if args.postgres
               else fuzz(Path(data_dir), args.examples))
    print(f"fuzz_api ({'PostgreSQL' if args.postgres else 'SQLite'}, {args.examples} examples per operation): "
          f"{run.summary()}")
    for failure in run.failures[:50]:
        print(" ", failure[:400])
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
