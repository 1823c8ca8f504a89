"""Building a service's NatsBroker: Prometheus and dead-letter middlewares, auth from settings, publishing.

Ack policy, chosen deliberately: FastStream's JetStream default (REJECT_ON_ERROR) terminates a message on
its first error, which loses it. Our subscribers use NACK_ON_ERROR, so a failing handler is retried up to
MAX_DELIVER times; the dead-letter middleware then parks it on `<prefix>.dlq.<service>` and acks it. A
message that cannot be valid (bad JSON, wrong shape) is parked at once: redelivering it cannot help.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import fast_depends.exceptions
import pydantic
from faststream import AckPolicy
from faststream._internal.middlewares import BaseMiddleware
from faststream.exceptions import HandlerException
from faststream.nats import NatsBroker, PullSub
from faststream.nats.message import NatsMessage
from faststream.nats.prometheus import NatsPrometheusMiddleware
from faststream.nats.security import NatsSecurity, NatsUserPassword
from nats.aio.msg import Msg

from shared.clock import Clock
from shared.contract import DeadLetter, DeadLetterReason, Event
from shared.metrics import BusMetrics
from shared.settings import Settings
from shared.streams import DLQ, MAX_DELIVER, StreamSpec, bound_stream, durable_consumer

log = logging.getLogger("fleetpilot.bus")

# Subscribers on JetStream streams use this; see the module docstring for why.
JETSTREAM_ACK_POLICY = AckPolicy.NACK_ON_ERROR

PublishRaw = Callable[[str, bytes], Awaitable[Any]]

_INVALID_MESSAGE_ERRORS: tuple[type[BaseException], ...] = (
    pydantic.ValidationError,
    fast_depends.exceptions.ValidationError,
    json.JSONDecodeError,
    UnicodeDecodeError,
)


# Seconds before the 2nd, 3rd, ... delivery of a message whose handler failed. An immediate nak spent all
# MAX_DELIVER deliveries within milliseconds, so a Redis restart of a few seconds dead-lettered every message
# that arrived meanwhile (found by the fault suite); these give a dependency ~15 s to come back.
REDELIVERY_DELAYS_S = (1.0, 2.0, 4.0, 8.0)


def redelivery_delay_s(deliveries: int) -> float:
    return REDELIVERY_DELAYS_S[min(max(deliveries, 1), len(REDELIVERY_DELAYS_S)) - 1]


class ImplausibleInput(ValueError):
    """A message its schema accepts but no sender can mean (a queue depth beyond any job system): raised by a
    handler, it is dead-lettered at once with its reason, since redelivering it cannot help."""


def classify_failure(error: BaseException) -> DeadLetterReason:
    if isinstance(error, ImplausibleInput):
        return "implausible_input"
    return "invalid_message" if isinstance(error, _INVALID_MESSAGE_ERRORS) else "handler_failed"


def describe_error(error: BaseException) -> str:
    """Why a message was rejected, in plain words: each wrong field with the value it had and what was expected
    (`duration_s = 'four minutes': expected a valid number`), an implausible input's reason, or the error's type
    and text; capped for the envelope."""
    if isinstance(error, ImplausibleInput):
        return str(error)[:4000]
    text = problem_fields(error, limit=50) or f"{type(error).__name__}: {error}"
    return text[:4000]


def plain_problem(item: Any) -> str:
    """One pydantic problem as `field = value: expected ...`, without its documentation link."""
    field = ".".join(str(part) for part in item["loc"]) or "(the message)"
    got = item.get("input")
    value = f" = {got!r}" if isinstance(got, str | int | float | bool) or got is None else ""
    message = str(item["msg"])
    if item["type"] == "missing":
        return f"{field}: missing, expected a value (required)"
    if item["type"] == "extra_forbidden":
        return f"{field}{value}: unknown field, expected only the fields of this message"
    if message.startswith("Input should be "):
        message = "expected " + message.removeprefix("Input should be ")
    return f"{field}{value}: {message[:1].lower()}{message[1:]}"


def problem_fields(error: BaseException, limit: int = 5) -> str:
    """`field = value: expected ...` for each field of a message that did not validate (at most `limit`), so the
    dead letter and its log line name them; "" for any other error."""
    inner = getattr(error, "original_error", error)  # fast_depends wraps pydantic's error
    if not isinstance(inner, pydantic.ValidationError):
        return ""
    return "; ".join(plain_problem(item)[:200] for item in inner.errors()[:limit])


def delivery_count(raw: Msg) -> int | None:
    """How many times JetStream delivered this message; None for core NATS."""
    try:
        return int(raw.metadata.num_delivered)
    except Exception:  # core NATS messages have no JetStream metadata
        return None


def unread_after(raw: Msg) -> int:
    """How many messages JetStream still holds for this consumer after this one; 0 for core NATS."""
    try:
        return int(raw.metadata.num_pending)
    except Exception:  # core NATS messages have no JetStream metadata
        return 0


class DeadLetterMiddleware:
    """Factory FastStream calls per message; holds what the per-message scope needs."""

    def __init__(self, service: str, dead_letter_subject: str, metrics: BusMetrics, clock: Clock) -> None:
        self.service = service
        self.dead_letter_subject = dead_letter_subject
        self.metrics = metrics
        self.clock = clock
        self.publish_raw: PublishRaw | None = None

    def __call__(self, msg: Any, /, *, context: Any) -> _DeadLetterScope:
        return _DeadLetterScope(msg, context=context, owner=self)

    async def park(self, raw: Msg, reason: DeadLetterReason, error: BaseException, deliveries: int) -> None:
        if self.publish_raw is None:
            raise RuntimeError("dead-letter middleware used before its broker was built")
        data = bytes(raw.data or b"")
        letter = DeadLetter(
            occurred_at=self.clock.now(),
            source=self.service,
            service=self.service,
            reason=reason,
            error=describe_error(error),
            original_subject=raw.subject,
            payload=data.decode("utf-8", errors="replace"),
            payload_base64=base64.b64encode(data).decode("ascii"),
            headers={k: str(v) for k, v in (raw.headers or {}).items()},
            delivery_count=max(1, deliveries),
        )
        await self.publish_raw(self.dead_letter_subject, letter.model_dump_json().encode())
        self.metrics.dead_letters.labels(self.service, reason).inc()
        log.error(
            "dead-lettered message from %s (%s, delivery %d): %s",
            raw.subject,
            reason,
            deliveries,
            problem_fields(error) or (letter.error.splitlines()[0] if letter.error else ""),
        )


class _DeadLetterScope(BaseMiddleware):
    def __init__(self, msg: Any, /, *, context: Any, owner: DeadLetterMiddleware) -> None:
        super().__init__(msg, context=context)
        self.owner = owner

    async def after_processed(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> bool | None:
        if exc_val is None or not isinstance(exc_val, Exception) or isinstance(exc_val, HandlerException):
            return False
        raw = self.msg
        if not isinstance(raw, Msg):
            return False
        reason = classify_failure(exc_val)
        deliveries = delivery_count(raw)
        if reason == "handler_failed" and deliveries is not None and deliveries < MAX_DELIVER:
            log.warning("handler failed on %s (delivery %d of %d): %r", raw.subject, deliveries, MAX_DELIVER, exc_val)
            # NACK_ON_ERROR: JetStream redelivers, but after a pause (the ack middleware's own nak finds it done)
            with contextlib.suppress(Exception):  # broker away: it redelivers after the ack wait instead
                await raw.nak(delay=redelivery_delay_s(deliveries))
            return False
        await self.owner.park(raw, reason, exc_val, deliveries or 1)
        return True  # handled: the ack middleware acknowledges it


# nats-py's default reply prefix; with a user, each user gets `_INBOX_<user>` and deploy/nats/auth.conf lets a
# user subscribe to its own prefix alone, so no user can read the replies (API answers, pulled messages, request
# replies) meant for another.
DEFAULT_INBOX_PREFIX = "_INBOX"


def inbox_prefix(settings: Settings) -> str:
    """Where this connection's replies arrive: `_INBOX_<user>` for a NATS user, nats-py's `_INBOX` otherwise."""
    return f"{DEFAULT_INBOX_PREFIX}_{settings.nats_user}" if settings.nats_user else DEFAULT_INBOX_PREFIX


def is_inbox(subject: str) -> bool:
    """Whether `subject` is a requester's inbox (`_INBOX.…` or `_INBOX_<user>.…`), the only place a reply may go."""
    head, dot, rest = subject.partition(".")
    return bool(dot and rest) and (head == DEFAULT_INBOX_PREFIX or head.startswith(f"{DEFAULT_INBOX_PREFIX}_"))


async def answer_request(broker: NatsBroker, metrics: BusMetrics, request: NatsMessage, answer: Event) -> None:
    """Reply to a core NATS request, only ever into an inbox.

    A requester chooses the reply subject: one that named `fp.cmd.provision.launch` or `fp.demand.signal` made
    the responder publish a fleet snapshot into the command stream or over the latest demand signal (security
    review, issue #24). deploy/nats/auth.conf lets responders publish to inboxes alone; this refuses, counts
    and logs the attempt before it reaches the server.
    """
    reply_to = request.reply_to
    if not reply_to:
        return  # a plain publish on a request subject: nobody waits for an answer
    if not is_inbox(reply_to):
        metrics.refused_replies.labels(metrics.service, request.raw_message.subject).inc()
        log.error("refused to answer %s into %r: a reply goes to an inbox only", request.raw_message.subject, reply_to)
        return
    await broker.publish(answer.model_dump_json().encode(), reply_to, headers={"content-type": "application/json"})


def nats_tls(settings: Settings) -> ssl.SSLContext | None:
    """TLS to NATS when a CA bundle is configured (the server's certificate is verified against it)."""
    return ssl.create_default_context(cafile=settings.nats_tls_ca_file) if settings.nats_tls_ca_file else None


def nats_security(settings: Settings) -> NatsSecurity | None:
    tls = nats_tls(settings)
    if settings.nats_user:
        password = settings.nats_password.get_secret_value() if settings.nats_password else ""
        return NatsUserPassword(
            username=settings.nats_user, password=password, ssl_context=tls, use_ssl=tls is not None
        )
    if tls is not None:
        return NatsSecurity(ssl_context=tls, use_ssl=True)
    return None


def nats_connect_options(settings: Settings) -> dict[str, Any]:
    """Options for a bare nats-py connection (CLI, benchmarks) with the same credentials as the services."""
    options: dict[str, Any] = {"servers": settings.nats_servers, "inbox_prefix": inbox_prefix(settings)}
    if settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password.get_secret_value() if settings.nats_password else ""
    if settings.nats_creds_file:
        options["user_credentials"] = settings.nats_creds_file
    if (tls := nats_tls(settings)) is not None:
        options["tls"] = tls
    return options


class QuietSupervisor(logging.Filter):
    """Drops two lines FastStream's task supervisor writes on every normal start, so an ERROR in the log is one:
    an INFO "callback for Task-N is being executed..." whenever a subscriber task ends, and an ERROR with a
    traceback for an empty pull. nats-py 2.16 ends an empty `fetch` with the builtin TimeoutError, where
    FastStream 0.7 expects nats.errors.TimeoutError (a subclass) and so only suppresses that; the supervisor
    restarts the pull at once, nothing is lost. Any other exception keeps its line and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("callback for ") and message.endswith(" is being executed..."):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not (type(error) is TimeoutError and "raised an exception, retrying" in message)


def faststream_logger(service: str) -> logging.Logger:
    """FastStream's own lines through the process's logging (one format, no colour codes in a log file, the
    level of `fleetpilot run --log-level`) instead of its private coloured handlers on stdout."""
    logger = logging.getLogger(f"fleetpilot.{service}.faststream")
    if not any(isinstance(existing, QuietSupervisor) for existing in logger.filters):
        logger.addFilter(QuietSupervisor())
    return logger


def build_broker(settings: Settings, service: str, metrics: BusMetrics, clock: Clock) -> NatsBroker:
    """The one way a service gets a broker: same middlewares, same auth, no import-time globals."""
    dead_letters = DeadLetterMiddleware(service, settings.subjects.dead_letter(service), metrics, clock)
    extra: dict[str, Any] = {}
    if settings.nats_creds_file:
        extra["user_credentials"] = settings.nats_creds_file
    broker = NatsBroker(
        settings.nats_servers,
        name=f"fleetpilot-{service}",
        security=nats_security(settings),
        middlewares=[
            NatsPrometheusMiddleware(registry=metrics.registry, app_name=service, metrics_prefix="fleetpilot_bus"),
            dead_letters,
        ],
        inbox_prefix=inbox_prefix(settings),
        logger=faststream_logger(service),
        log_level=logging.DEBUG,  # "Received"/"Processed" per message: at INFO they were most of every log
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        graceful_timeout=10.0,
        **extra,
    )

    async def publish_raw(subject: str, payload: bytes) -> None:
        await broker.publish(payload, subject, stream=DLQ.name(settings.subjects), timeout=5.0)

    dead_letters.publish_raw = publish_raw
    return broker


def event_headers(event: Event) -> dict[str, str]:
    """JetStream de-duplicates on Nats-Msg-Id: a publish retried after a lost ack stays one event."""
    return {"Nats-Msg-Id": event.event_id, "content-type": "application/json"}


async def publish_event(broker: NatsBroker, subject: str, event: Event, *, stream: str | None) -> Any:
    """Publish a contract event; to JetStream (awaiting its ack) when `stream` is given, else core NATS."""
    return await broker.publish(
        event.model_dump_json().encode(),
        subject,
        headers=event_headers(event) if stream else {"content-type": "application/json"},
        stream=stream,
        timeout=5.0,
    )


def durable_pull(
    spec: StreamSpec,
    settings: Settings,
    durable: str,
    *,
    batch_size: int = 50,
    max_deliver: int = MAX_DELIVER,
) -> dict[str, Any]:
    """Subscriber options for a durable JetStream pull consumer with explicit acks after processing.

    Pull consumers share one durable across replicas (each message to one replica), unlike push+durable.
    """
    return {
        "stream": bound_stream(spec, settings.subjects),
        "durable": durable,
        "config": durable_consumer(durable, max_deliver=max_deliver),
        "pull_sub": PullSub(batch_size=batch_size, timeout=1.0),
        # FastStream gives a pull subscription nats-py's `_INBOX.` unless told, whatever the connection's prefix
        "inbox_prefix": f"{inbox_prefix(settings)}.".encode(),
        "ack_policy": JETSTREAM_ACK_POLICY,
    }
