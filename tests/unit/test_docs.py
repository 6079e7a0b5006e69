from pathlib import Path

from corral.engine.tables import render

ROOT = Path(__file__).resolve().parents[2]


def test_the_states_document_is_rendered_from_the_code():
    """Regenerate with `python -m corral.engine.tables > docs/states.md`."""
    assert (ROOT / "docs" / "states.md").read_text() == render()
