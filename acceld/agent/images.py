"""Fetch an FPGA image to local disk, verified, before a driver programs it.

A reference is a Glance image id, ``function:<id>`` (the one image whose
``accel:function_id`` is that id) or an absolute path inside ``[fpga_driver]
local_image_dirs``. The bytes are hashed as they are stored and checked against the
caller's SHA-256 (mandatory for a local file) or Glance's multihash; only a verified file
under ``max_image_bytes`` gets its final name, ``<algorithm>-<digest>.img``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import urllib.parse
from collections.abc import Generator
from typing import Any

import requests
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg

from acceld import clients, reports
from acceld.agent import fileutil
from acceld.agent.drivers.base import DriverError
from acceld.conf import glance as glance_conf

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_HEX = re.compile(r"^[0-9a-f]{32,128}$")
_IMAGE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_LOCAL_CHUNK = 1024 * 1024


class ImageError(DriverError):
    """The image could not be fetched or verified (reported on the bind)."""


Digest = tuple[str, str]          # (hashlib algorithm, lower-case hex digest)
Chunks = Generator[bytes, None, None]    # closed when done with, even early


def fetch_image(conf: cfg.ConfigOpts, image_ref: str, sha256: str, dest_dir: str, *,
                adapter: Any = None) -> str:
    """Fetch ``image_ref`` into ``dest_dir`` (reusing a verified copy); the file's path."""
    local = image_ref.startswith("/")
    function = image_ref.startswith(reports.FUNCTION_IMAGE_PREFIX)
    if not (local or function or _IMAGE_ID.match(image_ref.lower())):
        raise ImageError(f"image reference {image_ref!r} is neither a Glance image id nor "
                         f"an absolute path")
    if local or sha256:
        expected = ("sha256", _checked_digest(sha256))
    if not local:
        adapter = adapter if adapter is not None else _glance_adapter(conf)
        image_ref = _glance_image_id(adapter, image_ref)
        if not sha256:
            expected = _glance_digest(adapter, image_ref)
    os.makedirs(dest_dir, exist_ok=True)
    final = os.path.join(dest_dir, f"{expected[0]}-{expected[1]}.img")
    if _cached(final, expected):
        return final
    max_bytes = conf.fpga_driver.max_image_bytes
    source = (_local_chunks(conf, image_ref, max_bytes) if local
              else _glance_chunks(conf, image_ref, max_bytes, adapter))
    _store(source, image_ref, expected, final, max_bytes)
    return final


def _checked_digest(sha256: str) -> str:
    digest = (sha256 or "").strip().lower()
    if not _SHA256.match(digest):
        raise ImageError(f"the image's sha256 (mandatory for a local file) must be 64 "
                         f"hex digits (got {sha256!r})")
    return digest


def _cached(path: str, expected: Digest) -> bool:
    """True when ``path`` exists with the expected digest; a corrupt copy is removed."""
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        if hashlib.file_digest(f, expected[0]).hexdigest() == expected[1]:
            return True
    os.unlink(path)
    return False


def _store(chunks: Chunks, image_ref: str, expected: Digest, final: str,
           max_bytes: int) -> None:
    """Stream ``chunks`` into ``final``, hashing and counting, if size and digest match."""
    algorithm, wanted = expected
    digest, size = hashlib.new(algorithm), 0
    with contextlib.closing(chunks), fileutil.atomic_write(final, "wb") as out:
        for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise ImageError(f"image {image_ref} is larger than [fpga_driver] "
                                 f"max_image_bytes ({max_bytes} bytes)")
            digest.update(chunk)
            out.write(chunk)
        if size == 0:
            raise ImageError(f"image {image_ref} is empty")
        actual = digest.hexdigest()
        if actual != wanted:
            raise ImageError(f"image {image_ref} has {algorithm} {actual}, expected {wanted}")


# -- local files ---------------------------------------------------------------------


def _local_chunks(conf: cfg.ConfigOpts, path: str, max_bytes: int) -> Chunks:
    real = _allowed_local_path(conf.fpga_driver.local_image_dirs, path)
    if not os.path.isfile(real):
        raise ImageError(f"image file {path} does not exist or is not a regular file")
    if os.path.getsize(real) > max_bytes:
        raise ImageError(f"image {path} is larger than [fpga_driver] max_image_bytes "
                         f"({max_bytes} bytes)")
    return _read_file(real)


def _read_file(path: str) -> Chunks:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(_LOCAL_CHUNK), b"")


def _allowed_local_path(allowed: list[str], path: str) -> str:
    """The real path of ``path`` if inside an ``allowed`` directory (both resolved)."""
    if not allowed:
        raise ImageError(f"local image {path} refused: [fpga_driver] local_image_dirs is "
                         f"empty")
    real = os.path.realpath(path)
    for directory in allowed:
        if not os.path.isabs(directory):
            continue
        root = os.path.realpath(directory)
        if os.path.commonpath([root, real]) == root and real != root:
            return real
    raise ImageError(f"local image {path} is outside [fpga_driver] local_image_dirs "
                     f"({', '.join(allowed)})")


# -- Glance --------------------------------------------------------------------------


def _glance_adapter(conf: cfg.ConfigOpts) -> Any:
    if not glance_conf.enabled(conf):
        raise ImageError("cannot fetch Glance images: [glance] auth_type is not configured")
    return clients.make_adapter(conf, glance_conf.GROUP)


def _glance_get(adapter: Any, url: str, what: str, **kwargs: Any) -> Any:
    try:
        return adapter.get(url, raise_exc=False, **kwargs)
    except ks_exc.ClientException as exc:
        raise ImageError(f"cannot reach Glance for {what}: {exc}") from exc


def _glance_json(adapter: Any, url: str, what: str) -> Any:
    resp = _glance_get(adapter, url, what)
    if resp.status_code != 200:
        raise ImageError(f"Glance could not show {what}: HTTP {resp.status_code}")
    try:
        return resp.json()
    except ValueError as exc:
        raise ImageError(f"Glance answered {what} with something not JSON") from exc


def _glance_image_id(adapter: Any, image_ref: str) -> str:
    """The Glance image id of ``image_ref``: an id, or ``function:<id>``."""
    if image_ref.startswith(reports.FUNCTION_IMAGE_PREFIX):
        function = image_ref[len(reports.FUNCTION_IMAGE_PREFIX):]
        found = _glance_json(adapter, "/v2/images?" + urllib.parse.urlencode(
            {"accel:function_id": function}), f"images of function {function!r}")
        ids = [image.get("id") for image in found.get("images", [])]
        if len(ids) != 1:
            raise ImageError(f"Glance has {len(ids)} images with accel:function_id "
                             f"{function!r}; exactly one is needed")
        image_ref = str(ids[0])
    if not _IMAGE_ID.match(image_ref.lower()):
        raise ImageError(f"Glance image id {image_ref!r} is not a UUID")
    return image_ref.lower()


def _glance_digest(adapter: Any, image_id: str) -> Digest:
    """The digest Glance keeps for an image (its multihash)."""
    image = _glance_json(adapter, f"/v2/images/{image_id}", f"image {image_id}")
    algorithm, value = image.get("os_hash_algo"), str(image.get("os_hash_value") or "")
    if algorithm not in hashlib.algorithms_guaranteed or not _HEX.match(value.lower()):
        raise ImageError(f"image {image_id} has no digest in Glance (os_hash_algo/"
                         "os_hash_value) and none was given: nothing to check it against")
    return algorithm, value.lower()


def _glance_chunks(conf: cfg.ConfigOpts, image_id: str, max_bytes: int,
                   adapter: Any) -> Chunks:
    resp = _glance_get(adapter, f"/v2/images/{image_id}/file", f"image {image_id}",
                       stream=True, timeout=conf.glance.download_timeout)
    if resp.status_code != 200:
        detail = "has no data" if resp.status_code == 204 else f"HTTP {resp.status_code}"
        resp.close()
        raise ImageError(f"Glance image {image_id} could not be downloaded: {detail}")
    length = resp.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > max_bytes:
        resp.close()
        raise ImageError(f"image {image_id} is larger than [fpga_driver] max_image_bytes "
                         f"({max_bytes} bytes): Glance says {length}")
    return _response_chunks(resp, image_id, conf.glance.download_chunk_bytes)


def _response_chunks(resp: Any, image_id: str, chunk_bytes: int) -> Chunks:
    try:
        yield from resp.iter_content(chunk_size=chunk_bytes)
    except requests.RequestException as exc:
        raise ImageError(f"download of Glance image {image_id} broke off: {exc}") from exc
    finally:
        resp.close()
