"""What the users, members, tokens and whoami API takes and answers (controller/users_api.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from corral.core.roles import Role
from corral.core.spec import NAME
from corral.core.wire import Text

USER_NAME = r"^[a-z_][a-z0-9_-]{0,31}$"  # as a unix account's name: what `--unix-user` maps it to reads alike
UserName = Annotated[str, StringConstraints(pattern=USER_NAME)]
ProjectName = Annotated[str, StringConstraints(max_length=100, pattern=f"^{NAME}$")]
ProjectRole = Literal[Role.PROJECT_ADMIN, Role.MEMBER, Role.VIEWER]  # core.roles.PROJECT_ROLES
MAX_TOKEN_SECONDS = 5 * 365 * 86400


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserRequest(Strict):
    name: UserName
    cluster_admin: bool = False
    unix_user: UserName | None = None
    projects: dict[ProjectName, ProjectRole] = Field(default_factory=dict, max_length=1000)


class UserChange(Strict):
    cluster_admin: bool | None = None
    unix_user: UserName | None = None
    disabled: bool | None = None


class UserView(BaseModel):
    name: str
    cluster_admin: bool
    unix_user: str | None
    projects: dict[str, str]
    created_at: float
    disabled_at: float | None


class MemberRequest(Strict):
    role: ProjectRole


class MemberView(BaseModel):
    name: str
    role: str


class TokenCreate(Strict):
    name: Annotated[Text, StringConstraints(min_length=1, max_length=100)] = "token"
    expires_in: int | None = Field(None, ge=60, le=MAX_TOKEN_SECONDS, description="seconds; null: never")
    user: UserName | None = Field(None, description="a cluster admin may make one for another user")


class UserTokenView(BaseModel):
    id: int
    user: str
    name: str
    prefix: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None = None
    last_used_at: float | None = None


class IssuedUserToken(BaseModel):
    id: int
    user: str
    name: str
    prefix: str
    token: str = Field(..., description="shown this once: only its hash is kept")
    created_at: float
    expires_at: float | None


class TokenInfo(BaseModel):
    kind: Literal["admin", "user", "job"]
    id: int | None = None
    expires_at: float | None = None


class WhoAmI(BaseModel):
    name: str
    role: str
    cluster_admin: bool
    projects: dict[str, str]
    token: TokenInfo
