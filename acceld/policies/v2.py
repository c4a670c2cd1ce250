"""Cyborg's v2 policy rules (names and base rules as upstream defines them).

The defaults are Cyborg's *new* defaults: inventory reads need the project manager role
(or admin), device profile reads any project reader, accelerator request reads any
project reader and their writes a project member or a service, and every other write
here needs admin. Like upstream, the persona base rules carry the deprecated bridge
``is_admin:True or project_id:%(project_id)s``, which oslo.policy ORs in only under the
legacy defaults (``[oslo_policy] enforce_new_defaults = false``, what upstream Cyborg
forces): there every project token passes them, inventory reads included, as with
upstream. Either way every rule is project-scoped (system- and domain-scoped tokens are
refused; oslo.policy 6 always checks scope), and which project's requests a caller sees
is decided in the database layer, not by policy. The legacy base rules are registered so
that an operator's Cyborg policy file that refers to them keeps loading.
"""

from __future__ import annotations

from oslo_policy import policy

from acceld.policies.base import rule as _rule

_IN_PROJECT = " and project_id:%(project_id)s"
# Upstream's deprecated bridge, ORed in under the legacy defaults only.
LEGACY_BRIDGE = "is_admin:True or project_id:%(project_id)s"


def bridged(name: str, check: str, description: str) -> policy.RuleDefault:
    return policy.RuleDefault(name, check, description, deprecated_rule=policy.DeprecatedRule(
        name=name, check_str=LEGACY_BRIDGE, deprecated_since="2026.2",
        deprecated_reason="Cyborg's project-or-admin bridge: any project token passes. "
                          "The new defaults check the persona's role."))


BASE_RULES = [
    policy.RuleDefault("project_admin_api", "role:admin" + _IN_PROJECT,
                       "An administrator of the project."),
    policy.RuleDefault("project_manager_api", "role:manager" + _IN_PROJECT,
                       "A manager of the project."),
    bridged("project_member_or_admin", "rule:project_member_api or rule:admin_api",
             "Project member or administrator."),
    bridged("project_manager_or_admin", "rule:project_manager_api or rule:admin_api",
             "Project manager or administrator."),
    bridged("project_member_or_service", "rule:project_member_api or rule:service_api",
             "Project member or an OpenStack service."),
    # Cyborg's legacy rules, for policy files written against them.
    policy.RuleDefault("public_api", "is_public_api:True", "Internal flag for public API."),
    policy.RuleDefault("allow", "@", "Always allowed."),
    policy.RuleDefault("deny", "!", "Always denied."),
    policy.RuleDefault("is_admin", "rule:admin_api", "Legacy: administrator."),
    policy.RuleDefault("admin_or_owner", "is_admin:True or project_id:%(project_id)s",
                       "Legacy: administrator or owner."),
    policy.RuleDefault("admin_or_user", "is_admin:True or user_id:%(user_id)s",
                       "Legacy: administrator or the user."),
    policy.RuleDefault("default", "rule:admin_or_owner", "Legacy default rule."),
]


_MANAGER = "rule:project_manager_or_admin"
_ADMIN = "rule:admin_api"
_MEMBER_OR_SERVICE = "rule:project_member_or_service"

RULES = [
    _rule("cyborg:device:get_all", _MANAGER, "List devices.", ("GET", "/v2/devices")),
    _rule("cyborg:device:get_one", _MANAGER, "Show a device.", ("GET", "/v2/devices/{uuid}")),
    _rule("cyborg:device:enable", _ADMIN, "Enable a device (schedulable again).",
          ("POST", "/v2/devices/{uuid}/enable")),
    _rule("cyborg:device:disable", _ADMIN, "Disable a device (maintenance).",
          ("POST", "/v2/devices/{uuid}/disable")),
    _rule("cyborg:deployable:get_all", _MANAGER, "List deployables.",
          ("GET", "/v2/deployables")),
    _rule("cyborg:deployable:get_one", _MANAGER, "Show a deployable.",
          ("GET", "/v2/deployables/{uuid}")),
    _rule("cyborg:deployable:program", _ADMIN,
          "Program a deployable (an FPGA) with an image (acceld: asynchronous, 202).",
          ("PATCH", "/v2/deployables/{uuid}/program")),
    _rule("acceld:deployable:program_status", _MANAGER,
          "Show the newest program operation of a deployable (acceld extension).",
          ("GET", "/v2/deployables/{uuid}/program")),
    _rule("cyborg:attribute:get_all", _MANAGER, "List attributes.", ("GET", "/v2/attributes")),
    _rule("cyborg:attribute:get_one", _MANAGER, "Show an attribute.",
          ("GET", "/v2/attributes/{uuid}")),
    _rule("cyborg:attribute:create", _ADMIN, "Create an attribute.",
          ("POST", "/v2/attributes")),
    _rule("cyborg:attribute:delete", _ADMIN, "Delete an attribute.",
          ("DELETE", "/v2/attributes/{uuid}")),
    _rule("cyborg:device_profile:get_all", "rule:project_reader_or_admin",
          "List device profiles.", ("GET", "/v2/device_profiles")),
    _rule("cyborg:device_profile:get_one", "rule:project_reader_or_admin",
          "Show a device profile by uuid (or by name from 2.2).",
          ("GET", "/v2/device_profiles/{name_or_uuid}")),
    _rule("cyborg:device_profile:create", _ADMIN, "Create a device profile.",
          ("POST", "/v2/device_profiles")),
    _rule("cyborg:device_profile:delete", _ADMIN, "Delete device profiles by uuid or names.",
          ("DELETE", "/v2/device_profiles"), ("DELETE", "/v2/device_profiles/{name_or_uuid}")),
    # Accelerator requests: rows are scoped to the caller's project in the database layer;
    # bind, unbind and instance deletes also need a service token (not a policy rule).
    _rule("cyborg:arq:create", _MEMBER_OR_SERVICE, "Create accelerator requests from a "
          "device profile.", ("POST", "/v2/accelerator_requests")),
    _rule("cyborg:arq:get_all", "rule:project_reader_or_admin", "List accelerator requests.",
          ("GET", "/v2/accelerator_requests")),
    _rule("cyborg:arq:get_one", "rule:project_reader_or_admin", "Show an accelerator request.",
          ("GET", "/v2/accelerator_requests/{uuid}")),
    _rule("cyborg:arq:update", _MEMBER_OR_SERVICE, "Bind or unbind accelerator requests.",
          ("PATCH", "/v2/accelerator_requests"), ("PATCH", "/v2/accelerator_requests/{uuid}")),
    _rule("cyborg:arq:delete", _MEMBER_OR_SERVICE, "Delete accelerator requests.",
          ("DELETE", "/v2/accelerator_requests"),
          ("DELETE", "/v2/accelerator_requests/{uuid}")),
]
