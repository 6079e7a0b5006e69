"""The Python examples of docs/python.md and the README run as written, against a real cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def examples() -> list[tuple[str, str]]:
    found = []
    for page in (ROOT / "docs" / "python.md", ROOT / "README.md"):
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
        found += [(f"{page.name}#{n}", block) for n, block in enumerate(blocks)
                  if "Client" in block or ".submit(" in block]
    return found


def expected_output(code: str) -> list[str]:
    """What each `print(...)  # expected` line promises to print."""
    return [m.group(1) for m in re.finditer(r"^\s*print\(.*\)\s+#\s*(.+)$", code, re.M)]


def test_every_runnable_example_is_found():
    names = [name for name, _ in examples()]
    assert len([n for n in names if n.startswith("python.md")]) == 7 and "README.md#0" in names


@pytest.mark.parametrize(("name", "code"), examples(), ids=[name for name, _ in examples()])
def test_the_example_runs(name, code, module_cluster, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "CORRAL_URL": module_cluster.url, "CORRAL_TOKEN": module_cluster.admin_token}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for line in expected_output(code):
        assert line in done.stdout, (line, done.stdout)
