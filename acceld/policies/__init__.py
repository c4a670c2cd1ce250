"""Policy in code (oslo.policy), with the persona base rules Cyborg uses.

Entry points: ``oslo.policy.policies`` -> :func:`list_rules` (sample generator) and
``oslo.policy.enforcer`` -> :func:`get_enforcer`.
"""

from __future__ import annotations

from oslo_config import cfg
from oslo_policy import policy

from acceld.policies import v2
from acceld.policies.base import rule as _rule

BASE_RULES = [
    policy.RuleDefault("admin_api", "role:admin", "Cloud administrator."),
    policy.RuleDefault("service_api", "role:service", "An OpenStack service (e.g. Nova)."),
    policy.RuleDefault("project_reader_api", "role:reader", "A project reader."),
    policy.RuleDefault("project_member_api", "role:member", "A project member."),
    policy.RuleDefault("admin_or_service", "rule:admin_api or rule:service_api",
                       "Administrator or service."),
    v2.bridged("project_reader_or_admin", "rule:project_reader_api or rule:admin_api",
               "Project reader or administrator."),
]


V1_RULES = [
    _rule("acceld:accelerator:get_all", "rule:project_reader_or_admin", "List accelerators.",
          ("GET", "/v1/accelerators")),
    _rule("acceld:accelerator:get_one", "rule:project_reader_or_admin", "Show an accelerator.",
          ("GET", "/v1/accelerators/{uuid}")),
    _rule("acceld:accelerator:create", "rule:admin_api", "Declare an accelerator.",
          ("POST", "/v1/accelerators")),
    _rule("acceld:accelerator:update", "rule:admin_api", "Update an accelerator's specs.",
          ("PUT", "/v1/accelerators/{uuid}/acc_specs")),
    _rule("acceld:accelerator:set_state", "rule:admin_api",
          "Mark an accelerator ready or inactive.", ("PUT", "/v1/accelerators/{uuid}/state")),
    _rule("acceld:accelerator:attach", "rule:admin_or_service",
          "Attach an accelerator to an instance or a host.", ("PUT", "/v1/accelerators/{uuid}")),
    _rule("acceld:accelerator:detach", "rule:admin_or_service", "Detach an accelerator.",
          ("DELETE", "/v1/accelerators/{uuid}")),
    _rule("acceld:service:get_all", "rule:admin_api", "List services.", ("GET", "/v1/services")),
    _rule("acceld:driver:get_all", "rule:admin_api",
          "List drivers per host (with ?long=true: why discovery found what it found).",
          ("GET", "/v1/drivers")),
    _rule("acceld:accelerator:stats", "rule:admin_api",
          "Read an accelerator's current statistics from its agent.",
          ("GET", "/v1/accelerators/{uuid}/stats")),
    _rule("acceld:backend:get_all", "rule:admin_api",
          "List the backends the drivers found and the services each offers.",
          ("GET", "/v1/backends")),
    _rule("acceld:driver:action", "rule:admin_api",
          "Install, uninstall or update a driver on agents.",
          ("POST", "/v1/drivers/{name}/action")),
    _rule("acceld:discover", "rule:admin_api", "Ask agents to rediscover now.",
          ("POST", "/v1/discover")),
    _rule("acceld:placement:get", "rule:admin_api", "Show Placement sync state per host.",
          ("GET", "/v1/placement")),
    _rule("acceld:placement:sync", "rule:admin_api",
          "Plan (dry run) or run a Placement reconciliation.", ("POST", "/v1/placement/sync")),
]


# The rules of API routes (each documents the operations it guards).
ROUTE_RULES = V1_RULES + v2.RULES


def list_rules() -> list[policy.RuleDefault]:
    return BASE_RULES + v2.BASE_RULES + ROUTE_RULES


def make_enforcer(conf: cfg.ConfigOpts) -> policy.Enforcer:
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(list_rules())
    return enforcer


def get_enforcer() -> policy.Enforcer:
    """For oslopolicy-* tools: an enforcer over a fresh, unparsed config."""
    conf = cfg.ConfigOpts()
    conf([], project="acceld")
    return make_enforcer(conf)
