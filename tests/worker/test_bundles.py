"""The bundle cache: content-addressed, verified, downloaded once."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile

import pytest

from corral.worker.bundles import BundleCache, BundleError, extract


class Server:
    def __init__(self, blobs: dict[str, bytes]) -> None:
        self.blobs = blobs
        self.downloads = 0

    async def download(self, digest: str):
        self.downloads += 1
        data = self.blobs[digest]
        for start in range(0, len(data), 3):
            await asyncio.sleep(0)
            yield data[start:start + 3]


async def test_a_bundle_is_downloaded_once_verified_and_cached(tmp_path):
    data = b"an archive, really"
    digest = hashlib.sha256(data).hexdigest()
    server = Server({digest: data})
    cache = BundleCache(tmp_path, server.download)
    paths = await asyncio.gather(cache.fetch(digest), cache.fetch(digest))
    assert paths[0] == paths[1] == tmp_path / f"{digest}.tar.gz"
    assert paths[0].read_bytes() == data
    assert server.downloads == 1


async def test_a_download_that_does_not_match_its_digest_is_refused_and_not_cached(tmp_path):
    digest = hashlib.sha256(b"expected").hexdigest()
    cache = BundleCache(tmp_path, Server({digest: b"tampered"}).download)
    with pytest.raises(BundleError, match="sha256"):
        await cache.fetch(digest)
    assert list(tmp_path.iterdir()) == []


async def test_a_digest_that_is_not_sha256_is_refused(tmp_path):
    cache = BundleCache(tmp_path, Server({}).download)
    with pytest.raises(BundleError, match="not a sha256"):
        await cache.fetch("../../etc/passwd")


@pytest.mark.parametrize("name, link", [("/abs", None), ("a/../../x", None), ("link", "/etc/passwd"),
                                        ("link", "../../outside")])
def test_extract_refuses_members_that_point_outside(tmp_path, name, link):
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        if link is not None:
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
        else:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(BundleError, match="unsafe path"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()
