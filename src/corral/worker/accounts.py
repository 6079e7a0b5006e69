"""The local accounts a root worker runs its tasks as (BuildOrder.run_as): as Slurm does, a task of user alice runs
with alice's uid, primary gid and supplementary groups, so it reads only what alice may read.

A worker that is not root cannot change user: its tasks run as its own user, whatever the order says.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path


class NoAccount(Exception):
    """The order names an account that does not exist on this machine."""


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary, the primary among them as the system lists it
    home: str

    @classmethod
    def named(cls, name: str, worker: str) -> Account:
        """The local account `name`; NoAccount, saying which worker, when there is none."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise NoAccount(f"no local account {name!r} on worker {worker}") from None
        return cls(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid,
                   groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)), home=entry.pw_dir)

    def env(self) -> dict[str, str]:
        """What a login as this account would set."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def credentials(self) -> str:
        """uid:gid:group,group... as the shim's --user takes it."""
        return f"{self.uid}:{self.gid}:{','.join(map(str, self.groups))}"

    def give(self, directory: Path) -> None:
        """Make `directory` and everything in it this account's, the directory readable by it alone. Symbolic links
        are changed themselves, never what they point at (a bundle may hold any)."""
        for root, dirs, files in os.walk(directory):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), self.uid, self.gid)
        os.chown(directory, self.uid, self.gid)
        directory.chmod(0o700)


def no_follow(path: str, flags: int) -> int:
    """An opener (open(..., opener=)) for the files a task run as its owner could replace with a symbolic link to
    one of root's, which the worker would then ship or upload: a link is refused (ELOOP), not followed."""
    return os.open(path, flags | os.O_NOFOLLOW)


def read_no_follow(path: Path) -> bytes:
    with open(path, "rb", opener=no_follow) as file:
        return file.read()


def worker_user() -> str:
    """The name of the user this worker runs as (its uid when it has no name)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())

