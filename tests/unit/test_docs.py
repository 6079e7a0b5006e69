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


def test_the_role_table_in_the_teams_document_is_the_code_s():
    """docs/teams.md shows RULES by hand: each cell must say what the table in corral.core.roles says."""
    from corral.core.roles import RULES, Action, Role

    text = (ROOT / "docs" / "teams.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ") and ": " in line.split("|")[1]]
    shown = {Action(line.split("|")[1].strip().split(":")[0]): [cell.strip() for cell in line.split("|")[2:6]]
             for line in lines}
    roles = (Role.CLUSTER_ADMIN, Role.PROJECT_ADMIN, Role.MEMBER, Role.VIEWER)
    assert shown == {action: [str(RULES[role].get(action) or "-") for role in roles] for action in Action}
