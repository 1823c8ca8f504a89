"""Which provisioner replica is the active one: it alone reconciles (lists vast.ai every reconcile interval);
the others stand by on a Redis lease and take over when it lapses (a crashed holder's expires after
`lease_ttl_s`, a stopped one's is released at once). Commands need no standby: the work queue gives each to one
replica, and the fleet lease (state.py) serialises their changes."""

from __future__ import annotations

from dataclasses import dataclass

from services.provisioner.store import ProvisionerStore

ACTIVE_LEASE = "active"


@dataclass
class ActiveLease:
    store: ProvisionerStore
    ttl_s: float
    token: str | None = None

    async def hold(self) -> bool:
        """True while this replica is the active one: it renews its lease, or takes a free one."""
        if self.token is not None and await self.store.renew_lease(ACTIVE_LEASE, self.token, self.ttl_s):
            return True
        self.token = await self.store.try_lease(ACTIVE_LEASE, self.ttl_s)
        return self.token is not None

    async def release(self) -> None:
        """On a clean stop: a standby takes over at its next look instead of after the lease's expiry."""
        if self.token is not None:
            await self.store.release_lease(ACTIVE_LEASE, self.token)
            self.token = None
