"""`corral user|member|token|whoami|login|logout`: the people who use a cluster, their roles and their tokens."""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

import click
from rich.table import Table

from corral.cli.common import CliError, client, console, json_option, print_json
from corral.cli.daemons import positive_option
from corral.cli.format import age_since
from corral.client import credentials
from corral.client.errors import CorralError
from corral.client.http import Client
from corral.core.roles import PROJECT_ROLES
from corral.core.spec_text import parse_duration

role_choice = click.Choice([str(role) for role in PROJECT_ROLES])


def table(*columns: str) -> Table:
    found = Table(box=None, pad_edge=False)
    for column in columns:
        found.add_column(column, no_wrap=True)
    return found


def projects_text(projects: dict[str, str]) -> str:
    """"vision:member ml:viewer": a user's role in each of its projects."""
    return " ".join(f"{project}:{role}" for project, role in sorted(projects.items())) or "-"


# users ---------------------------------------------------------------------------------------


@click.group()
def user() -> None:
    """Create, list and change users (cluster admins)."""


@user.command("create")
@click.argument("name")
@click.option("--project", "projects", multiple=True, metavar="P", help="A project it belongs to (repeatable).")
@click.option("--role", type=role_choice, help="Its role in each --project  [default: member]")
@click.option("--cluster-admin", is_flag=True, help="May do everything, in every project.")
@click.option("--unix-user", metavar="U", help="The local account its tasks run as on workers that run as root.")
@json_option
def user_create(name: str, projects: tuple[str, ...], role: str | None, cluster_admin: bool, unix_user: str | None,
                as_json: bool) -> None:
    """Create user NAME; give it a token with `corral token create --user NAME`."""
    if role and not projects:
        raise click.UsageError("--role is the role in a --project: name one")
    created = client().create_user(name, cluster_admin=cluster_admin, unix_user=unix_user,
                                   projects={project: role or "member" for project in projects})
    if as_json:
        print_json(created)
        return
    click.echo(f"user {created['name']} created ({describe(created)})")


def describe(found: dict[str, Any]) -> str:
    """"cluster admin" or "vision:member", and the unix account, for one line about a user."""
    roles = "cluster admin" if found.get("cluster_admin") else projects_text(found.get("projects") or {})
    return roles + (f", runs as {found['unix_user']}" if found.get("unix_user") else "")


@user.command("list")
@json_option
def user_list(as_json: bool) -> None:
    """Every user: its roles, its unix account, and whether it is disabled."""
    found = client().users()
    if as_json:
        print_json(found)
        return
    rows = table("NAME", "ROLE", "PROJECTS", "UNIX USER", "CREATED", "DISABLED")
    for each in found:
        rows.add_row(each["name"], "cluster-admin" if each.get("cluster_admin") else "-",
                     projects_text(each.get("projects") or {}), each.get("unix_user") or "-",
                     age_since(each.get("created_at")), "-" if each.get("disabled_at") is None else "yes")
    console().print(rows)


@user.command("set")
@click.argument("name")
@click.option("--cluster-admin/--no-cluster-admin", default=None, help="Make it a cluster admin, or no longer one.")
@click.option("--unix-user", metavar="U", help="The local account its tasks run as.")
@click.option("--no-unix-user", is_flag=True, help="Its tasks run as the worker's own user again.")
@click.option("--disable/--enable", "disabled", default=None, help="Refuse all its tokens, or accept them again.")
@json_option
def user_set(name: str, cluster_admin: bool | None, unix_user: str | None, no_unix_user: bool,
             disabled: bool | None, as_json: bool) -> None:
    """Change user NAME: only what is given changes. Its projects change with `corral member`."""
    if unix_user is not None and no_unix_user:
        raise click.UsageError("--unix-user and --no-unix-user contradict each other")
    changes: dict[str, Any] = {key: value for key, value in
                               (("cluster_admin", cluster_admin), ("unix_user", unix_user), ("disabled", disabled))
                               if value is not None}
    if no_unix_user:
        changes["unix_user"] = None
    if not changes:
        raise click.UsageError("nothing to change: give --cluster-admin, --unix-user, --no-unix-user or --disable")
    changed = client().update_user(name, **changes)
    if as_json:
        print_json(changed)
        return
    disabled_text = ", disabled" if changed.get("disabled_at") is not None else ""
    click.echo(f"user {changed['name']}: {describe(changed)}{disabled_text}")


# project members -----------------------------------------------------------------------------


@click.group()
def member() -> None:
    """Add, change and remove a project's members (cluster admins, and the project's admins)."""


@member.command("set")
@click.argument("project")
@click.argument("name")
@click.argument("role", type=role_choice)
def member_set(project: str, name: str, role: str) -> None:
    """Give user NAME the ROLE in PROJECT (project-admin, member or viewer), adding it if it is not a member."""
    client().set_member(project, name, role)
    click.echo(f"{name} is a {role} of project {project}")


@member.command("remove")
@click.argument("project")
@click.argument("name")
def member_remove(project: str, name: str) -> None:
    """Remove user NAME from PROJECT; its jobs there stay, and stay its."""
    client().remove_member(project, name)
    click.echo(f"{name} is no longer a member of project {project}")


@member.command("list")
@click.argument("project")
@json_option
def member_list(project: str, as_json: bool) -> None:
    """PROJECT's members and their roles."""
    found = client().members(project)
    if as_json:
        print_json(found)
        return
    rows = table("NAME", "ROLE")
    for each in found:
        rows.add_row(each["name"], each["role"])
    console().print(rows)


# personal tokens ------------------------------------------------------------------------------


@click.group()
def token() -> None:
    """Create, list and revoke personal tokens."""


@token.command("create")
@click.option("--name", help="What it is for, to tell it apart in `corral token list`  [default: this host's name]")
@click.option("--expires", callback=positive_option(parse_duration, int), metavar="DURATION",
              help="Refused after this long (e.g. 12h, 30d); without it, valid until revoked.")
@click.option("--user", "for_user", metavar="U", help="A token of user U (cluster admins); default: your own.")
@json_option
def token_create(name: str | None, expires: int | None, for_user: str | None, as_json: bool) -> None:
    """Create a personal token and print it: it is shown this once, never again."""
    created = client().create_token(name or socket.gethostname(), expires_in=expires, user=for_user)
    if as_json:
        print_json(created)
    else:
        click.echo(created["token"])
    until = "until revoked" if created.get("expires_at") is None else \
        f"until {time.strftime('%Y-%m-%d %H:%M', time.localtime(created['expires_at']))}"
    click.echo(f"token {created['id']} ({created['name']}), valid {until}. It is shown only now: keep it in a "
               "password manager, or run `corral login URL` to store it.", err=True)


@token.command("list")
@click.option("--user", "for_user", metavar="U", help="User U's tokens (cluster admins); default: your own "
                                                      "(a cluster admin's: everyone's).")
@json_option
def token_list(for_user: str | None, as_json: bool) -> None:
    """Personal tokens: id, user, name, the first characters of each, and until when it works (never the token)."""
    found = client().tokens(for_user)
    if as_json:
        print_json(found)
        return
    rows = table("ID", "USER", "NAME", "PREFIX", "CREATED", "EXPIRES")
    now = time.time()
    for each in found:
        rows.add_row(str(each["id"]), each["user"], each["name"], each["prefix"],
                     age_since(each["created_at"], now) + " ago", validity(each, now))
    console().print(rows)


def validity(held: dict[str, Any], now: float) -> str:
    """"never", "in 29d", "expired" or "revoked": until when a token works."""
    expires = held.get("expires_at")
    if held.get("revoked_at") is not None:
        return "revoked"
    if expires is None:
        return "never"
    return "expired" if expires <= now else f"in {age_since(now, expires)}"


@token.command("revoke")
@click.argument("token_id", type=click.IntRange(min=1))
def token_revoke(token_id: int) -> None:
    """Revoke token TOKEN_ID: refused from the next request on."""
    client().revoke_token(token_id)
    click.echo(f"token {token_id} revoked")


# who, and signing in ---------------------------------------------------------------------------


@click.command()
@json_option
def whoami(as_json: bool) -> None:
    """Who your token acts as: name, role, projects, and the token's kind and expiry."""
    found = client().whoami()
    if as_json:
        print_json(found)
        return
    click.echo(f"{found['name']} ({found['role']})")
    for project, role in sorted((found.get("projects") or {}).items()):
        click.echo(f"  {project}: {role}")
    click.echo(token_text(found.get("token") or {}))


def token_text(held: dict[str, Any]) -> str:
    """"token: user #3, expires in 29d": the kind of token in use, and when it stops working."""
    expires = held.get("expires_at")
    text = f"token: {held.get('kind', 'unknown')}" + (f" #{held['id']}" if held.get("id") is not None else "")
    return text + (", expires in " + age_since(time.time(), expires) if expires is not None else "")


@click.command()
@click.argument("url")
def login(url: str) -> None:
    """Store a token for the controller at URL, after checking it; client commands then use it.

    The token is read from stdin when it is not a terminal (`corral login URL < token-file`), else asked for
    without echo. It is stored in $XDG_CONFIG_HOME/corral/credentials.json (else ~/.config/corral/), mode 0600.
    CORRAL_URL/CORRAL_TOKEN still win over it.
    """
    if not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{url!r} is not an http:// or https:// URL", param_hint="URL")
    secret = read_token()
    if not secret:
        raise CliError("no token given")
    try:
        with Client(url, secret) as checking:
            found = checking.whoami()
    except CorralError as error:
        raise CliError(f"not stored: {error}") from None
    path = credentials.store(credentials.Login(url.rstrip("/"), secret))
    click.echo(f"signed in to {url.rstrip('/')} as {found['name']} ({found['role']}); token stored in {path}")


def read_token() -> str:
    """The token piped in (its first line), else typed at a prompt that does not echo it: never an argument,
    which `ps` and the shell's history would show."""
    typed = click.prompt("Token", hide_input=True) if sys.stdin.isatty() else sys.stdin.readline()
    return typed.strip()


@click.command()
def logout() -> None:
    """Remove the token `corral login` stored."""
    removed = credentials.forget()
    click.echo(f"removed {removed}" if removed else f"not signed in: {credentials.credentials_file()} does not exist")
