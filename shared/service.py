"""What every service process shares: settings, clock, metrics, broker, streams, and /metrics + /health over HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import nats
import nats.errors
from faststream.asgi import AsgiFastStream, AsgiResponse, get
from faststream.asgi.handlers import GetHandler
from faststream.asgi.types import Scope
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from prometheus_client import make_asgi_app
from pydantic import SecretStr
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from shared.bus import build_broker, faststream_logger, nats_connect_options
from shared.clock import Clock
from shared.consumer_lag import poll_consumer_lag
from shared.contract import ToleratesUnknownFields
from shared.live_mode import refuse_unsafe_live_start
from shared.metrics import BusMetrics
from shared.settings import Settings, without_credentials
from shared.streams import wait_for_streams
from shared.subjects import Subjects

# a service waiting for NATS or Redis tries again after 0.5, 1, 2, 4 ... s, never more than 15 s apart (a server
# that comes back is found within 15 s; a long outage costs one log line per 15 s)
WAIT_FIRST_S = 0.5
WAIT_MAX_S = 15.0
NATS_CONNECT_TIMEOUT_S = 2.0
HEALTH_PING_TIMEOUT_S = 2.0

T = TypeVar("T")


@dataclass
class ServiceContext:
    """The adapters a service is built from; tests build one around private servers and a simulated clock."""

    name: str
    settings: Settings
    clock: Clock
    metrics: BusMetrics = field(init=False)
    broker: NatsBroker = field(init=False)
    # each returns why the service is unhealthy, or None; /health runs them after the broker's own check
    health_checks: list[Callable[[], str | None]] = field(init=False, default_factory=list)
    unknown_fields_seen: set[tuple[str, str]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.metrics = BusMetrics(self.name)
        self.broker = build_broker(self.settings, self.name, self.metrics, self.clock)

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Settings | None = None,
        clock: Clock | None = None,
        *,
        secrets: Mapping[str, SecretStr | None] | None = None,
        public_urls: Mapping[str, str | None] | None = None,
    ) -> ServiceContext:
        """What a service's entry point starts from; in live mode it first refuses development secrets (the
        shared ones and the service's own `secrets`) and cleartext `public_urls`, one line naming the variable."""
        settings = settings or Settings()
        refuse_unsafe_live_start(settings, secrets, public_urls)
        return cls(name, settings, clock or settings.make_clock())

    @property
    def subjects(self) -> Subjects:
        return self.settings.subjects

    @property
    def log(self) -> logging.Logger:
        return logging.getLogger(f"fleetpilot.{self.name}")

    async def wait_for_nats(self) -> None:
        """Until a NATS server answers: a service started before its broker logs where it looks and retries with
        backoff, while /health says why it is not ready and SIGTERM still stops it (the wait runs after the
        HTTP server is up, inside a task uvicorn's shutdown cancels)."""
        url = self.settings.nats_url_for_humans
        retrying = self._waiting(f"waiting for NATS at {url}", is_unreachable, describe_nats_error)
        try:
            async for attempt in retrying:
                with attempt:
                    probe = await connect_once(self.settings)
                    await probe.close()
        except nats.errors.Error as error:  # refused credentials: waiting cannot help, the service stops
            self.log.error("NATS at %s refused this service: %s (FLEETPILOT_NATS_USER and its password?)", url, error)
            raise
        self.log.info("NATS at %s answers", url)

    def count_unknown_fields(self, message: ToleratesUnknownFields) -> None:
        """A job-system message's fields this FleetPilot does not know: ignored, counted, and logged the first
        time each is seen (a newer job system sends them on every event: one line, not one per event)."""
        unknown = message.unknown_fields()
        if not unknown:
            return
        kind = type(message).__name__
        self.metrics.unknown_fields.labels(self.name, kind).inc(len(unknown))
        if new := [name for name in unknown if (kind, name) not in self.unknown_fields_seen]:
            self.unknown_fields_seen.update((kind, name) for name in new)
            self.log.info("%s: ignoring field(s) %s, unknown to this FleetPilot (counted)", kind, ", ".join(new))

    def unhealthy_reasons(self, connected: bool) -> list[str]:
        reasons = [] if connected else [f"not connected to NATS at {self.settings.nats_url_for_humans}"]
        return reasons + [reason for check in self.health_checks if (reason := check()) is not None]

    async def read_redis(self, read: Callable[[], Awaitable[T]], what: str) -> T:
        """`read()` once Redis answers: a service that must restore its state before its first message, started
        before its Redis (compose and k8s start them together), logs where it looks and retries with backoff
        while /health says why it is not ready; it exited with a traceback. A refused password is raised."""
        waiting = f"waiting for Redis at {without_credentials(self.settings.redis_url)} to read {what}"

        def why_not_ready() -> str:
            return waiting

        retrying = self._waiting(waiting, redis_unreachable, lambda error: str(error or "no answer"))
        self.health_checks.append(why_not_ready)
        try:
            async for attempt in retrying:
                with attempt:
                    found = await read()
        finally:
            self.health_checks.remove(why_not_ready)
        return found

    def _waiting(
        self,
        waiting: str,
        worth_waiting: Callable[[BaseException], bool],
        describe: Callable[[BaseException | None], str],
    ) -> AsyncRetrying:
        """Tries with backoff while the error is `worth_waiting`, one warning line per try; any other error is
        raised at once."""

        def report(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            delay_s = state.next_action.sleep if state.next_action else 0.0
            self.log.warning("%s (%s); next try in %.1f s", waiting, describe(error), delay_s)

        return AsyncRetrying(
            wait=wait_exponential(multiplier=WAIT_FIRST_S, max=WAIT_MAX_S),
            retry=retry_if_exception(worth_waiting),
            before_sleep=report,
        )

    async def bind_streams(self) -> None:
        """Wait until the streams exist: they are created by the admin step (`fleetpilot streams ensure`),
        never by a service, whose NATS user may not create, update or purge one.

        Runs before the subscribers start (they bind to streams with declare=False), so it connects first.
        """
        await self.broker.connect()

        def report(missing: list[str]) -> None:
            self.log.warning("waiting for streams %s: run `fleetpilot streams ensure`", ", ".join(missing))

        await wait_for_streams(self.broker.config.connection_state.stream, self.subjects, on_missing=report)


async def connect_once(settings: Settings) -> NatsClient:
    """A connection that tries each server once, quietly (NoServersError when none answers): what a person at a
    terminal, or a service waiting for its broker, wants instead of nats-py's endless tries and tracebacks."""

    async def quiet(error: Exception) -> None:
        """nats-py logs each failed try with a traceback; the caller says it once, in one line."""

    return await nats.connect(
        **nats_connect_options(settings),
        connect_timeout=NATS_CONNECT_TIMEOUT_S,
        allow_reconnect=False,
        max_reconnect_attempts=1,  # nats-py reads 0 as "no limit"; 1 is one pass over the servers
        reconnect_time_wait=0.1,
        error_cb=quiet,
    )


def redis_unreachable(error: BaseException) -> bool:
    """Worth waiting for: Redis did not answer. A refused password or command is not (it will not change)."""
    if isinstance(error, AuthenticationError | AuthorizationError):
        return False
    return isinstance(error, RedisConnectionError | RedisTimeoutError | OSError)


def is_unreachable(error: BaseException) -> bool:
    """Worth waiting for: no server answered. A refusal of the credentials is not (it will not change)."""
    if "authorization" in str(error).lower() or "authentication" in str(error).lower():
        return False
    return isinstance(error, OSError | TimeoutError | nats.errors.Error)


def describe_nats_error(error: BaseException | None) -> str:
    if error is None:
        return "no answer"
    if isinstance(error, nats.errors.NoServersError | ConnectionRefusedError):
        return "connection refused"
    return str(error) or type(error).__name__


class ServiceApp(AsgiFastStream):
    """The broker starts once NATS answers and the streams exist, after the HTTP server is up: until then
    /health says why the service is not ready, and a SIGTERM or Ctrl-C stops it at once."""

    def __init__(self, ctx: ServiceContext) -> None:
        super().__init__(
            ctx.broker,
            asgi_routes=[("/metrics", make_asgi_app(ctx.metrics.registry)), ("/health", health(ctx))],
            logger=faststream_logger(ctx.name),
        )
        self.ctx = ctx
        self.consumer_lag: list[asyncio.Task[None]] = []
        # what a service reads back from Redis before it takes its first message: run once the HTTP server is up
        # (a wait for Redis shows on /health, and SIGTERM stops it), not in an on_startup hook, which blocks it
        self.restores: list[Callable[[], Awaitable[None]]] = []
        self.after_startup(self.report_consumer_lag)
        self.on_shutdown(self.stop_reporting_consumer_lag)

    async def report_consumer_lag(self) -> None:
        """The backlog of each durable this service pulls from, as gauges (shared/consumer_lag.py)."""
        poller = poll_consumer_lag(self.ctx.broker, self.ctx.metrics)
        self.consumer_lag.append(asyncio.create_task(poller, name="consumer-lag"))

    async def stop_reporting_consumer_lag(self) -> None:
        await stop_tasks(self.consumer_lag)

    # set by the process entry point: how to stop the whole process when starting cannot succeed
    stop_process: Callable[[], None] | None = None
    fatal_error: BaseException | None = None

    async def _start_broker(self) -> None:
        try:
            await self.ctx.wait_for_nats()
        except nats.errors.Error as error:  # the credentials were refused (already said in the log)
            await self._stop_for(error)
            return
        await self.ctx.bind_streams()
        try:
            for restore in self.restores:
                await restore()
        except Exception as error:  # waiting cannot help (a refused Redis password): the service stops
            self.ctx.log.error("cannot restore %s's saved state: %s: %s", self.ctx.name, type(error).__name__, error)
            await self._stop_for(error)
            return
        await super()._start_broker()

    async def _stop_for(self, error: Exception) -> None:
        """Starting cannot succeed: stop the whole process (re-raised where no entry point set `stop_process`).
        After start-up this runs in the background: left alone, the service would serve /health healthy with no
        subscriber at all."""
        if self.stop_process is None:
            raise error
        self.fatal_error = error
        self.stop_process()
        await asyncio.Event().wait()  # no subscriber, no timer loop: the shutdown under way cancels this


def health(ctx: ServiceContext) -> GetHandler:
    """200 when the broker is connected and every check passes; else 503 with the reasons, as JSON."""

    @get(include_in_schema=False)
    async def respond(scope: Scope) -> AsgiResponse:
        reasons = ctx.unhealthy_reasons(await ctx.broker.ping(HEALTH_PING_TIMEOUT_S))
        body = json.dumps({"healthy": not reasons, "reasons": reasons}).encode()
        return AsgiResponse(body, 503 if reasons else 200, headers={"content-type": "application/json"})

    return respond


def asgi_app(ctx: ServiceContext) -> ServiceApp:
    """The service as an ASGI app: the broker, plus /metrics (its own registry) and /health."""
    return ServiceApp(ctx)


async def stop_tasks(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until done: on Python 3.11 `asyncio.wait_for` (inside nats-py) can swallow a cancellation that
    lands as its inner call completes, and a service's timer loop would carry on into another sleep."""
    for task in tasks:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
        if not task.cancelled() and task.exception() is not None:
            logging.getLogger("fleetpilot.service").error("%s ended with %r", task.get_name(), task.exception())
