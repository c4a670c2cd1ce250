"""Policy in code (oslo.policy): Cyborg's v2 rules and persona base rules, acceld's v1 rules.

The defaults are Cyborg's new defaults; as upstream, the persona base rules carry
:data:`LEGACY_BRIDGE`, ORed in only under ``[oslo_policy] enforce_new_defaults = false``.
Every route rule is project-scoped (the database layer scopes the records); Cyborg's legacy
base rules keep an operator's Cyborg policy file loading.
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_policy import policy

LEGACY_BRIDGE = "is_admin:True or project_id:%(project_id)s"
_IN_PROJECT = " and project_id:%(project_id)s"


def _bridged(name: str, check: str, description: str) -> policy.RuleDefault:
    return policy.RuleDefault(name, check, description, deprecated_rule=policy.DeprecatedRule(
        name=name, check_str=LEGACY_BRIDGE, deprecated_since="2026.2",
        deprecated_reason="Cyborg's project-or-admin bridge: any project token passes. "
                          "The new defaults check the persona's role."))


BASE_RULES = [
    policy.RuleDefault("admin_api", "role:admin", "Cloud administrator."),
    policy.RuleDefault("service_api", "role:service", "An OpenStack service (e.g. Nova)."),
    policy.RuleDefault("project_reader_api", "role:reader", "A project reader."),
    policy.RuleDefault("project_member_api", "role:member", "A project member."),
    policy.RuleDefault("admin_or_service", "rule:admin_api or rule:service_api",
                       "Administrator or service."),
    _bridged("project_reader_or_admin", "rule:project_reader_api or rule:admin_api",
             "Project reader or administrator."),
    policy.RuleDefault("project_admin_api", "role:admin" + _IN_PROJECT,
                       "An administrator of the project."),
    policy.RuleDefault("project_manager_api", "role:manager" + _IN_PROJECT,
                       "A manager of the project."),
    _bridged("project_member_or_admin", "rule:project_member_api or rule:admin_api",
             "Project member or administrator."),
    _bridged("project_manager_or_admin", "rule:project_manager_api or rule:admin_api",
             "Project manager or administrator."),
    _bridged("project_member_or_service", "rule:project_member_api or rule:service_api",
             "Project member or an OpenStack service."),
    # Cyborg's legacy rules, for policy files written against them.
    policy.RuleDefault("public_api", "is_public_api:True", "Internal flag for public API."),
    policy.RuleDefault("allow", "@", "Always allowed."),
    policy.RuleDefault("deny", "!", "Always denied."),
    policy.RuleDefault("is_admin", "rule:admin_api", "Legacy: administrator."),
    policy.RuleDefault("admin_or_owner", LEGACY_BRIDGE, "Legacy: administrator or owner."),
    policy.RuleDefault("admin_or_user", "is_admin:True or user_id:%(user_id)s",
                       "Legacy: administrator or the user."),
    policy.RuleDefault("default", "rule:admin_or_owner", "Legacy default rule."),
]

_READER = "rule:project_reader_or_admin"
_MANAGER = "rule:project_manager_or_admin"
_ADMIN = "rule:admin_api"
_ADMIN_OR_SERVICE = "rule:admin_or_service"
_MEMBER_OR_SERVICE = "rule:project_member_or_service"


def _rules(*table: tuple[str, ...]) -> list[policy.DocumentedRuleDefault]:
    """Project-scoped rules from (name, check, description, "METHOD /path"...) rows, each
    documenting the operations it guards."""
    return [policy.DocumentedRuleDefault(
        name=name, check_str=check, description=description, scope_types=["project"],
        operations=[dict(zip(("method", "path"), op.split(" "), strict=True)) for op in ops])
        for name, check, description, *ops in table]


V1_RULES = _rules(
    ("acceld:accelerator:get_all", _READER, "List accelerators.", "GET /v1/accelerators"),
    ("acceld:accelerator:get_one", _READER, "Show an accelerator.",
     "GET /v1/accelerators/{uuid}"),
    ("acceld:accelerator:create", _ADMIN, "Declare an accelerator.", "POST /v1/accelerators"),
    ("acceld:accelerator:update", _ADMIN, "Update an accelerator's specs.",
     "PUT /v1/accelerators/{uuid}/acc_specs"),
    ("acceld:accelerator:set_state", _ADMIN, "Mark an accelerator ready or inactive.",
     "PUT /v1/accelerators/{uuid}/state"),
    ("acceld:accelerator:attach", _ADMIN_OR_SERVICE,
     "Attach an accelerator to an instance or a host.", "PUT /v1/accelerators/{uuid}"),
    ("acceld:accelerator:detach", _ADMIN_OR_SERVICE, "Detach an accelerator.",
     "DELETE /v1/accelerators/{uuid}"),
    ("acceld:accelerator:health_get", _ADMIN,
     "Show an accelerator's health life cycle, maintenance and who holds it.",
     "GET /v1/accelerators/{uuid}/health"),
    ("acceld:accelerator:health", _ADMIN,
     "Quarantine, release (re-admit) or reset an accelerator.",
     "POST /v1/accelerators/{uuid}/health"),
    ("acceld:accelerator:maintenance", _ADMIN,
     "Drain an accelerator (maintenance: no new binds) or return it to service.",
     "PUT /v1/accelerators/{uuid}/maintenance", "DELETE /v1/accelerators/{uuid}/maintenance"),
    ("acceld:service:get_all", _ADMIN, "List services.", "GET /v1/services"),
    ("acceld:guest:get_all", _ADMIN,
     "List the instances the agents' hypervisors run (hot plug's targets).",
     "GET /v1/guests"),
    ("acceld:driver:get_all", _ADMIN,
     "List drivers per host (with ?long=true: why discovery found what it found).",
     "GET /v1/drivers"),
    ("acceld:accelerator:stats", _ADMIN,
     "Read an accelerator's current statistics from its agent.",
     "GET /v1/accelerators/{uuid}/stats"),
    ("acceld:backend:get_all", _ADMIN,
     "List the backends the drivers found and the services each offers.", "GET /v1/backends"),
    ("acceld:driver:action", _ADMIN, "Install, uninstall or update a driver on agents.",
     "POST /v1/drivers/{name}/action"),
    ("acceld:discover", _ADMIN, "Ask agents to rediscover now.", "POST /v1/discover"),
    ("acceld:placement:get", _ADMIN, "Show Placement sync state per host.",
     "GET /v1/placement"),
    ("acceld:placement:sync", _ADMIN, "Plan (dry run) or run a Placement reconciliation.",
     "POST /v1/placement/sync"),
    ("acceld:ledger:get_all", _ADMIN,
     "List the allocation ledger (who held which device, when).", "GET /v1/ledger"),
    ("acceld:usage:get", _ADMIN, "Device-hours per project (or device, host, instance).",
     "GET /v1/usage"),
    ("acceld:metrics:get", _ADMIN,
     "Scrape the Prometheus metrics (fleet gauges, API request counters).", "GET /metrics"),
)

V2_RULES = _rules(
    ("cyborg:device:get_all", _MANAGER, "List devices.", "GET /v2/devices"),
    ("cyborg:device:get_one", _MANAGER, "Show a device.", "GET /v2/devices/{uuid}"),
    ("cyborg:device:enable", _ADMIN, "Enable a device (schedulable again).",
     "POST /v2/devices/{uuid}/enable"),
    ("cyborg:device:disable", _ADMIN, "Disable a device (maintenance).",
     "POST /v2/devices/{uuid}/disable"),
    ("cyborg:deployable:get_all", _MANAGER, "List deployables.", "GET /v2/deployables"),
    ("cyborg:deployable:get_one", _MANAGER, "Show a deployable.",
     "GET /v2/deployables/{uuid}"),
    ("cyborg:deployable:program", _ADMIN,
     "Program a deployable (an FPGA) with an image (acceld: asynchronous, 202).",
     "PATCH /v2/deployables/{uuid}/program"),
    ("acceld:deployable:program_status", _MANAGER,
     "Show the newest program operation of a deployable (acceld extension).",
     "GET /v2/deployables/{uuid}/program"),
    ("cyborg:attribute:get_all", _MANAGER, "List attributes.", "GET /v2/attributes"),
    ("cyborg:attribute:get_one", _MANAGER, "Show an attribute.", "GET /v2/attributes/{uuid}"),
    ("cyborg:attribute:create", _ADMIN, "Create an attribute.", "POST /v2/attributes"),
    ("cyborg:attribute:delete", _ADMIN, "Delete an attribute.",
     "DELETE /v2/attributes/{uuid}"),
    ("cyborg:device_profile:get_all", _READER, "List device profiles.",
     "GET /v2/device_profiles"),
    ("cyborg:device_profile:get_one", _READER,
     "Show a device profile by uuid (or by name from 2.2).",
     "GET /v2/device_profiles/{name_or_uuid}"),
    ("acceld:device_profile:availability", _MANAGER,
     "Show how many instances of a device profile fit now, on which hosts, and why not "
     "on the others (acceld extension).",
     "GET /v2/device_profiles/{name_or_uuid}/availability"),
    ("cyborg:device_profile:create", _ADMIN, "Create a device profile.",
     "POST /v2/device_profiles"),
    ("cyborg:device_profile:delete", _ADMIN, "Delete device profiles by uuid or names.",
     "DELETE /v2/device_profiles", "DELETE /v2/device_profiles/{name_or_uuid}"),
    # Accelerator requests: rows are scoped to the caller's project in the database layer;
    # bind, unbind and instance deletes also need a service token (not a policy rule).
    ("cyborg:arq:create", _MEMBER_OR_SERVICE,
     "Create accelerator requests from a device profile.", "POST /v2/accelerator_requests"),
    ("acceld:arq:dry_run", _MEMBER_OR_SERVICE,
     "Say whether accelerator requests of a device profile would bind now, and where, "
     "without creating them (acceld extension).", "POST /v2/accelerator_requests/dry_run"),
    ("cyborg:arq:get_all", _READER, "List accelerator requests.",
     "GET /v2/accelerator_requests"),
    ("cyborg:arq:get_one", _READER, "Show an accelerator request.",
     "GET /v2/accelerator_requests/{uuid}"),
    ("cyborg:arq:update", _MEMBER_OR_SERVICE, "Bind or unbind accelerator requests.",
     "PATCH /v2/accelerator_requests", "PATCH /v2/accelerator_requests/{uuid}"),
    ("cyborg:arq:delete", _MEMBER_OR_SERVICE, "Delete accelerator requests.",
     "DELETE /v2/accelerator_requests", "DELETE /v2/accelerator_requests/{uuid}"),
    ("acceld:arq:hot_plug_get", _READER,
     "Show where the live attach of an accelerator request stands (acceld extension).",
     "GET /v2/accelerator_requests/{uuid}/hot_plug"),
    ("acceld:arq:hot_plug", _MEMBER_OR_SERVICE,
     "Attach an accelerator request's device to a running instance, or detach it "
     "(acceld extension; the instance must be the project's).",
     "PUT /v2/accelerator_requests/{uuid}/hot_plug",
     "DELETE /v2/accelerator_requests/{uuid}/hot_plug"),
)

ROUTE_RULES = V1_RULES + V2_RULES


def list_rules() -> list[policy.RuleDefault]:
    return BASE_RULES + ROUTE_RULES


def make_enforcer(conf: cfg.ConfigOpts) -> policy.Enforcer:
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(list_rules())
    return enforcer


def get_enforcer() -> policy.Enforcer:
    """For oslopolicy-* tools: an enforcer over a fresh, unparsed config."""
    conf = cfg.ConfigOpts()
    conf([], project="acceld")
    return make_enforcer(conf)
