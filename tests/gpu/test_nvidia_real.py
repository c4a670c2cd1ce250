"""The NVIDIA driver against a real GPU, real NVML and the real /sys.

Runs only where ``libnvidia-ml.so.1`` loads and NVML initialises (a GPU host with the
NVIDIA driver); everywhere else each test skips and says why. What it proves that the
fakes cannot: the binding's structs and our address normalisation match the real
library, NVML's view and sysfs agree, and the driver reports what is really there.

It needs only pytest, oslo.config and the packages acceld.reports imports (jsonschema and
its own), not acceld's whole configuration: on a bare GPU host, copy those into a folder
(built for that host's Python) and run
``PYTHONPATH=.:FOLDER python3 -m pytest -o addopts= --noconftest tests/gpu``.
"""

from __future__ import annotations

import ctypes
import time

import pytest
from oslo_config import cfg

from acceld import reports
from acceld.agent.drivers.base import HEALTH_STATES, DriverContext
from acceld.agent.drivers.nvidia import NvidiaDriver
from acceld.hw import pci
from acceld.hw.nvml import NvmlBackend
from acceld.hw.sysfs import Sysfs

pytestmark = pytest.mark.gpu


def _library_problem() -> str | None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return f"libnvidia-ml.so.1 cannot be loaded ({exc}): no NVIDIA driver here"
    return None


@pytest.fixture(scope="module")
def backend():
    problem = _library_problem()
    if problem:
        pytest.skip(problem)
    nvml = NvmlBackend()
    if not nvml.start():
        pytest.skip(f"NVML does not initialise: {nvml.reason}")
    if nvml.gpu_count() == 0:
        pytest.skip("NVML initialised but sees no GPU")
    yield nvml
    nvml.close()


def _driver_conf() -> cfg.ConfigOpts:
    """The driver's own option group with its defaults: all it reads (and little to carry
    to a GPU host, where these tests run without the rest of acceld's dependencies)."""
    conf = cfg.ConfigOpts()
    conf.register_opts(NvidiaDriver.conf_opts, group=NvidiaDriver.conf_group)
    conf([], default_config_files=[])
    return conf


@pytest.fixture
def driver(backend, tmp_path):
    ctx = DriverContext(conf=_driver_conf(), host="gpu-host", state_dir=str(tmp_path),
                        sysfs=Sysfs("/"), nvml=backend)
    return NvidiaDriver(ctx)


def test_nvml_bus_ids_match_sysfs(backend):
    sysfs = Sysfs("/")
    gpus = backend.gpus()
    assert gpus, "NVML counts GPUs but none could be read"
    for gpu in gpus:
        assert gpu.address == pci.normalize(gpu.address)
        dev = sysfs.pci_device(gpu.address)
        assert dev is not None, f"{gpu.address} from NVML is not in /sys/bus/pci/devices"
        assert (dev.vendor, dev.device) == ("10de", gpu.device_id)
        assert dev.driver == "nvidia"
        assert gpu.uuid.startswith("GPU-")
        if gpu.numa_node is not None and dev.numa_node is not None:
            assert gpu.numa_node == dev.numa_node


def test_driver_reports_every_usable_gpu(backend, driver):
    devices = driver.discover()
    explanation = driver.explain()
    checks = {c.name: c for c in explanation.checks}
    assert checks["nvml"].ok and checks["kernel_module"].ok
    expected = {g.address for g in backend.gpus() if not g.mig_change_pending}
    assert {d.identity for d in devices} == expected, explanation.to_dict()
    for dev in devices:
        assert (dev.type, dev.vendor) == ("GPU", "10de")
        assert dev.deployables or dict(dev.vendor_board_info)["mig"] == "on"
    report = reports.InventoryReport(host="gpu-host", epoch="e", seq=1, drivers=(
        reports.DriverReport(name=driver.name, version=driver.version,
                             devices=tuple(devices)),))
    reports.InventoryReport.from_dict(report.to_dict())


def test_mig_devices_on_mig_gpus(backend):
    for gpu in backend.gpus():
        migs = backend.mig_devices(gpu.uuid)
        if not gpu.mig_current:
            assert migs == []
            continue
        for mig in migs:
            assert mig.uuid.startswith("MIG-") and mig.parent_uuid == gpu.uuid
            assert mig.profile_id >= 0


def test_health_and_stats(backend, driver):
    devices = driver.discover()
    started = time.monotonic()
    health = driver.health()
    assert time.monotonic() - started < 10        # the event wait is bounded
    for dev in devices:
        assert health[dev.identity].status in HEALTH_STATES
    stats = driver.stats()
    for dev in devices:
        assert stats[dev.identity]["memory_total_bytes"] > 0
