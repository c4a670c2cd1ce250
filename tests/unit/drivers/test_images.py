"""Image fetching for FPGA programming: Glance (a real HTTP server on 127.0.0.1 behind a
real keystoneauth session) and local paths, always verified: by the caller's SHA-256, or
for a Glance image by Glance's own multihash."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

from acceld.agent import images
from tests.helpers import make_conf

IMAGE_ID = "6b1f4b2e-3c1d-4f6e-9a7b-2d5c8e9f0a11"
PAYLOAD = b"GBS\x00" + bytes(range(256)) * 40     # ~10 KiB, several chunks at 4096


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _GlanceHandler(http.server.BaseHTTPRequestHandler):
    """Serves ``GET /v2/images/<id>/file`` from the server's ``images`` dict, an image's
    record (``GET /v2/images/<id>``, with Glance's multihash in ``hashes``) and the images
    of a function (``GET /v2/images?accel:function_id=``, from ``functions``). With
    ``chunked`` set the body is sent without Content-Length (like a proxied stream)."""

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        server = self.server
        server.requests.append(self.path)
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if parts == ["v2", "images"]:
            function = urllib.parse.parse_qs(url.query)["accel:function_id"][0]
            self._json({"images": [{"id": i} for i in server.functions.get(function, [])]})
            return
        if len(parts) == 3 and parts[:2] == ["v2", "images"] and parts[2] in server.images:
            algo, value = server.hashes.get(parts[2], (None, None))
            self._json({"id": parts[2], "os_hash_algo": algo, "os_hash_value": value})
            return
        if len(parts) != 4 or parts[:2] != ["v2", "images"] or parts[3] != "file":
            self.send_error(400)
            return
        data = server.images.get(parts[2])
        if data is None:
            self.send_error(404)
            return
        if data == b"":
            self.send_response(204)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        if server.chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 1000):
                piece = data[i:i + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


class _GlanceServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _GlanceHandler)
        self.images: dict[str, bytes] = {}
        self.hashes: dict[str, tuple[str, str]] = {}       # image id -> Glance's multihash
        self.functions: dict[str, list[str]] = {}          # accel:function_id -> image ids
        self.requests: list[str] = []
        self.chunked = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def glance() -> Iterator[_GlanceServer]:
    server = _GlanceServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _conf(glance_url: str | None = None, **fpga: object):
    groups: dict[str, dict[str, object]] = {"fpga_driver": dict(fpga)}
    if glance_url:
        groups["glance"] = {"auth_type": "none", "endpoint_override": glance_url,
                            "download_chunk_bytes": 4096, "download_timeout": 5.0}
    return make_conf(**groups)


def _left(dest: str) -> list[str]:
    return sorted(os.listdir(dest)) if os.path.isdir(dest) else []


# -- Glance --------------------------------------------------------------------------


def test_glance_image_is_streamed_verified_and_renamed(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    dest = str(tmp_path / "images")
    path = images.fetch_image(_conf(glance.url), IMAGE_ID, _sha(PAYLOAD), dest)
    assert path == os.path.join(dest, f"sha256-{_sha(PAYLOAD)}.img")
    with open(path, "rb") as f:
        assert f.read() == PAYLOAD
    assert glance.requests == [f"/v2/images/{IMAGE_ID}/file"]
    assert _left(dest) == [f"sha256-{_sha(PAYLOAD)}.img"]   # no temp file left behind


def test_without_a_sha256_glances_multihash_verifies_the_image(glance, tmp_path):
    """Upstream's program body names no digest: Glance's own (sha512 by default) is
    checked instead, and an image Glance keeps no digest of is refused."""
    glance.images[IMAGE_ID] = PAYLOAD
    glance.hashes[IMAGE_ID] = ("sha512", hashlib.sha512(PAYLOAD).hexdigest())
    path = images.fetch_image(_conf(glance.url), IMAGE_ID, "", str(tmp_path))
    assert os.path.basename(path) == f"sha512-{hashlib.sha512(PAYLOAD).hexdigest()}.img"
    glance.hashes[IMAGE_ID] = ("sha512", hashlib.sha512(b"other").hexdigest())
    with pytest.raises(images.ImageError, match="has sha512 .*, expected"):
        images.fetch_image(_conf(glance.url), IMAGE_ID, "", str(tmp_path / "again"))
    del glance.hashes[IMAGE_ID]
    with pytest.raises(images.ImageError, match="no digest in Glance"):
        images.fetch_image(_conf(glance.url), IMAGE_ID, "", str(tmp_path / "none"))


def test_a_function_id_names_the_one_glance_image_of_that_function(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    glance.functions["3c8e"] = [IMAGE_ID]
    path = images.fetch_image(_conf(glance.url), "function:3c8e", _sha(PAYLOAD),
                              str(tmp_path))
    with open(path, "rb") as f:
        assert f.read() == PAYLOAD
    assert glance.requests[0] == "/v2/images?accel%3Afunction_id=3c8e"
    glance.functions["3c8e"] = [IMAGE_ID, "7b1f4b2e-3c1d-4f6e-9a7b-2d5c8e9f0a11"]
    for function in ("3c8e", "none"):
        with pytest.raises(images.ImageError, match="exactly one is needed"):
            images.fetch_image(_conf(glance.url), f"function:{function}", _sha(PAYLOAD),
                               str(tmp_path / function))


def test_glance_upper_case_digest_and_id_are_accepted(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    path = images.fetch_image(_conf(glance.url), IMAGE_ID.upper(), _sha(PAYLOAD).upper(),
                              str(tmp_path))
    assert os.path.basename(path) == f"sha256-{_sha(PAYLOAD)}.img"


def test_glance_digest_mismatch_names_both_digests_and_cleans_up(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    wrong = _sha(b"something else")
    with pytest.raises(images.ImageError) as err:
        images.fetch_image(_conf(glance.url), IMAGE_ID, wrong, str(tmp_path))
    assert wrong in str(err.value) and _sha(PAYLOAD) in str(err.value)
    assert _left(str(tmp_path)) == []


def test_glance_oversize_by_content_length_is_refused_before_reading(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    conf = _conf(glance.url, max_image_bytes=len(PAYLOAD) - 1)
    with pytest.raises(images.ImageError, match="max_image_bytes"):
        images.fetch_image(conf, IMAGE_ID, _sha(PAYLOAD), str(tmp_path))
    assert _left(str(tmp_path)) == []


def test_glance_oversize_stream_without_length_is_cut_off_and_removed(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    glance.chunked = True
    conf = _conf(glance.url, max_image_bytes=5000)
    with pytest.raises(images.ImageError, match="larger than"):
        images.fetch_image(conf, IMAGE_ID, _sha(PAYLOAD), str(tmp_path))
    assert _left(str(tmp_path)) == []


def test_glance_chunked_stream_within_limit_succeeds(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    glance.chunked = True
    path = images.fetch_image(_conf(glance.url), IMAGE_ID, _sha(PAYLOAD), str(tmp_path))
    with open(path, "rb") as f:
        assert f.read() == PAYLOAD


def test_glance_unknown_image_is_an_error_with_the_status(glance, tmp_path):
    with pytest.raises(images.ImageError, match="HTTP 404"):
        images.fetch_image(_conf(glance.url), IMAGE_ID, _sha(PAYLOAD), str(tmp_path))
    assert _left(str(tmp_path)) == []


def test_glance_image_without_data_is_an_error(glance, tmp_path):
    glance.images[IMAGE_ID] = b""
    with pytest.raises(images.ImageError, match="has no data"):
        images.fetch_image(_conf(glance.url), IMAGE_ID, _sha(PAYLOAD), str(tmp_path))


def test_glance_unreachable_is_an_image_error(tmp_path):
    server = _GlanceServer()          # bound, then closed: nothing listens on the port
    url = server.url
    server.server_close()
    with pytest.raises(images.ImageError, match="cannot reach Glance"):
        images.fetch_image(_conf(url), IMAGE_ID, _sha(PAYLOAD), str(tmp_path))


def test_glance_without_auth_type_is_not_configured(tmp_path):
    with pytest.raises(images.ImageError, match=r"\[glance\] auth_type"):
        images.fetch_image(_conf(None), IMAGE_ID, _sha(PAYLOAD), str(tmp_path))


def test_verified_copy_is_reused_and_a_corrupt_one_refetched(glance, tmp_path):
    glance.images[IMAGE_ID] = PAYLOAD
    conf = _conf(glance.url)
    path = images.fetch_image(conf, IMAGE_ID, _sha(PAYLOAD), str(tmp_path))
    assert images.fetch_image(conf, IMAGE_ID, _sha(PAYLOAD), str(tmp_path)) == path
    assert len(glance.requests) == 1
    with open(path, "r+b") as f:       # bit rot on disk
        f.write(b"XXXX")
    images.fetch_image(conf, IMAGE_ID, _sha(PAYLOAD), str(tmp_path))
    assert len(glance.requests) == 2
    with open(path, "rb") as f:
        assert f.read() == PAYLOAD


# -- local paths ---------------------------------------------------------------------


@pytest.fixture
def local(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "nlb.gbs").write_bytes(PAYLOAD)
    (tmp_path / "secret.gbs").write_bytes(PAYLOAD)
    return allowed


def test_local_image_is_copied_and_verified(local, tmp_path):
    dest = str(tmp_path / "dest")
    path = images.fetch_image(_conf(local_image_dirs=[str(local)]), str(local / "nlb.gbs"),
                              _sha(PAYLOAD), dest)
    with open(path, "rb") as f:
        assert f.read() == PAYLOAD
    assert (local / "nlb.gbs").exists()          # the source stays where it was


def test_local_image_digest_mismatch(local, tmp_path):
    dest = str(tmp_path / "dest")
    with pytest.raises(images.ImageError, match="expected"):
        images.fetch_image(_conf(local_image_dirs=[str(local)]), str(local / "nlb.gbs"),
                           "0" * 64, dest)
    assert _left(dest) == []


def test_local_image_over_the_size_cap(local, tmp_path):
    dest = str(tmp_path / "dest")
    conf = _conf(local_image_dirs=[str(local)], max_image_bytes=100)
    with pytest.raises(images.ImageError, match="max_image_bytes"):
        images.fetch_image(conf, str(local / "nlb.gbs"), _sha(PAYLOAD), dest)
    assert _left(dest) == []


@pytest.mark.parametrize("how", ["dotdot", "symlink", "sibling_prefix"])
def test_local_path_escaping_the_allowed_dir_is_refused(local, tmp_path, how):
    if how == "dotdot":
        ref = str(local) + "/../secret.gbs"
    elif how == "symlink":
        os.symlink(tmp_path / "secret.gbs", local / "link.gbs")
        ref = str(local / "link.gbs")
    else:                                # /x/allowed-evil is not inside /x/allowed
        evil = tmp_path / "allowed-evil"
        evil.mkdir()
        (evil / "x.gbs").write_bytes(PAYLOAD)
        ref = str(evil / "x.gbs")
    with pytest.raises(images.ImageError, match="outside"):
        images.fetch_image(_conf(local_image_dirs=[str(local)]), ref, _sha(PAYLOAD),
                           str(tmp_path / "dest"))


def test_local_paths_need_configured_dirs(local, tmp_path):
    with pytest.raises(images.ImageError, match="local_image_dirs is empty"):
        images.fetch_image(_conf(), str(local / "nlb.gbs"), _sha(PAYLOAD),
                           str(tmp_path / "dest"))


def test_local_missing_file(local, tmp_path):
    with pytest.raises(images.ImageError, match="does not exist"):
        images.fetch_image(_conf(local_image_dirs=[str(local)]), str(local / "nope.gbs"),
                           _sha(PAYLOAD), str(tmp_path / "dest"))


def test_local_empty_file_is_refused(local, tmp_path):
    (local / "empty.gbs").write_bytes(b"")
    with pytest.raises(images.ImageError, match="empty"):
        images.fetch_image(_conf(local_image_dirs=[str(local)]), str(local / "empty.gbs"),
                           _sha(b""), str(tmp_path / "dest"))
    assert _left(str(tmp_path / "dest")) == []


# -- arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("digest", ["abc", "g" * 64, _sha(PAYLOAD) + "0"])
def test_a_bad_sha256_is_refused_before_any_transfer(glance, tmp_path, digest):
    glance.images[IMAGE_ID] = PAYLOAD
    with pytest.raises(images.ImageError, match="must be 64 hex digits"):
        images.fetch_image(_conf(glance.url), IMAGE_ID, digest, str(tmp_path))
    assert glance.requests == []


@pytest.mark.parametrize("digest", ["", None])
def test_a_local_file_needs_its_sha256(tmp_path, digest):
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.gbs").write_bytes(PAYLOAD)
    with pytest.raises(images.ImageError, match=r"mandatory for a local file"):
        images.fetch_image(_conf(local_image_dirs=[str(local)]), str(local / "a.gbs"),
                           digest, str(tmp_path / "dest"))


@pytest.mark.parametrize("ref", ["relative/x.gbs", "http://evil/x.gbs", "not-a-uuid", ""])
def test_other_references_are_refused(tmp_path, ref):
    with pytest.raises(images.ImageError, match="neither a Glance image id"):
        images.fetch_image(_conf(), ref, _sha(PAYLOAD), str(tmp_path))


def test_image_error_is_a_driver_error():
    from acceld.agent.drivers.base import DriverError

    assert issubclass(images.ImageError, DriverError)


def test_image_dir_defaults_under_the_state_dir(tmp_path):
    from acceld.agent.programming import image_dir

    assert image_dir(_conf(), "/var/lib/acceld/agent") == "/var/lib/acceld/agent/fpga-images"
    assert image_dir(_conf(image_dir=str(tmp_path)), "/x") == str(tmp_path)
