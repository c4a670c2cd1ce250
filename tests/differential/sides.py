"""One server of the comparison: discovery, set-up, sending a case, clean-up.

Both servers are driven through their public v2 API only, with the noauth conventions
they share: ``X-Auth-Token: admin`` is an admin, ``X-Auth-Token: <user>:<project>`` a
project member, and any ``X-Service-Token`` adds the ``service`` role.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.differential import cases as c

MEMBER_TOKEN = "d1ff0000-0000-4000-8000-0000000000a1:d1ff0000-0000-4000-8000-0000000000b1"
OTHER_TOKEN = "d1ff0000-0000-4000-8000-0000000000a2:d1ff0000-0000-4000-8000-0000000000b2"
SERVICE_TOKEN = "dt-nova"
TIMEOUT = 60.0
MESSAGE_MAX = 300


class SetupError(RuntimeError):
    """A set-up or clean-up request did not get the answer it needs."""


@dataclass(frozen=True)
class Answer:
    """A server's answer to one case: the status (0: the set-up failed) and the error
    message, if any; ``trouble`` says what went wrong in the set-up or the clean-up."""

    status: int
    message: str
    trouble: str = ""


def identity_headers(identity: str) -> dict[str, str]:
    """The auth headers of one of the identities of :mod:`cases`."""
    token = {c.ADMIN: "admin", c.ADMIN_SVC: "admin", c.MEMBER: MEMBER_TOKEN,
             c.MEMBER_SVC: MEMBER_TOKEN, c.OTHER: OTHER_TOKEN}[identity]
    headers = {"X-Auth-Token": token}
    if identity in (c.ADMIN_SVC, c.MEMBER_SVC):
        headers["X-Service-Token"] = SERVICE_TOKEN
    return headers


def error_message(text: str) -> str:
    """The human part of an error body: Cyborg's ``faultstring`` inside its
    ``error_message`` (without the conductor's traceback or webob's HTML), acceld's
    ``detail``, or the text itself, on one line."""
    message = text
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and "error_message" in body:
        message = body["error_message"]
        try:
            inner = json.loads(message)
            message = inner.get("faultstring", message) if isinstance(inner, dict) else message
        except (TypeError, ValueError):
            pass
    elif isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        message = body["errors"][0].get("detail", text)
    message = str(message).split("Traceback (most recent call last)")[0]
    message = re.sub(r"<[^>]+>", " ", message)  # webob's HTML error pages
    message = re.sub(r"\s+", " ", message).strip()
    return message if len(message) <= MESSAGE_MAX else message[:MESSAGE_MAX] + "..."


def fill(value: Any, values: dict[str, Any]) -> Any:
    """``value`` with every ``{name}`` placeholder of ``values`` filled in, in strings,
    dict keys and lists; a string that is exactly one placeholder takes the value's type."""
    if isinstance(value, str):
        for name, sub in values.items():
            token = "{" + name + "}"
            if value == token:
                return sub
            value = value.replace(token, str(sub))
        return value
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, dict):
        return {fill(k, values): fill(v, values) for k, v in value.items()}
    return value


@dataclass
class Side:
    """One server: ``root`` is its service root, e.g. ``http://127.0.0.1:6680/accelerator``."""

    name: str
    root: str
    session: requests.Session = field(default_factory=requests.Session)
    inventory: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ transport ----

    def request(self, method: str, path: str, identity: str = c.ADMIN, body: Any = None,
                content_type: str | None = c.JSON, microversion: str | None = None
                ) -> requests.Response:
        """Send one request; ``body`` is JSON-encoded unless it is ``cases.Raw``."""
        headers = identity_headers(identity)
        data = None
        if body is not None:
            data = body.data if isinstance(body, c.Raw) else json.dumps(body).encode()
            if content_type is not None:
                headers["Content-Type"] = content_type
        if microversion is not None:
            headers["OpenStack-API-Version"] = microversion
        return self.session.request(method, self.root.rstrip("/") + path, data=data,
                                    headers=headers, timeout=TIMEOUT)

    def call(self, method: str, path: str, expect: tuple[int, ...], **kw: Any) -> Any:
        """A set-up or clean-up request that must answer one of ``expect``; its JSON."""
        resp = self.request(method, path, **kw)
        if resp.status_code not in expect:
            raise SetupError(f"{self.name}: {method} {path} answered {resp.status_code} "
                             f"(wanted {expect}): {error_message(resp.text)}")
        return resp.json() if resp.content else None

    def reachable(self) -> bool:
        """Whether the server answers its v2 version document."""
        try:
            resp = self.session.get(self.root.rstrip("/") + "/v2", timeout=5)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    # ------------------------------------------------------------------ discovery ----

    def discover(self, wait: float = 30.0) -> dict[str, Any]:
        """Find the FPGA device, its deployable, provider and attributes' deployable id
        (waiting up to ``wait`` seconds for the agent's first report)."""
        deadline = time.monotonic() + wait
        while True:
            devices = self.call("GET", "/v2/devices?type=FPGA", (200,))["devices"]
            if devices or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not devices:
            raise SetupError(f"{self.name}: no FPGA device listed")
        device = devices[0]
        deployables = self.call("GET", "/v2/deployables", (200,))["deployables"]
        fpga = [d for d in deployables if '"FPGA"' in (d.get("attributes_list") or "")]
        if not fpga:
            raise SetupError(f"{self.name}: no deployable with rc FPGA")
        attrs = self.call("GET", "/v2/attributes?key=rc", (200,))["attributes"]
        ids = [a["deployable_id"] for a in attrs if a["value"] == "FPGA"]
        self.inventory = {"device": device["uuid"], "hostname": device["hostname"],
                          "deployable": fpga[0]["uuid"], "rp_uuid": fpga[0]["rp_uuid"],
                          "deployable_id": ids[0]}
        self._make_ready(device["uuid"])
        return self.inventory

    def _make_ready(self, device: str, wait: float = 30.0) -> None:
        """Make the device bindable where it is not yet. Cyborg binds any discovered
        device; acceld keeps one ``inactive`` until an operator readies it through its v1
        API (``PUT /v1/accelerators/{uuid}/state``), a route Cyborg does not have (404)."""
        path = f"/v1/accelerators/{device}"
        deadline = time.monotonic() + wait
        while True:
            resp = self.request("GET", path)
            if resp.status_code != 200 or resp.json().get("state") == "ready":
                return
            if resp.json().get("state") == "inactive":
                self.call("PUT", f"{path}/state", (200, 409), body={"state": "ready"})
            if time.monotonic() > deadline:
                raise SetupError(f"{self.name}: device {device} is {resp.json()['state']}, "
                                 "not ready")
            time.sleep(0.1)

    # --------------------------------------------------------------------- set-up ----

    def setup(self, steps: tuple[str, ...], values: dict[str, Any]) -> None:
        """Make the set-up ``steps`` (in :data:`cases.SETUP_ORDER`), adding the ids they
        create to ``values`` (the placeholders' values, the inventory included) as they go,
        so that a set-up that fails half-way is still cleaned up."""
        values.update(self.inventory)
        for step in c.SETUP_ORDER:
            if step in steps:
                getattr(self, f"_setup_{step}")(values)

    def _create_arq(self, identity: str) -> str:
        body = self.call("POST", "/v2/accelerator_requests", (201,), identity=identity,
                         body={"device_profile_name": c.DP_NAME})
        return body["arqs"][0]["uuid"]

    def _setup_dp(self, values: dict[str, Any]) -> None:
        self.call("POST", "/v2/device_profiles", (201,), body=[
            {"name": c.DP_NAME, "uuid": c.DP_UUID, "groups": [{"resources:FPGA": "1"}]}])

    def _setup_arq(self, values: dict[str, Any]) -> None:
        values["arq"] = self._create_arq(c.ADMIN)

    def _setup_arq2(self, values: dict[str, Any]) -> None:
        values["arq2"] = self._create_arq(c.ADMIN)

    def _setup_arq_member(self, values: dict[str, Any]) -> None:
        values["arq_member"] = self._create_arq(c.MEMBER)

    def _setup_bound(self, values: dict[str, Any]) -> None:
        ops = fill(c.bind_ops(), values)
        self.call("PATCH", "/v2/accelerator_requests", (202,), identity=c.ADMIN_SVC,
                  body={values["arq"]: ops})
        self._wait_state(values["arq"], "Bound")

    def _setup_attr(self, values: dict[str, Any]) -> None:
        body = self.call("POST", "/v2/attributes", (201,), body={
            "deployable_id": values["deployable_id"], "key": c.ATTR_KEY, "value": "dt-value"})
        values["attr"] = body["uuid"]

    def _wait_state(self, arq: str, state: str, wait: float = 10.0) -> None:
        deadline = time.monotonic() + wait
        while True:
            got = self.call("GET", f"/v2/accelerator_requests/{arq}", (200,))["state"]
            if got == state:
                return
            if time.monotonic() > deadline:
                raise SetupError(f"{self.name}: ARQ {arq} is {got}, not {state}")
            time.sleep(0.05)

    # ---------------------------------------------------------------------- a case ----

    def send(self, case: c.Case, values: dict[str, Any]) -> Answer:
        """Send ``case`` with its placeholders filled in from ``values``."""
        body = case.body
        if isinstance(body, c.Raw):
            body = c.Raw(fill(body.data.decode(), values).encode())
        else:
            body = fill(body, values)
        resp = self.request(case.method, fill(case.path, values), identity=case.identity,
                            body=body, content_type=case.content_type,
                            microversion=case.microversion)
        message = error_message(resp.text) if resp.status_code >= 400 else ""
        return Answer(resp.status_code, message)

    # -------------------------------------------------------------------- clean-up ----

    def cleanup(self, values: dict[str, Any] | None = None) -> None:
        """Delete every ARQ, device profile and attribute the cases made and enable the
        devices again. The ARQs and attribute of ``values`` (the set-up's) go first, by
        id, as a bad case may have left them unlistable; then whatever the lists show
        whose profile name or key starts with ``cases.PREFIX``."""
        values = values or {}
        for key in ("arq", "arq2", "arq_member"):
            if key in values:
                self.call("DELETE", f"/v2/accelerator_requests?arqs={values[key]}",
                          (204, 404), identity=c.ADMIN_SVC)
        if "attr" in values:
            self.call("DELETE", f"/v2/attributes/{values['attr']}", (204, 404))
        for arq in self._list_arqs():
            if arq["device_profile_name"].startswith(c.PREFIX):
                self.call("DELETE", f"/v2/accelerator_requests?arqs={arq['uuid']}",
                          (204, 404), identity=c.ADMIN_SVC)
        for dp in self.call("GET", "/v2/device_profiles", (200,))["device_profiles"]:
            if dp["name"].startswith(c.PREFIX):
                self.call("DELETE", f"/v2/device_profiles?value={dp['name']}", (204, 404))
        for attr in self.call("GET", "/v2/attributes", (200,))["attributes"]:
            if str(attr["key"]).startswith(c.PREFIX):
                self.call("DELETE", f"/v2/attributes/{attr['uuid']}", (204, 404))
        devices = self.call("GET", "/v2/devices", (200,), microversion="accelerator 2.3")
        for device in devices["devices"]:
            if device.get("status", "enabled") != "enabled":
                self.call("POST", f"/v2/devices/{device['uuid']}/enable", (200,))

    def _list_arqs(self) -> list[dict[str, Any]]:
        """All ARQs. Cyborg on SQLite lets a profile in use be deleted, after which its
        ARQ list is a 404 naming the profile's id: profiles are made again until the id
        exists (SQLite reuses the highest free id), and the list is read again."""
        for attempt in range(10):
            resp = self.request("GET", "/v2/accelerator_requests")
            if resp.status_code == 200:
                return resp.json()["arqs"]
            if "Device Profile not found with id" not in resp.text:
                break
            self.call("POST", "/v2/device_profiles", (201,), body=[
                {"name": f"{c.PREFIX}recover-{attempt}",
                 "uuid": f"d1ff0000-0000-4000-8000-0000000e{attempt:04d}",
                 "groups": [{"resources:FPGA": "1"}]}])
        raise SetupError(f"{self.name}: cannot list ARQs: {resp.status_code} "
                         f"{error_message(resp.text)}")
