"""The serving part of the Python client: deployments through the controller's API."""

from __future__ import annotations

from pydantic import TypeAdapter

from corral.client.http import Client
from corral.client.plans import API
from corral.core.deployment_spec import DeploymentSpec
from corral.core.deployment_views import DeploymentDetail, DeploymentView, KeyReply

_views = TypeAdapter(list[DeploymentView])


def deploy(client: Client, spec: DeploymentSpec | dict) -> DeploymentView:
    """Validated locally first, so a bad spec names its field before any round trip."""
    spec = spec if isinstance(spec, DeploymentSpec) else DeploymentSpec.model_validate(spec)
    return DeploymentView.model_validate(client._json("POST", f"{API}/deployments", json=spec.model_dump(mode="json")))


def deployments(client: Client, include_ended: bool = False) -> list[DeploymentView]:
    return _views.validate_python(client._json("GET", f"{API}/deployments", params={"all": include_ended}))


def deployment(client: Client, name: str) -> DeploymentDetail:
    return DeploymentDetail.model_validate(client._json("GET", f"{API}/deployments/{name}"))


def undeploy(client: Client, name: str) -> DeploymentView:
    return DeploymentView.model_validate(client._json("DELETE", f"{API}/deployments/{name}"))


def scale(client: Client, name: str, replicas: int) -> DeploymentView:
    return DeploymentView.model_validate(client._json("POST", f"{API}/deployments/{name}/scale",
                                                      json={"replicas": replicas}))


def new_key(client: Client, name: str, key: str | None = None) -> str:
    """A key for calling `name` through the router: `key` if given, else a new random one."""
    return KeyReply.model_validate(client._json("POST", f"{API}/deployments/{name}/keys", json={"key": key})).key
