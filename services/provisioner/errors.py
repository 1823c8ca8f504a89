"""One table: what a failed vast.ai call, or a fleet that cannot be listed, means for a command's answer.

Every operation answers a failure the same way: the fleet unknown is a refusal (nothing was done, and nothing
may be decided on a list that failed), a refused key, a machine vast no longer has, and any other vast error
are failures naming the rule.
"""

from __future__ import annotations

from typing import Literal

from services.provisioner.vast_client import InstanceNotFound, VastAuthError, VastError
from shared.contract import RefusalRule


class FleetUnknown(Exception):
    """The instance list could not be read: the fleet is unknown, not empty."""


class LeaseLost(Exception):
    """The fleet lease lapsed during a command: another replica may be changing the fleet, so this one stops
    before its next step. Not answered: the command is redelivered, and a launch finds the instances it already
    rented by their labels."""


Outcome = Literal["refused", "failed"]

# the first entry the error is an instance of answers (a refused key and a missing machine are vast errors too)
ERROR_TABLE: tuple[tuple[type[Exception], Outcome, RefusalRule], ...] = (
    (FleetUnknown, "refused", RefusalRule.UNKNOWN_FLEET),
    (VastAuthError, "failed", RefusalRule.AUTH),
    (InstanceNotFound, "failed", RefusalRule.UNKNOWN_INSTANCE),
    (VastError, "failed", RefusalRule.VAST_ERROR),
)
# the errors an operation answers for; anything else is a fault of ours and is raised
ANSWERED = tuple(kind for kind, _, _ in ERROR_TABLE)


def answer_for(error: Exception) -> tuple[Outcome, RefusalRule]:
    for kind, outcome, rule in ERROR_TABLE:
        if isinstance(error, kind):
            return outcome, rule
    raise error
