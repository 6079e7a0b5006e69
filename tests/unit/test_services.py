"""Every service an endpoint reaches exists: a misspelt one fails here, not on the first request to it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import corral.controller
from corral.controller.services import Services

FIELDS = {f.name for f in dataclasses.fields(Services)}


def reached(tree: ast.AST) -> set[str]:
    """Attributes read off `services_of(request)` or off a local named `services`."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "services_of") \
                or (isinstance(value, ast.Name) and value.id == "services"):
            names.add(node.attr)
    return names


def test_every_service_reached_in_the_controller_is_a_field_of_services() -> None:
    used = {}
    for path in Path(corral.controller.__file__).parent.glob("*.py"):
        for name in reached(ast.parse(path.read_text())):
            used.setdefault(name, []).append(path.name)
    assert used, "no module reaches a service: the check reads nothing"
    assert {name: files for name, files in used.items() if name not in FIELDS} == {}


def test_a_misspelt_service_is_found() -> None:
    assert reached(ast.parse("services_of(request).stroe.read()\nservices.engine.wake()")) == {"stroe", "engine"}
