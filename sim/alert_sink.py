"""A webhook receiver for Alertmanager that keeps what it is sent, so a test (or a person) can read which alerts
reached the end of the chain: `python -m sim.alert_sink --port 9095`, then GET /alerts.

It stands where a pager or chat webhook would be in production (deploy/alertmanager/alertmanager.yml) and is
as strict as Alertmanager's webhook format (version 4): a body that is not one is refused with the reason.
"""

from __future__ import annotations

from typing import Literal

import typer
import uvicorn
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class WebhookAlert(BaseModel):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str
    endsAt: str
    fingerprint: str


class WebhookNotification(BaseModel):
    """Alertmanager's webhook body (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

    version: Literal["4"]
    groupKey: str
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str]
    commonLabels: dict[str, str]
    alerts: list[WebhookAlert]


def build_app() -> Starlette:
    received: list[WebhookNotification] = []

    async def receive(request: Request) -> JSONResponse:
        try:
            notification = WebhookNotification.model_validate_json(await request.body())
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(map(str, first["loc"]))
            return JSONResponse({"error": f"not an Alertmanager webhook body: {where}: {first['msg']}"}, 400)
        received.append(notification)
        return JSONResponse({"received": len(received)})

    async def list_received(request: Request) -> JSONResponse:
        return JSONResponse([notification.model_dump() for notification in received])

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/alerts", receive, methods=["POST"]),
            Route("/alerts", list_received, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def main(
    host: str = typer.Option("127.0.0.1", help="address to listen on"),
    port: int = typer.Option(9095, help="port to listen on"),
) -> None:
    uvicorn.run(build_app(), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    typer.run(main)
