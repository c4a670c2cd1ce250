"""Fetch an FPGA image to local disk, verified, before a driver programs it.

An image reference is either a Glance image id (downloaded from
``GET /v2/images/{id}/file`` through the ``[glance]`` keystoneauth session) or an
absolute path inside one of ``[fpga_driver] local_image_dirs``. Either way the bytes
are streamed into a temporary file in ``dest_dir`` while their SHA-256 is computed;
the caller's digest is mandatory, because what gets loaded into a card must be exactly
what the operator approved (Glance's own checksum is MD5 and optional). The temporary
file is renamed to ``<sha256>.img`` only once the digest matches and the size is under
``[fpga_driver] max_image_bytes``; on any failure it is removed, so ``dest_dir`` never
holds a partial or unverified image under its final name.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import requests
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg

from acceld.agent.drivers.base import DriverError
from acceld.conf import glance as glance_conf

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_IMAGE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_LOCAL_CHUNK = 1024 * 1024


class ImageError(DriverError):
    """The image could not be fetched or verified. A :class:`DriverError` so that the
    agent reports it on the bind like any other programming failure."""


def fetch_image(conf: cfg.ConfigOpts, image_ref: str, sha256: str, dest_dir: str, *,
                adapter: Any = None) -> str:
    """Fetch ``image_ref`` into ``dest_dir`` and return the verified file's path.

    ``adapter`` replaces the keystoneauth adapter built from ``[glance]`` (tests, or a
    caller that already has one). An image already in ``dest_dir`` under its digest is
    re-hashed and reused, so a retried bind does not download again.
    """
    expected = _checked_digest(sha256)
    os.makedirs(dest_dir, exist_ok=True)
    final = os.path.join(dest_dir, f"{expected}.img")
    if _cached(final, expected):
        return final
    max_bytes = conf.fpga_driver.max_image_bytes
    if image_ref.startswith("/"):
        source = _local_chunks(conf, image_ref, max_bytes)
    elif _IMAGE_ID.match(image_ref.lower()):
        source = _glance_chunks(conf, image_ref.lower(), max_bytes, adapter)
    else:
        raise ImageError(f"image reference {image_ref!r} is neither a Glance image id nor "
                         f"an absolute path")
    _store(source, image_ref, expected, final, max_bytes)
    return final


def image_dir(conf: cfg.ConfigOpts, state_dir: str) -> str:
    """Where fetched images go: ``[fpga_driver] image_dir``, else under the agent's
    state directory (it needs room for ``max_image_bytes``)."""
    return conf.fpga_driver.image_dir or os.path.join(state_dir, "fpga-images")


def _checked_digest(sha256: str) -> str:
    digest = (sha256 or "").strip().lower()
    if not _SHA256.match(digest):
        raise ImageError(f"the image's sha256 is mandatory and must be 64 hex digits "
                         f"(got {sha256!r})")
    return digest


def _cached(path: str, expected: str) -> bool:
    """True when ``path`` exists with the expected digest; a corrupt copy is removed."""
    if not os.path.isfile(path):
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_LOCAL_CHUNK), b""):
            digest.update(chunk)
    if digest.hexdigest() == expected:
        return True
    os.unlink(path)
    return False


def _store(chunks: Iterable[bytes], image_ref: str, expected: str, final: str,
           max_bytes: int) -> None:
    """Stream ``chunks`` into a temp file next to ``final``, hashing and counting; rename
    it into place only when size and digest are right."""
    fd, tmp = tempfile.mkstemp(prefix=".fetch-", suffix=".part", dir=os.path.dirname(final))
    try:
        with os.fdopen(fd, "wb") as out:
            actual = _copy(chunks, out, image_ref, max_bytes)
            out.flush()
            os.fsync(out.fileno())
        if actual != expected:
            raise ImageError(f"image {image_ref} has sha256 {actual}, expected {expected}")
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:  # a generator left early still releases its file/socket
            close()


def _copy(chunks: Iterable[bytes], out: BinaryIO, image_ref: str, max_bytes: int) -> str:
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise ImageError(f"image {image_ref} is larger than [fpga_driver] "
                             f"max_image_bytes ({max_bytes} bytes)")
        digest.update(chunk)
        out.write(chunk)
    if size == 0:
        raise ImageError(f"image {image_ref} is empty")
    return digest.hexdigest()


# -- local files ---------------------------------------------------------------------


def _local_chunks(conf: cfg.ConfigOpts, path: str, max_bytes: int) -> Iterator[bytes]:
    real = _allowed_local_path(conf.fpga_driver.local_image_dirs, path)
    if not os.path.isfile(real):
        raise ImageError(f"image file {path} does not exist or is not a regular file")
    if os.path.getsize(real) > max_bytes:
        raise ImageError(f"image {path} is larger than [fpga_driver] max_image_bytes "
                         f"({max_bytes} bytes)")
    return _read_file(real)


def _read_file(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(_LOCAL_CHUNK), b"")


def _allowed_local_path(allowed: list[str], path: str) -> str:
    """The real path of ``path`` if it lies inside one of the ``allowed`` directories.

    Both sides are resolved (symlinks, ``..``) before comparing, so neither a link
    inside an allowed directory nor ``allowed/../etc/x`` can reach outside it.
    """
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
    from acceld.clients.placement import make_adapter  # the same session/auth/adapter chain

    return make_adapter(conf, glance_conf.GROUP)


def _glance_chunks(conf: cfg.ConfigOpts, image_id: str, max_bytes: int,
                   adapter: Any) -> Iterator[bytes]:
    adapter = adapter if adapter is not None else _glance_adapter(conf)
    url = f"/v2/images/{image_id}/file"
    try:
        resp = adapter.get(url, stream=True, raise_exc=False,
                           timeout=conf.glance.download_timeout)
    except ks_exc.ClientException as exc:
        raise ImageError(f"cannot reach Glance for image {image_id}: {exc}") from exc
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


def _response_chunks(resp: Any, image_id: str, chunk_bytes: int) -> Iterator[bytes]:
    try:
        yield from resp.iter_content(chunk_size=chunk_bytes)
    except requests.RequestException as exc:
        raise ImageError(f"download of Glance image {image_id} broke off: {exc}") from exc
    finally:
        resp.close()
