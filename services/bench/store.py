"""Redis adapter for the meeting of requests and reports: pending requests, reports, and finished requests.

Reports are kept by the label their token proves, one per label ever: a host can fill its own machine's slot
once and no other, so what strangers can put in Redis is bounded by the machines we rented.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError
from redis.asyncio import Redis

from services.bench.collect import PendingGpuBench
from services.bench.report import SuiteReport

log = logging.getLogger(__name__)

# A finished request is remembered this long, so a redelivered request is not benchmarked twice.
DONE_TTL_S = 7 * 86_400
# A label's report is taken once: the mark outlives the report, so a replay after it expired is refused too.
LABEL_USED_TTL_S = DONE_TTL_S
# A report and its request arriving together both try to publish; the first to claim does. A claim that
# is never finished (a crash between claim and publish) lapses, and a redelivery or the sweep tries again.
CLAIM_TTL_S = 60


class BenchStore:
    def __init__(self, redis: Redis, prefix: str, report_ttl_s: float) -> None:
        self.redis = redis
        self.report_ttl_s = report_ttl_s
        self._pending_key = f"{prefix}:bench:pending"
        self._prefix = prefix

    def _report_key(self, label: str) -> str:
        return f"{self._prefix}:bench:report:{label}"

    def _label_used_key(self, label: str) -> str:
        return f"{self._prefix}:bench:label-used:{label}"

    def _done_key(self, request_event_id: str) -> str:
        return f"{self._prefix}:bench:done:{request_event_id}"

    def _claim_key(self, request_event_id: str) -> str:
        return f"{self._prefix}:bench:claim:{request_event_id}"

    async def put_report(self, label: str, report: SuiteReport) -> bool:
        """Keep the first report of `label`; False (nothing stored) when this label has filed one already."""
        if not await self.redis.set(self._label_used_key(label), "1", nx=True, ex=LABEL_USED_TTL_S):
            return False
        payload = report.model_dump_json(by_alias=True)
        await self.redis.set(self._report_key(label), payload, ex=round(self.report_ttl_s))
        return True

    async def report(self, label: str) -> SuiteReport | None:
        """The stored report of `label`; None when there is none or it no longer reads as a report (one stored by
        an older, looser version): a host's report that cannot be read is no report, never a stuck sweep."""
        raw = await self.redis.get(self._report_key(label))
        if raw is None:
            return None
        try:
            return SuiteReport.model_validate_json(raw)
        except ValidationError as error:
            log.warning("bench: the stored report of %s no longer reads as a report, taken as none: %s", label,
                        str(error).splitlines()[0])  # fmt: skip
            return None

    async def add_pending(self, bench: PendingGpuBench) -> None:
        await self.redis.hset(self._pending_key, str(bench.instance_id), bench.model_dump_json())

    async def pending(self, instance_id: int) -> PendingGpuBench | None:
        raw = await self.redis.hget(self._pending_key, str(instance_id))
        return None if raw is None else PendingGpuBench.model_validate_json(raw)

    async def all_pending(self) -> list[PendingGpuBench]:
        raw = await self.redis.hgetall(self._pending_key)
        return [PendingGpuBench.model_validate_json(value) for value in raw.values()]

    async def claim(self, request_event_id: str) -> bool:
        """True for the one caller that may publish this request's result now."""
        return bool(await self.redis.set(self._claim_key(request_event_id), "1", nx=True, ex=CLAIM_TTL_S))

    async def release(self, request_event_id: str) -> None:
        """Give up a claim without finishing: the request goes on waiting, and its report may claim it later."""
        await self.redis.delete(self._claim_key(request_event_id))

    async def is_done(self, request_event_id: str) -> bool:
        return bool(await self.redis.exists(self._done_key(request_event_id)))

    async def finish(self, request_event_id: str, instance_id: int | None = None) -> None:
        """The request has its result: forget it as pending and remember it as done (its report stays)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self._done_key(request_event_id), "1", ex=DONE_TTL_S)
            if instance_id is not None:
                pipe.hdel(self._pending_key, str(instance_id))
            await pipe.execute()
