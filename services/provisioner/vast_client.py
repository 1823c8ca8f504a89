"""The vast.ai REST client: timeouts on every call, bounded retries with spacing, errors as typed exceptions.

vast.ai sends no Retry-After with its 429s, so the client spaces each endpoint's calls by the documented
interval and waits at least that long before retrying one. Creating an instance is not idempotent: a create
that may have reached vast (a timeout after sending, a 5xx) is never retried here; it raises `AmbiguousCreate`
so the caller can look for the instance by label first.

The API key travels only in the Authorization header (never the URL, which httpx logs) and appears in no
message this module writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Generator
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, SecretStr, ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from services.provisioner.metrics import VastApiMetrics
from services.provisioner.settings import ProvisionerSettings
from services.provisioner.vast_models import ChargeListing, InstanceListing, VastCharge, VastInstance, VastOffer
from shared.clock import Clock

V1_PAGE_SIZE = 25  # v1 caps a page at 25 rows
MAX_LIST_PAGES = 400  # 10 000 instances: more means a paging loop, not an account
MAX_RETRY_AFTER_S = 60.0  # the official client waits out at most this much inline (client.py)

ModelT = TypeVar("ModelT", bound=BaseModel)

log = logging.getLogger("fleetpilot.provisioner.vast")


# ---- errors -------------------------------------------------------------------------------------------------
class VastError(Exception):
    """A vast.ai call failed. `endpoint` names the call; `status` is the HTTP status when there was one."""

    outcome = "error"

    def __init__(self, endpoint: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"vast.ai {endpoint}: {message}")
        self.endpoint = endpoint
        self.status = status


class VastAuthError(VastError):
    """The key was refused (401/403, or the 404 with `auth_error` vast often sends). Never retried."""

    outcome = "auth_error"


class OfferGone(VastError):
    """The offer was rented by someone else (or withdrawn) between search and rent."""

    outcome = "offer_gone"


class InstanceNotFound(VastError):
    outcome = "not_found"


class VastEndpointGone(VastError):
    """410 deprecated_endpoint (the v0 instance list): an error, never an empty answer."""

    outcome = "endpoint_gone"


class VastRequestError(VastError):
    """vast rejected the request itself (another 4xx): retrying the same request cannot help."""

    outcome = "client_error"


class UnsendableRequest(VastRequestError, ValueError):
    """The client would not send this request (a bid of $0 or less, a price inside the body): nothing reached vast.
    A vast error, so an operation answers it like any refused request (a plain ValueError from a bid rounded to $0
    escaped the launch handler), and a ValueError, as a caller's bad argument is."""

    outcome = "not_sent"


class BidTooLow(VastRequestError):
    """`invalid_price`: the bid is below the machine's `min_bid` (or outside vast's range)."""

    outcome = "bid_too_low"


class TransientVastError(VastError):
    """Worth retrying. `maybe_applied`: the request may have reached vast and acted (unsafe to repeat a create)."""

    maybe_applied = True


class RateLimited(TransientVastError):
    """`retry_after_s`: the server's Retry-After, when it sends one (the official client honours it)."""

    outcome = "rate_limited"
    maybe_applied = False  # a 429 is refused before anything happens

    def __init__(self, endpoint: str, message: str, *, status: int | None = None, retry_after_s: float | None = None):
        super().__init__(endpoint, message, status=status)
        self.retry_after_s = retry_after_s


class VastServerError(TransientVastError):
    outcome = "server_error"


class VastUnreachable(TransientVastError):
    outcome = "timeout"

    def __init__(self, endpoint: str, message: str, *, maybe_applied: bool) -> None:
        super().__init__(endpoint, message)
        self.maybe_applied = maybe_applied
        self.outcome = "timeout" if maybe_applied else "connection_error"


class AmbiguousCreate(VastError):
    """The create may or may not have happened: list instances and look for its label before trying again."""

    outcome = "ambiguous"


# ---- the client -----------------------------------------------------------------------------------------------
class _BearerAuth(httpx.Auth):
    def __init__(self, api_key: SecretStr) -> None:
        self._api_key = api_key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        yield request

    def __repr__(self) -> str:
        return "_BearerAuth(**********)"


class VastClient:
    def __init__(
        self,
        base_url: str,
        api_key: SecretStr,
        *,
        clock: Clock,
        settings: ProvisionerSettings,
        metrics: VastApiMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._clock = clock
        self._settings = settings
        self._metrics = metrics
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            auth=_BearerAuth(api_key),
            timeout=httpx.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
            headers={"User-Agent": "fleetpilot-provisioner/0.1", "Accept": "application/json"},
            transport=transport,
        )
        self._last_sent: dict[str, float] = {}  # endpoint → clock time (s) of the last request sent
        self._endpoint_locks: dict[str, asyncio.Lock] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---- the API ----------------------------------------------------------------------------------------
    async def search_offers(self, query: dict[str, Any]) -> list[VastOffer]:
        body = await self._call("search", "POST", "/api/v0/bundles/", json_body=query)
        offers, _ = self._readable(VastOffer, _field(body, "offers", "search", list), "search")
        return offers

    async def list_charges(self, since_s: float) -> ChargeListing:
        """What the account was charged since `since_s` (epoch s): `GET /api/v0/invoices?type=charge`. A row that
        cannot be read is skipped (logged, counted) and counted in the listing too: its amount is unknown."""
        params = {"type": "charge", "select_filters": json.dumps({"timestamp": {"gte": since_s}})}
        body = await self._call("invoices", "GET", "/api/v0/invoices", params=params)
        rows = body.get("invoices", body.get("results")) if isinstance(body, dict) else body
        if not isinstance(rows, list):
            raise VastError("invoices", f"expected a list of charges, got {type(body).__name__}")
        charges, _ = self._readable(VastCharge, rows, "invoices")
        return ChargeListing(charges, unreadable_rows=len(rows) - len(charges))

    async def create_instance(
        self, offer_id: int, request: dict[str, Any], *, bid_usd_per_h: float | None = None
    ) -> int:
        """Rent an offer; returns the new instance id. With `bid_usd_per_h` the instance is interruptible at that
        bid (vast's `price`); without it, on-demand, whatever the search asked for: vast rents a create without a
        price on-demand, so a bid is only ever this argument. Raises OfferGone, BidTooLow, AmbiguousCreate, ..."""
        if "price" in request:
            raise UnsendableRequest(
                "create", "request: carries 'price'; pass the bid as bid_usd_per_h so that a bid is never implicit"
            )
        if bid_usd_per_h is not None:
            if not bid_usd_per_h > 0:
                raise UnsendableRequest("create", f"bid_usd_per_h: expected a positive $/h, got {bid_usd_per_h!r}")
            request = {**request, "price": bid_usd_per_h}
        body = await self._call("create", "PUT", f"/api/v0/asks/{offer_id}/", json_body=request, idempotent=False)
        new_contract = body.get("new_contract") if isinstance(body, dict) else None
        if not isinstance(new_contract, int) or isinstance(new_contract, bool):
            # vast said yes but not to what: the instance may exist, so this is ambiguous, not a failure
            raise AmbiguousCreate("create", f"no new_contract in a successful answer for offer {offer_id}")
        return new_contract

    async def list_instances(self, select_filters: dict[str, Any] | None = None) -> InstanceListing:
        """Every instance on the account (or those matching `select_filters`), paging through
        `GET /api/v1/instances/`. Any failure raises: a failed list never looks like an empty one. A row
        that cannot be read is skipped (logged, counted) and its id, when it has one, kept as unreadable."""
        instances: dict[int, VastInstance] = {}
        unreadable: set[int] = set()
        params: dict[str, str] = {
            "select_filters": json.dumps(select_filters or {}),
            "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
            "limit": str(V1_PAGE_SIZE),
        }
        for _ in range(MAX_LIST_PAGES):
            body = await self._call("list_v1", "GET", "/api/v1/instances/", params=params)
            rows, skipped_ids = self._readable(VastInstance, _field(body, "instances", "list_v1", list), "list_v1")
            for instance in rows:
                instances[instance.id] = instance  # a row seen on two pages (the list moved) counts once
            unreadable |= skipped_ids
            next_token = body.get("next_token")
            if not next_token:
                return InstanceListing(list(instances.values()), frozenset(unreadable - instances.keys()))
            params = {**params, "after_token": str(next_token)}
        raise VastServerError("list_v1", f"still paging after {MAX_LIST_PAGES} pages")

    async def list_instances_v0(self) -> InstanceListing:
        """The deprecated v0 list, for accounts not yet moved. A 410 raises VastEndpointGone."""
        body = await self._call("list_v0", "GET", "/api/v0/instances/", params={"owner": "me"})
        rows, skipped_ids = self._readable(VastInstance, _field(body, "instances", "list_v0", list), "list_v0")
        return InstanceListing(rows, skipped_ids)

    async def show_instance(self, instance_id: int) -> VastInstance | None:
        body = await self._call("show", "GET", f"/api/v0/instances/{instance_id}/", params={"owner": "me"})
        row = body.get("instances") if isinstance(body, dict) else None
        return None if row is None else _parse(VastInstance, row, "show")

    async def set_state(self, instance_id: int, state: str) -> None:
        await self._call("manage", "PUT", f"/api/v0/instances/{instance_id}/", json_body={"state": state})

    async def stop_instance(self, instance_id: int) -> None:
        """Stop: the GPU is released, the disk (image, data) kept and still billed as storage."""
        await self.set_state(instance_id, "stopped")

    async def start_instance(self, instance_id: int) -> None:
        """Start a stopped instance. vast accepts it at once, but the instance may wait in "scheduling" (listed
        `stopped`, meant to run) for as long as someone else holds its GPU: watch the list, do not trust this."""
        await self.set_state(instance_id, "running")

    async def change_bid(self, instance_id: int, bid_usd_per_h: float) -> None:
        """A new bid for an interruptible instance (`vastai change bid`); an on-demand one answers 400."""
        if not bid_usd_per_h > 0:
            raise UnsendableRequest("bid_price", f"bid_usd_per_h: expected a positive $/h, got {bid_usd_per_h!r}")
        body = {"client_id": "me", "price": bid_usd_per_h}
        await self._call("bid_price", "PUT", f"/api/v0/instances/bid_price/{instance_id}/", json_body=body)

    async def set_label(self, instance_id: int, label: str) -> None:
        await self._call("manage", "PUT", f"/api/v0/instances/{instance_id}/", json_body={"label": label})

    async def destroy_instance(self, instance_id: int) -> None:
        await self._call("destroy", "DELETE", f"/api/v0/instances/{instance_id}/", json_body={})

    # ---- one call, retried ---------------------------------------------------------------------------------
    async def _call(
        self,
        endpoint: str,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> Any:
        def worth_retrying(error: BaseException) -> bool:
            return isinstance(error, TransientVastError) and (idempotent or not error.maybe_applied)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._settings.max_attempts),
            wait=self._wait_before_retry(endpoint),
            retry=retry_if_exception(worth_retrying),
            sleep=self._clock.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(endpoint, method, path, json_body=json_body, params=params)
        except TransientVastError as error:
            if not idempotent and error.maybe_applied:
                raise AmbiguousCreate(endpoint, f"the request may have been applied ({error})") from None
            raise
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    def _wait_before_retry(self, endpoint: str) -> Any:
        settings = self._settings

        def wait(state: RetryCallState) -> float:
            backoff_s = min(settings.backoff_max_s, settings.backoff_initial_s * 2 ** (state.attempt_number - 1))
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, RateLimited):
                # the documented interval, or longer when vast says how long (capped like any backoff)
                server_s = min(error.retry_after_s or 0.0, MAX_RETRY_AFTER_S)
                return max(backoff_s, settings.rate_limited_wait_s.get(endpoint, 1.0), server_s)
            return backoff_s

        return wait

    async def _once(
        self, endpoint: str, method: str, path: str, *, json_body: Any, params: dict[str, str] | None
    ) -> Any:
        async with self._spaced(endpoint):
            started = time.perf_counter()  # latency is a measurement of wall time, not simulated time
            try:
                response = await self._http.request(method, path, json=json_body, params=params)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
                self._observe(endpoint, "connection_error", None)
                raise VastUnreachable(
                    endpoint, f"cannot connect ({type(error).__name__})", maybe_applied=False
                ) from None
            except httpx.TimeoutException as error:
                self._observe(endpoint, "timeout", time.perf_counter() - started)
                raise VastUnreachable(
                    endpoint, f"no answer in time ({type(error).__name__})", maybe_applied=True
                ) from None
            except httpx.TransportError as error:
                self._observe(endpoint, "connection_error", None)
                raise VastUnreachable(
                    endpoint, f"connection lost ({type(error).__name__})", maybe_applied=True
                ) from None
            latency_s = time.perf_counter() - started
        try:
            body = _classify(endpoint, response)
        except VastError as error:
            self._observe(endpoint, error.outcome, latency_s)
            raise
        self._observe(endpoint, "ok", latency_s)
        return body

    @contextlib.asynccontextmanager
    async def _spaced(self, endpoint: str) -> AsyncIterator[None]:
        """The endpoint's turn: one request in flight per endpoint, each sent at least its spacing after the last."""
        lock = self._endpoint_locks.setdefault(endpoint, asyncio.Lock())
        async with lock:
            spacing_s = self._settings.spacing_s.get(endpoint, 0.0)
            last = self._last_sent.get(endpoint)
            if last is not None and spacing_s > 0:
                wait_s = last + spacing_s - self._clock.now().timestamp()
                if wait_s > 0:
                    await self._clock.sleep(wait_s)
            self._last_sent[endpoint] = self._clock.now().timestamp()
            yield

    def _readable(self, model: type[ModelT], rows: list[Any], endpoint: str) -> tuple[list[ModelT], frozenset[int]]:
        """The rows that validate; each other one is logged (id and the first problem) and counted, never fatal.
        Also returns the ids of the skipped rows that had one."""
        readable: list[ModelT] = []
        skipped_ids: set[int] = set()
        for row in rows:
            try:
                readable.append(model.model_validate(row))
            except ValidationError as error:
                row_id = row.get("id") if isinstance(row, dict) else None
                if isinstance(row_id, int) and not isinstance(row_id, bool):
                    skipped_ids.add(row_id)
                log.warning(
                    "vast.ai %s: skipped an unreadable %s row (id %r): %s",
                    endpoint, model.__name__, row_id, _first_problem(error),
                )  # fmt: skip
                if self._metrics is not None:
                    self._metrics.rows_skipped.labels(endpoint).inc()
        return readable, frozenset(skipped_ids)

    def _observe(self, endpoint: str, outcome: str, latency_s: float | None) -> None:
        if self._metrics is not None:
            self._metrics.observe(endpoint, outcome, latency_s)


def _classify(endpoint: str, response: httpx.Response) -> Any:
    """The JSON body of a success, or the typed error for everything else."""
    status = response.status_code
    body: Any = None
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    code = body.get("error") if isinstance(body, dict) else None
    detail = _detail(body, response)
    if status < 400:
        if body is None:
            raise VastServerError(endpoint, f"HTTP {status} with a body that is not JSON", status=status)
        return body
    if status in (401, 403) or code == "auth_error":
        raise VastAuthError(endpoint, f"the API key was refused (HTTP {status}: {detail})", status=status)
    if status == 429:
        retry_after_s = _retry_after_s(response)
        raise RateLimited(endpoint, f"rate limited (HTTP 429: {detail})", status=status, retry_after_s=retry_after_s)
    if status >= 500:
        raise VastServerError(endpoint, f"HTTP {status}: {detail}", status=status)
    if code == "no_such_ask" or (endpoint == "create" and status in (404, 410)):
        raise OfferGone(endpoint, f"offer no longer available (HTTP {status}: {detail})", status=status)
    if code == "no_such_instance" or (status == 404 and endpoint in ("show", "manage", "destroy", "bid_price")):
        raise InstanceNotFound(endpoint, f"no such instance (HTTP {status}: {detail})", status=status)
    if status == 410:
        raise VastEndpointGone(endpoint, f"endpoint retired (HTTP 410: {detail})", status=status)
    if code == "invalid_price":
        raise BidTooLow(endpoint, f"bid refused (HTTP {status}: {detail})", status=status)
    raise VastRequestError(endpoint, f"HTTP {status}: {detail}", status=status)


def _retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After in seconds; vast's docs say it sends none, yet its official client reads it (client.py
    `retry_delay`), so it is honoured when present. An HTTP-date or garbage reads as absent."""
    try:
        value = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def _detail(body: Any, response: httpx.Response) -> str:
    if isinstance(body, dict):
        parts = [str(body[k]) for k in ("error", "msg", "message", "detail") if body.get(k)]
        if parts:
            return " - ".join(parts)[:300]
    return response.text[:200].strip() or "no body"


def _field(body: Any, name: str, endpoint: str, kind: type) -> Any:
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind):
        raise VastServerError(endpoint, f"answer without a {name!r} {kind.__name__}")
    return value


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{'.'.join(map(str, first['loc'])) or 'row'}: {first['msg']}"


def _parse(model: type[ModelT], row: Any, endpoint: str) -> ModelT:
    try:
        return model.model_validate(row)
    except ValidationError as error:
        raise VastServerError(endpoint, f"unreadable {model.__name__}: {_first_problem(error)}") from None
