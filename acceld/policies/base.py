"""The one constructor of route rules, shared by the v1 and v2 rule lists."""

from __future__ import annotations

from oslo_policy import policy


def rule(name: str, check: str, desc: str,
         *operations: tuple[str, str]) -> policy.DocumentedRuleDefault:
    """A project-scoped rule documenting the (method, path) operations it guards."""
    return policy.DocumentedRuleDefault(
        name=name, check_str=check, description=desc,
        operations=[{"method": method, "path": path} for method, path in operations],
        scope_types=["project"])
