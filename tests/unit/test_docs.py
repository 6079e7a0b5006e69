"""The documents rendered from the code are what the code renders now: they cannot drift from it."""

from pathlib import Path

from corral import architecture
from corral.engine import tables

ROOT = Path(__file__).resolve().parents[2]


def test_the_states_document_is_rendered_from_the_code():
    """Regenerate with `python -m corral.engine.tables > docs/states.md`."""
    assert (ROOT / "docs" / "states.md").read_text() == tables.render()


def test_the_architecture_document_is_rendered_from_the_code():
    """Regenerate with `python -m corral.architecture > docs/architecture.md`."""
    assert (ROOT / "docs" / "architecture.md").read_text() == architecture.render()


def test_every_package_of_corral_is_in_a_layer_with_a_docstring():
    layered = {package for layer in architecture.layers() for package in layer}
    packages = {f"corral.{path.parent.name}" for path in (ROOT / "src" / "corral").glob("*/__init__.py")}
    assert packages == layered
    assert all(architecture._summary(package) for package in layered)
