"""Domain exceptions, each with a stable ``code``; ``api/errors.py`` maps their bases
(NotFound, Conflict, InvalidInput, Forbidden, NotResolved, Unavailable, ...) to HTTP
statuses. Each takes a single message so that it survives oslo.messaging's remote error
round trip (the class is rebuilt on the caller's side from ``acceld.exception``)."""

from __future__ import annotations


class AccelDError(Exception):
    """Base of every acceld domain error."""

    code = "acceld.error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message    # str() too


class NotFound(AccelDError):
    code = "acceld.not_found"


class AcceleratorNotFound(NotFound):
    code = "acceld.accelerator.not_found"


class DriverNotFound(NotFound):
    code = "acceld.driver.not_found"


class Conflict(AccelDError):
    code = "acceld.conflict"


class DuplicateName(Conflict):
    code = "acceld.accelerator.duplicate"


class RevisionConflict(Conflict):
    code = "acceld.accelerator.revision_conflict"


class InvalidStateTransition(Conflict):
    code = "acceld.accelerator.state_conflict"


class AlreadyAttached(Conflict):
    code = "acceld.accelerator.attached"


class AllocationsExist(Conflict):
    code = "acceld.accelerator.allocations_exist"


class NotReady(Conflict):
    code = "acceld.accelerator.not_ready"


class DeviceInUse(Conflict):
    """Taking the device out of service would pull it from under its holder (named)."""

    code = "acceld.device.in_use"


class HealthStateConflict(Conflict):
    """A health life-cycle or maintenance change the device's state does not allow."""
    code = "acceld.device.health_conflict"


class InvalidInput(AccelDError):
    code = "acceld.invalid_input"


class InstanceHasARQs(InvalidInput):
    """A bind for an instance that has accelerator requests already (no hot add)."""

    code = "acceld.arq.instance_has_arqs"


class InvalidReport(InvalidInput):
    code = "acceld.report.invalid"


class Unavailable(AccelDError):
    code = "acceld.unavailable"


class HostUnreachable(Unavailable):
    code = "acceld.host.unreachable"


class RemoteFailure(Unavailable):
    """An RPC failed with a non-domain error; the cause stays in that service's log."""

    code = "acceld.remote.failed"


class OperationFailed(AccelDError):
    code = "acceld.operation.failed"


# -- accelerator requests (Cyborg v2) ---------------------------------------------------------
class ARQNotFound(NotFound):
    code = "acceld.arq.not_found"


class ARQBadState(Conflict):
    """An ARQ is not in a state the requested change may start from (Cyborg: 500)."""

    code = "acceld.arq.bad_state"


class DeviceNotUsable(Conflict):
    """A bind on a device unusable now, or whose attach handles Nova cannot attach."""

    code = "acceld.arq.device_not_usable"


class NoFreeAttachHandle(NotFound):
    code = "acceld.arq.no_attach_handle"


class Forbidden(AccelDError):
    """The caller may not do this whatever the policy says (the service-token gate)."""

    code = "acceld.arq.service_token_required"


class OtherProject(Forbidden):
    """Another project's request made what the caller tries to undo."""

    code = "acceld.forbidden.other_project"


class NotResolved(AccelDError):
    """``bind_state=resolved`` for an instance whose ARQs are not all resolved (423)."""

    code = "acceld.arq.not_resolved"


# -- FPGA programming -------------------------------------------------------------------------

class ProgramNotFound(NotFound):
    code = "acceld.program.not_found"


class ProgramInProgress(Conflict):
    """Another program operation of the same deployable is queued or running."""

    code = "acceld.program.in_progress"


class NotProgrammable(Conflict):
    """The deployable's device is on no host, or its driver cannot program devices."""

    code = "acceld.program.not_programmable"


class DeployableInUse(Conflict):
    """Loading another image would pull the deployable from under its holder."""

    code = "acceld.program.in_use"


class GuestNotFound(NotFound):
    """No domain with that instance UUID on the host asked."""

    code = "acceld.guest.not_found"


class HypervisorError(OperationFailed):
    """The hypervisor refused or failed an attach or detach; the message says why."""

    code = "acceld.hypervisor.failed"
