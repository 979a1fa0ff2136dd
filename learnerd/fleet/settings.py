"""``[fleet]``: replicas sharing one PostgreSQL database (:mod:`learnerd.fleet`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from learnerd.sections import Section


class FleetConfig(Section):
    """Replicas sharing one PostgreSQL database (ignored on SQLite); times in seconds."""

    host: str = ""
    """the host watermarks are keyed by; "" = this machine's host name"""
    lease_ttl_s: float = Field(15.0, gt=0)
    """a replica not renewed for this long is dead: its keys are taken over"""
    heartbeat_s: float = Field(3.0, gt=0)
    """how often a replica renews its lease (must be < lease_ttl_s / 2)"""
    audit: bool = False
    """record every reconcile (queue, key, replica, start, end) in reconcile_log"""

    @model_validator(mode="after")
    def _heartbeat_within_the_lease(self) -> FleetConfig:
        if not self.heartbeat_s < self.lease_ttl_s / 2:
            raise ValueError(
                f"fleet: need heartbeat_s < lease_ttl_s / 2, not {self.heartbeat_s} >= {self.lease_ttl_s / 2}"
            )
        return self
