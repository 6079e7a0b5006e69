"""The fast lane's split of a request target into path and query, against httptools' URL parser."""

from __future__ import annotations

import httptools
from hypothesis import given
from hypothesis import strategies as st

from corral.serving.fast_lane import _origin_form

TARGET_CHARS = st.sampled_from("abcXYZ019-._~!$&'()*+,;=:@/?%")


def parsed(url: bytes) -> tuple[bytes, bytes]:
    url_ = httptools.parse_url(url)
    return url_.path, b"?" + url_.query if url_.query else b""


@given(st.text(TARGET_CHARS, max_size=40))
def test_a_plain_target_splits_as_the_url_parser_splits_it(rest):
    url = ("/" + rest).encode()
    assert _origin_form(url) == parsed(url)


def test_other_targets_go_through_the_url_parser():
    assert _origin_form(b"http://replica:80/serve/svc/x?y=1") == (b"/serve/svc/x", b"?y=1")
    assert _origin_form(b"/serve/svc/x?y=1#part") == (b"/serve/svc/x", b"?y=1")
    assert _origin_form(b"/serve/svc/x?") == (b"/serve/svc/x", b"")
    assert _origin_form(b"http://replica:80") is None  # no path: not for the fast lane
