"""Role: what a wrapped function does in a rollout, one small class per role, looked up in :data:`ROLES`.

A role says what its span is called and of which kind, which attributes it puts on it at the start
and at a successful end (read through the target's schema), and what else its calls do, as hooks
it has or lacks, which the engine (``plan``) runs. **A new role is one class (a file here)
and one line in** :data:`ROLES`: targets accept its name, the engine runs its hooks, and its
decorator ``gym_instrument.<name>`` comes from the table when it is asked for.
"""

from gym_instrument.role.base import ROLLOUT_ID_CONTEXT_KEY, CallInFlight, Pending, Role, RoleCall, rollout_id_in
from gym_instrument.role.dispatch import DispatchRole
from gym_instrument.role.frame import InjectFrameRole, ReceiveFrameRole
from gym_instrument.role.hand_off import HandOffRole
from gym_instrument.role.health import HealthRole
from gym_instrument.role.inject import InjectRole
from gym_instrument.role.isolate import IsolateRole
from gym_instrument.role.model_call import ModelCallRole
from gym_instrument.role.read_result import ReadResultRole
from gym_instrument.role.receive import ReceiveRole
from gym_instrument.role.run import RunRole
from gym_instrument.role.verify import VerifyRole

ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        DispatchRole(),
        VerifyRole(),
        HealthRole(),
        IsolateRole(),
        RunRole(),
        InjectRole(),
        ReceiveRole(),
        ModelCallRole(),
        ReadResultRole(),
        HandOffRole(),
        InjectFrameRole(),
        ReceiveFrameRole(),
    )
}

__all__ = [
    "ROLES",
    "ROLLOUT_ID_CONTEXT_KEY",
    "CallInFlight",
    "DispatchRole",
    "HandOffRole",
    "HealthRole",
    "InjectFrameRole",
    "InjectRole",
    "IsolateRole",
    "ModelCallRole",
    "Pending",
    "ReadResultRole",
    "ReceiveFrameRole",
    "ReceiveRole",
    "Role",
    "RoleCall",
    "RunRole",
    "VerifyRole",
    "rollout_id_in",
]
