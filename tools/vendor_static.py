"""Vendors the dashboard's terminal (xterm.js and its fit addon) into the controller's static files.

`make install` runs it, and so `make up`, `make test` and CI on a fresh clone. npm packs the pinned versions
from its registry; each tarball must match the integrity pinned below (the sha512 the registry published for
that version, `npm view NAME@VERSION dist.integrity`), or it is refused and nothing is written. Only the files
the page loads are taken, with their licences. The controller serves them from its package at /static/vendor/:
nothing is fetched when the dashboard runs. When the files are there as pinned, it does nothing.

To move to another version: change its `version` and `integrity` here, then run `make install`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "src" / "corral" / "controller" / "static" / "vendor"
MANIFEST = "pinned.json"  # what is there and from which tarballs: the files are rebuilt when it differs


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # npm's Subresource Integrity string of the tarball: "sha512-" and the base64 digest
    files: dict[str, str]  # path in the tarball -> name in the vendor directory

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


PACKAGES = (
    Package("@xterm/xterm", "6.0.0",
            "sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==",
            {"package/lib/xterm.js": "xterm.js", "package/css/xterm.css": "xterm.css",
             "package/LICENSE": "xterm.LICENSE.txt"}),
    Package("@xterm/addon-fit", "0.11.0",
            "sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g==",
            {"package/lib/addon-fit.js": "addon-fit.js", "package/LICENSE": "addon-fit.LICENSE.txt"}),
)

Packer = Callable[[Package, Path], Path]  # packs one package into a directory, returns the tarball's path


class VendorError(Exception):
    """A tarball that is not the one pinned, or one without a file the page needs: nothing is written."""


def check_integrity(package: Package, tarball: bytes) -> None:
    algorithm, _, expected = package.integrity.partition("-")
    if algorithm != "sha512":
        raise VendorError(f"{package.spec}: pin a sha512 integrity, not {algorithm!r}")
    actual = base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    if actual != expected:
        raise VendorError(f"{package.spec}: the tarball's sha512 is {actual}, not the pinned {expected}: refused")


def wanted_files(package: Package, tarball: bytes) -> dict[str, bytes]:
    """The package's files the page needs, by their vendored names; each must be a plain file in the tarball."""
    check_integrity(package, tarball)
    found: dict[str, bytes] = {}
    with tempfile.TemporaryFile() as raw:
        raw.write(tarball)
        raw.seek(0)
        with tarfile.open(fileobj=raw, mode="r:gz") as archive:
            for member in archive.getmembers():
                name = package.files.get(member.name)
                if name is None:
                    continue
                if not member.isfile():
                    raise VendorError(f"{package.spec}: {member.name} is not a plain file in the tarball")
                found[name] = archive.extractfile(member).read()
    missing = sorted(set(package.files.values()) - set(found))
    if missing:
        raise VendorError(f"{package.spec}: the tarball has no {', '.join(missing)}")
    return found


def manifest(packages: tuple[Package, ...], files: dict[str, bytes]) -> dict:
    return {"packages": {p.spec: p.integrity for p in packages},
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}}


def up_to_date(packages: tuple[Package, ...], dest: Path) -> bool:
    try:
        recorded = json.loads((dest / MANIFEST).read_text())
        files = {name: (dest / name).read_bytes() for name in recorded["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return recorded == manifest(packages, files)


def npm_pack(package: Package, directory: Path) -> Path:
    npm = shutil.which("npm") or install_npm()
    result = subprocess.run([npm, "pack", package.spec, "--json", "--pack-destination", str(directory)],
                            cwd=directory, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise VendorError(f"npm pack {package.spec} failed: {result.stderr.strip()[-2000:]}")
    return directory / json.loads(result.stdout)[0]["filename"]


def install_npm() -> str:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise VendorError("npm is missing: install it (Debian: apt-get install npm) and run make install again")
    print("installing Debian's npm to vendor the dashboard's terminal", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-q"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "npm"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which("npm") or "npm"


def vendor(packages: tuple[Package, ...] = PACKAGES, dest: Path = VENDOR, pack: Packer = npm_pack) -> bool:
    """Writes the pinned files into `dest` unless they are there already; True when it wrote them."""
    if up_to_date(packages, dest):
        return False
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="corral-vendor-") as scratch:
        for package in packages:
            files |= wanted_files(package, pack(package, Path(scratch)).read_bytes())
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST).unlink(missing_ok=True)  # written last: files half replaced are never taken as done
    for name, data in files.items():
        partial = dest / f".{name}.partial"
        partial.write_bytes(data)
        partial.replace(dest / name)
    (dest / MANIFEST).write_text(json.dumps(manifest(packages, files), indent=1) + "\n")
    return True


def main() -> int:
    try:
        wrote = vendor()
    except (VendorError, OSError, subprocess.SubprocessError) as error:
        print(f"vendor_static: {error}", file=sys.stderr)
        return 1
    specs = ", ".join(p.spec for p in PACKAGES)
    print(f"vendored {specs} into {VENDOR.relative_to(ROOT)}" if wrote else f"{specs}: already vendored")
    return 0


if __name__ == "__main__":
    sys.exit(main())
