"""The client's users, members, tokens, whoami and jobs filters send the requests of the API's contract."""

import json

import httpx
import pytest

from corral.client.aio import AsyncClient
from corral.client.errors import CorralError
from corral.client.http import Client


def recording(seen: list, answer=None):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, dict(request.url.params.multi_items()),
                     json.loads(request.content or b"null")))
        return httpx.Response(200, json=answer if answer is not None else {"name": "x"})

    return Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler))


def test_users_members_and_tokens_send_the_contracts_requests():
    seen: list = []
    api = recording(seen)
    api.whoami()
    api.create_user("alice", projects={"vision": "member"}, unix_user="alice")
    api.user("alice")
    api.update_user("alice", disabled=True, unix_user=None)
    api.set_member("vision", "alice", "viewer")
    api.remove_member("vision", "alice")
    api.create_token("laptop", expires_in=3600, user="bob")
    api.revoke_token(4)
    assert seen == [
        ("GET", "/api/v1/whoami", {}, None),
        ("POST", "/api/v1/users", {}, {"name": "alice", "cluster_admin": False, "unix_user": "alice",
                                       "projects": {"vision": "member"}}),
        ("GET", "/api/v1/users/alice", {}, None),
        ("PATCH", "/api/v1/users/alice", {}, {"disabled": True, "unix_user": None}),
        ("PUT", "/api/v1/projects/vision/members/alice", {}, {"role": "viewer"}),
        ("DELETE", "/api/v1/projects/vision/members/alice", {}, None),
        ("POST", "/api/v1/tokens", {}, {"name": "laptop", "expires_in": 3600, "user": "bob"}),
        ("DELETE", "/api/v1/tokens/4", {}, None),
    ]


def test_listings_and_their_filters():
    seen: list = []
    api = recording(seen, answer=[])
    assert (api.users(), api.members("vision"), api.tokens(), api.tokens("bob")) == ([], [], [], [])
    assert [(method, path, params) for method, path, params, _ in seen] == [
        ("GET", "/api/v1/users", {}), ("GET", "/api/v1/projects/vision/members", {}),
        ("GET", "/api/v1/tokens", {}), ("GET", "/api/v1/tokens", {"user": "bob"})]


def test_a_name_is_one_path_segment_whatever_it_holds():
    paths = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path)
        return httpx.Response(200, json={})

    api = Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler))
    api.user("a/b")
    api.set_member("x/y", "../z", "member")
    assert paths == [b"/api/v1/users/a%2Fb", b"/api/v1/projects/x%2Fy/members/..%2Fz"]


def test_jobs_filter_by_owner_and_project():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params.multi_items()))
        return httpx.Response(200, json={"items": [], "next_cursor": None, "total": 0})

    api = Client("http://ctl:1", "tok", transport=httpx.MockTransport(handler))
    assert list(api.list(owner="alice", project="vision")) == []
    assert api.count(owner="alice") == 0
    assert list(api.list()) == []
    assert seen == [{"limit": "100", "owner": "alice", "project": "vision"},
                    {"limit": "1", "count": "true", "owner": "alice"}, {"limit": "100"}]


def test_a_refused_call_is_the_controllers_reason():
    api = Client("http://ctl:1", "tok", transport=httpx.MockTransport(
        lambda request: httpx.Response(403, json={"detail": "members is for project admins; alice is member"})))
    with pytest.raises(CorralError, match="members is for project admins") as raised:
        api.set_member("vision", "bob", "member")
    assert raised.value.status == 403


async def test_the_async_client_says_who_it_is():
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"name": "alice", "role": "member"}))
    async with AsyncClient("http://ctl:1", "tok", transport=transport) as api:
        assert (await api.whoami())["name"] == "alice"
