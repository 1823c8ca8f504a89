"""The vast.ai simulator over HTTP: the documented endpoints, auth, rate limits and faults around `VastWorld`.

Admin routes under `/_sim/` (no auth: a local control surface for tests, benchmarks and the demo) read the
ledger and the request log, script faults, flip API switches, move a simulated clock and reset the world.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from shared.clock import Clock, SimulatedClock
from sim.vast.query import QueryError, parse_search
from sim.vast.scenario import ApiBehaviour, Endpoint, Fate, Scenario
from sim.vast.world import CreateRequest, VastApiError, VastWorld

# what a demo or fault run's vast.log says: each rental, state change and destroy (never a key)
log = logging.getLogger("fleetpilot.sim.vast")

Handler = Callable[[Request], Awaitable[Response]]


class ApiCall(BaseModel):
    """One request the API received, as the request log keeps it (never the key)."""

    endpoint: Endpoint
    method: str
    path: str
    status: int
    at: datetime
    outcome: Literal["ok", "error", "auth_error", "rate_limited", "injected_error", "injected_slow"]


class ScriptedFault(BaseModel):
    """A fault for the next `count` requests to an endpoint (tests script them through `POST /_sim/faults`).

    kinds: `rate_limit` answers 429; `error` answers `status` without acting; `error_after` acts, then answers
    `status` (the client cannot tell whether it happened); `slow` acts, then answers after `delay_wall_s`; `late`
    acts and answers only after `delay_wall_s` (a request still acting when the client gave up on it);
    `take_offers` answers normally, then other customers rent `offer_ids` (an offer gone between search and rent).
    """

    endpoint: Endpoint
    kind: Literal["rate_limit", "error", "error_after", "slow", "late", "take_offers"]
    status: int = Field(default=503, ge=400, le=599)
    delay_wall_s: float = Field(default=2.0, ge=0)
    offer_ids: list[int] = Field(default_factory=list)
    count: int = Field(default=1, ge=1)
    retry_after_s: float | None = Field(default=None, ge=0, description="rate_limit: send this Retry-After")


class VastSimulator:
    """Holds the world, the API's behaviour and the request log; `app` is the ASGI application."""

    def __init__(self, scenario: Scenario, api_key: str, clock: Clock, *, start: datetime | None = None) -> None:
        if not api_key:
            raise ValueError("api_key: the simulator needs a key to check requests against")
        self._api_key = api_key
        self.clock = clock
        self.calls: list[ApiCall] = []
        self.faults: list[ScriptedFault] = []
        self._acting_late: set[asyncio.Future[Response]] = set()  # `late` acts outliving their request
        self.reset(scenario, start=start)
        self.app = Starlette(routes=self._routes())

    def reset(self, scenario: Scenario, *, start: datetime | None = None) -> None:
        self.scenario = scenario
        self.api: ApiBehaviour = scenario.api.model_copy(deep=True)
        self.world = VastWorld(scenario, start or self.clock.now())
        self.calls.clear()
        self.faults.clear()
        self._closed_until: dict[Endpoint, datetime] = {}
        self._fault_rng = random.Random(f"{scenario.seed}:faults")

    @property
    def late_acts_pending(self) -> int:
        """`late` faults whose act has not happened yet (whether or not their client still waits)."""
        return len(self._acting_late)

    def calls_to(self, endpoint: Endpoint) -> list[ApiCall]:
        return [call for call in self.calls if call.endpoint == endpoint]

    # ---- the request pipeline ----------------------------------------------------------------------------
    def _api(self, endpoint: Endpoint, handler: Handler) -> Handler:
        async def route(request: Request) -> Response:
            now = self.clock.now()
            response, outcome = await self._serve(endpoint, request, handler)
            self.calls.append(
                ApiCall(
                    endpoint=endpoint,
                    method=request.method,
                    path=request.url.path,
                    status=response.status_code,
                    at=now,
                    outcome=outcome,
                )
            )
            return response

        return route

    async def _serve(self, endpoint: Endpoint, request: Request, handler: Handler) -> tuple[Response, Any]:
        if not self._authorised(request):
            body = {"success": False, "error": "auth_error", "msg": "Invalid user key"}
            return JSONResponse(body, status_code=self.api.bad_key_status), "auth_error"
        if not self._admit(endpoint):
            return self._too_frequent(endpoint), "rate_limited"
        fault = self._next_fault(endpoint)
        if fault is not None and fault.kind == "rate_limit":
            response = self._too_frequent(endpoint)
            if fault.retry_after_s is not None:
                response.headers["Retry-After"] = f"{fault.retry_after_s:g}"
            return response, "rate_limited"
        if fault is not None and fault.kind == "error":
            return self._server_error(fault.status), "injected_error"
        if fault is None and self.api.server_error_rate and self._fault_rng.random() < self.api.server_error_rate:
            return self._server_error(self._fault_rng.choice(self.api.server_error_statuses)), "injected_error"
        if fault is not None and fault.kind == "late":
            return await self._act_late(fault.delay_wall_s, handler, request), "injected_slow"
        response = await self._act(handler, request)
        outcome = "ok" if response.status_code < 400 else "error"
        if fault is not None and fault.kind == "error_after":
            return self._server_error(fault.status), "injected_error"
        if fault is not None and fault.kind == "take_offers":
            for offer_id in fault.offer_ids:
                self.world.take_offer(offer_id)
        delay_wall_s = 0.0
        if fault is not None and fault.kind == "slow":
            delay_wall_s = fault.delay_wall_s
        elif self.api.slow_response_rate and self._fault_rng.random() < self.api.slow_response_rate:
            delay_wall_s = self.api.slow_response_wall_s
        if delay_wall_s:
            # wall time on purpose: this exercises the client's HTTP timeout, which is wall time
            await asyncio.sleep(delay_wall_s)
            outcome = "injected_slow"
        return response, outcome

    async def _act_late(self, delay_wall_s: float, handler: Handler, request: Request) -> Response:
        """Act after `delay_wall_s` (wall time, as for `slow`: the client's timeout is wall time), even when the
        client hung up meanwhile: a server goes on with a request whose caller stopped waiting."""
        await request.body()  # read now: the act needs it after the connection may be gone

        async def later() -> Response:
            await asyncio.sleep(delay_wall_s)
            return await self._act(handler, request)

        acting = asyncio.ensure_future(later())
        self._acting_late.add(acting)
        acting.add_done_callback(self._acting_late.discard)
        return await asyncio.shield(acting)

    async def _act(self, handler: Handler, request: Request) -> Response:
        try:
            return await handler(request)
        except VastApiError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except QueryError as error:
            return JSONResponse({"success": False, "error": "invalid_args", "msg": str(error)}, status_code=400)
        except pydantic.ValidationError as error:
            msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            return JSONResponse({"success": False, "error": "invalid_args", "msg": msg}, status_code=400)

    def _authorised(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        presented = header[7:].strip() if header.lower().startswith("bearer ") else request.query_params.get("api_key")
        return presented is not None and hmac.compare_digest(presented.encode(), self._api_key.encode())

    def _admit(self, endpoint: Endpoint) -> bool:
        """Per-endpoint minimum interval between accepted requests; a violation may close it for a penalty."""
        limit = self.api.rate_limits.get(endpoint)
        if limit is None:
            return True
        now = self.clock.now()
        closed_until = self._closed_until.get(endpoint)
        if closed_until is not None and now < closed_until:
            if limit.penalty_s:
                self._closed_until[endpoint] = max(closed_until, _plus(now, limit.penalty_s))
            return False
        self._closed_until[endpoint] = _plus(now, limit.min_interval_s)
        return True

    def _too_frequent(self, endpoint: Endpoint) -> Response:
        # vast sends no Retry-After header: the client has to know each endpoint's spacing
        limit = self.api.rate_limits.get(endpoint)
        threshold = limit.min_interval_s if limit else 1.0
        if self.api.rate_limit_body == "json":
            return JSONResponse({"detail": f"API requests too frequent endpoint threshold={threshold}"}, 429)
        return PlainTextResponse(f"API requests too frequent: endpoint threshold={threshold}", 429)

    @staticmethod
    def _server_error(status: int) -> Response:
        return PlainTextResponse(f"{status} Server Error", status_code=status)

    def _next_fault(self, endpoint: Endpoint) -> ScriptedFault | None:
        for fault in self.faults:
            if fault.endpoint == endpoint:
                fault.count -= 1
                if fault.count <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    # ---- the vast.ai endpoints ---------------------------------------------------------------------------
    async def _search(self, request: Request) -> Response:
        if request.method == "GET":
            body = _json_param(request.query_params.get("q") or "{}", "q")
        else:
            body = await _json_body(request)
        if not isinstance(body, dict):
            raise QueryError(f"query: expected a JSON object, got {body!r}")
        query = parse_search(body, default_limit=self.api.default_search_limit)
        return JSONResponse({"offers": list(self.world.search(query, self.clock.now()))})

    async def _create(self, request: Request) -> Response:
        offer_id = int(request.path_params["offer_id"])
        create = CreateRequest.model_validate(await _json_body(request))
        instance = self.world.create(offer_id, create, self.clock.now())
        log.info(
            "rented offer %d as instance %d at $%.3f/h (label %s)",
            offer_id, instance.instance_id, instance.dph_base, instance.label,
        )  # fmt: skip
        return JSONResponse({"success": True, "new_contract": instance.instance_id})

    async def _list_v1(self, request: Request) -> Response:
        params = {key: _json_param(value, key) for key, value in request.query_params.items() if key != "api_key"}
        page = self.world.list_page(params, self.clock.now(), max_page_size=self.api.max_page_size)
        return JSONResponse(page)

    async def _list_v0(self, request: Request) -> Response:
        if self.api.v0_list == "gone":
            raise VastApiError(
                410,
                "deprecated_endpoint",
                "This endpoint is deprecated. Use /api/v1/instances/",
            )
        now = self.clock.now()
        return JSONResponse({"instances": [self.world.instance_row(i, now) for i in self.world.live_instances(now)]})

    async def _show(self, request: Request) -> Response:
        now = self.clock.now()
        self.world.advance(now)
        instance = self.world.instances.get(int(request.path_params["instance_id"]))
        if instance is None or instance.destroyed_at is not None:
            # vast answers an unknown id with 200 and a null object
            return JSONResponse({"instances": None})
        return JSONResponse({"instances": self.world.instance_row(instance, now)})

    async def _manage(self, request: Request) -> Response:
        instance_id = int(request.path_params["instance_id"])
        body = await _json_body(request)
        now = self.clock.now()
        if "state" in body:
            self.world.set_state(instance_id, str(body["state"]), now)
            log.info("instance %d set to %s", instance_id, body["state"])
        if "label" in body:
            self.world.set_label(instance_id, str(body["label"]), now)
        if "state" not in body and "label" not in body:
            raise VastApiError(400, "invalid_args", "expected 'state' or 'label' in the body")
        return JSONResponse({"success": True})

    async def _bid_price(self, request: Request) -> Response:
        instance_id = int(request.path_params["instance_id"])
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise VastApiError(400, "invalid_args", "expected a JSON object with 'price'")
        self.world.change_bid(instance_id, body.get("price"), self.clock.now())
        return JSONResponse({"success": True})

    async def _destroy(self, request: Request) -> Response:
        instance_id = int(request.path_params["instance_id"])
        self.world.destroy(instance_id, self.clock.now())
        log.info("destroyed instance %d", instance_id)
        return JSONResponse({"success": True, "msg": f"destroying instance {instance_id}."})

    # ---- admin ---------------------------------------------------------------------------------------------
    async def _invoices(self, request: Request) -> Response:
        """Charges only (`type=charge`); `select_filters={"timestamp": {"gte": <epoch s>}}` leaves out older days."""
        params = {key: _json_param(value, key) for key, value in request.query_params.items() if key != "api_key"}
        since_s = ((params.get("select_filters") or {}).get("timestamp") or {}).get("gte")
        since = datetime.fromtimestamp(float(since_s), UTC) if since_s is not None else None
        if params.get("type", "charge") != "charge":
            return JSONResponse([])
        return JSONResponse(self.world.charge_rows(self.clock.now(), since))

    async def _admin_ledger(self, request: Request) -> Response:
        return JSONResponse(self.world.ledger(self.clock.now()).model_dump(mode="json"))

    async def _admin_calls(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.calls.clear()
        return JSONResponse([call.model_dump(mode="json") for call in self.calls])

    async def _admin_faults(self, request: Request) -> Response:
        if request.method == "POST":
            body = await _json_body(request)
            items = body if isinstance(body, list) else [body]
            self.faults.extend(ScriptedFault.model_validate(item) for item in items)
        elif request.method == "DELETE":
            self.faults.clear()
        return JSONResponse([fault.model_dump(mode="json") for fault in self.faults])

    async def _admin_api(self, request: Request) -> Response:
        if request.method == "POST":
            changes = await _json_body(request)
            self.api = ApiBehaviour.model_validate({**self.api.model_dump(), **changes})
        return JSONResponse(self.api.model_dump(mode="json"))

    async def _admin_clock(self, request: Request) -> Response:
        if request.method == "POST":
            if not isinstance(self.clock, SimulatedClock):
                return JSONResponse({"error": "this simulator runs on a real or scaled clock"}, status_code=409)
            seconds = float((await _json_body(request)).get("seconds", 0))
            self.clock.advance(seconds)
        return JSONResponse({"now": self.clock.now().isoformat()})

    async def _admin_take_offer(self, request: Request) -> Response:
        self.world.advance(self.clock.now())
        taken = self.world.take_offer(int(request.path_params["offer_id"]))
        return JSONResponse({"taken": taken}, status_code=200 if taken else 404)

    async def _admin_machine_fate(self, request: Request) -> Response:
        fate = (await _json_body(request)).get("fate")
        self.world.set_machine_fate(int(request.path_params["machine_id"]), Fate(fate) if fate else None)
        return JSONResponse({"machine_id": int(request.path_params["machine_id"]), "fate": fate})

    async def _admin_instance(self, request: Request) -> Response:
        instance = self.world.instances.get(int(request.path_params["instance_id"]))
        if instance is None:
            return JSONResponse({"error": "no such instance"}, status_code=404)
        return JSONResponse(self.world.sim_view(instance, self.clock.now()))

    async def _admin_instance_row(self, request: Request) -> Response:
        """Fields every later row of this instance carries as given (`{}` clears them): odd rows on demand."""
        instance_id = int(request.path_params["instance_id"])
        if instance_id not in self.world.instances:
            return JSONResponse({"error": "no such instance"}, status_code=404)
        overrides = await _json_body(request)
        if not isinstance(overrides, dict):
            return JSONResponse({"error": "expected a JSON object of fields"}, status_code=400)
        if overrides:
            self.world.row_overrides[instance_id] = overrides
        else:
            self.world.row_overrides.pop(instance_id, None)
        return JSONResponse({"instance_id": instance_id, "overrides": overrides})

    async def _admin_bids(self, request: Request) -> Response:
        """Other renters' bid per GPU model, as a share of each machine's on-demand price; POST
        `{"gpu_name": ..., "share": ...}` sets one from now on (1 or more: an on-demand renter takes the machines)."""
        now = self.clock.now()
        if request.method == "POST":
            body = await _json_body(request)
            if not isinstance(body, dict):
                body = {}
            gpu_name, share = body.get("gpu_name"), body.get("share")
            if not isinstance(gpu_name, str) or not isinstance(share, int | float) or share < 0:
                return JSONResponse({"error": "expected {'gpu_name': str, 'share': a number >= 0}"}, status_code=400)
            self.world.set_bid_share(gpu_name, float(share), now)
        self.world.advance(now)
        return JSONResponse(dict(sorted(self.world.bid_levels.shares.items())))

    async def _admin_reset(self, request: Request) -> Response:
        raw = await request.body()
        self.reset(Scenario.model_validate_json(raw) if raw.strip() else self.scenario)
        return JSONResponse({"reset": True, "offers": len(self.world.offers)})

    async def _admin_health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "now": self.clock.now().isoformat()})

    def _routes(self) -> list[Route]:
        api = self._api
        return [
            Route("/api/v0/bundles/", api(Endpoint.SEARCH, self._search), methods=["POST", "GET"]),
            Route("/api/v0/asks/{offer_id:int}/", api(Endpoint.CREATE, self._create), methods=["PUT"]),
            Route("/api/v1/instances/", api(Endpoint.LIST_V1, self._list_v1), methods=["GET"]),
            Route("/api/v0/instances/", api(Endpoint.LIST_V0, self._list_v0), methods=["GET"]),
            Route("/api/v0/instances/{instance_id:int}/", api(Endpoint.SHOW, self._show), methods=["GET"]),
            Route("/api/v0/instances/{instance_id:int}/", api(Endpoint.MANAGE, self._manage), methods=["PUT"]),
            Route("/api/v0/instances/{instance_id:int}/", api(Endpoint.DESTROY, self._destroy), methods=["DELETE"]),
            Route(
                "/api/v0/instances/bid_price/{instance_id:int}/",
                api(Endpoint.BID_PRICE, self._bid_price),
                methods=["PUT"],
            ),
            Route("/api/v0/invoices", api(Endpoint.INVOICES, self._invoices), methods=["GET"]),
            Route("/_sim/health", self._admin_health, methods=["GET"]),
            Route("/_sim/ledger", self._admin_ledger, methods=["GET"]),
            Route("/_sim/calls", self._admin_calls, methods=["GET", "DELETE"]),
            Route("/_sim/faults", self._admin_faults, methods=["GET", "POST", "DELETE"]),
            Route("/_sim/api", self._admin_api, methods=["GET", "POST"]),
            Route("/_sim/clock", self._admin_clock, methods=["GET", "POST"]),
            Route("/_sim/offers/{offer_id:int}/take", self._admin_take_offer, methods=["POST"]),
            Route("/_sim/machines/{machine_id:int}/fate", self._admin_machine_fate, methods=["POST"]),
            Route("/_sim/instances/{instance_id:int}", self._admin_instance, methods=["GET"]),
            Route("/_sim/instances/{instance_id:int}/row", self._admin_instance_row, methods=["POST"]),
            Route("/_sim/bids", self._admin_bids, methods=["GET", "POST"]),
            Route("/_sim/reset", self._admin_reset, methods=["POST"]),
        ]


def _plus(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise QueryError(f"body: not JSON ({error.msg} at position {error.pos})") from None


def _json_param(value: str, name: str) -> Any:
    """vast's clients JSON-encode every query parameter except plain strings (vast-cli `_build_url`)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if name == "q":
            raise QueryError(f"q: not JSON: {value[:60]!r}") from None
        return value  # a plain string: an after_token, owner=me
