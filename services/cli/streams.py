"""`fleetpilot streams ensure`: the one admin step that creates the JetStream streams or brings them to the
configuration in shared/streams.py. Services only bind to them: their NATS users may not create, update or purge.

Run it with the `admin` NATS user (FLEETPILOT_NATS_USER=admin) before the services: a Kubernetes Job, the compose
one-shot `streams`, the demo's stack. It waits for NATS to come up, so it may start alongside the broker.
"""

from __future__ import annotations

import asyncio

import nats
import nats.errors
import nats.js.errors
import typer
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from shared.bus import nats_connect_options
from shared.settings import Settings, without_credentials
from shared.streams import ensure_streams

# the answer to a JetStream API call; a refused call (permissions) gets none at all, so this is how long to wait
API_TIMEOUT_S = 10.0

streams_app = typer.Typer(help="The JetStream streams FleetPilot's services bind to.", no_args_is_help=True)


async def ensure_over_nats(settings: Settings, replicas: int, wait_s: float) -> tuple[list[str], str]:
    """Connect, then create or update every stream, retrying until `wait_s` while the broker is still starting
    (refused connections) or a cluster is still electing its leaders (JetStream answers 503). Returns the
    streams and the server that made them (of a cluster's URLs, the one connected to; no credentials)."""

    def waiting(errors: tuple[type[BaseException], ...]) -> AsyncRetrying:
        return AsyncRetrying(
            stop=stop_after_delay(wait_s),
            wait=wait_exponential(multiplier=0.2, max=5.0),
            retry=retry_if_exception_type(errors),
            reraise=True,
        )

    async for attempt in waiting((OSError, nats.errors.NoServersError, nats.errors.TimeoutError)):
        with attempt:
            client = await nats.connect(**nats_connect_options(settings), connect_timeout=5, allow_reconnect=False)
    try:
        # not on a timeout: a refused call (permissions) gets no answer at all, and waiting cannot change that
        async for attempt in waiting((nats.js.errors.ServiceUnavailableError,)):
            with attempt:
                names = await ensure_streams(client.jetstream(timeout=API_TIMEOUT_S), settings.subjects, replicas)
                server = client.connected_url.geturl() if client.connected_url else settings.nats_url_for_humans
                return names, without_credentials(server)
        raise AssertionError("unreachable: tenacity re-raises the last error")
    finally:
        await client.close()


@streams_app.command("ensure")
def ensure(
    replicas: int = typer.Option(
        None, min=1, max=5, help="copies of each stream (default FLEETPILOT_STREAM_REPLICAS; 3 on a 3-node cluster)"
    ),
    wait_s: float = typer.Option(60.0, min=0.0, help="seconds to keep trying to reach NATS before giving up"),
) -> None:
    """Create each FleetPilot stream, or update an existing one to its configuration (idempotent)."""
    settings = Settings()
    copies = replicas or settings.stream_replicas
    try:
        names, server = asyncio.run(ensure_over_nats(settings, copies, wait_s))
    except nats.errors.TimeoutError:
        typer.echo(
            f"JetStream did not answer within {API_TIMEOUT_S:.0f} s: may NATS user "
            f"{settings.nats_user or '(none)'!r} create and update streams (only `admin` may), and does the "
            f"cluster have {copies} JetStream servers for --replicas {copies}?",
            err=True,
        )
        raise typer.Exit(1) from None
    except nats.js.errors.APIError as error:
        typer.echo(f"JetStream refused the stream configuration: {error.description} (code {error.err_code})", err=True)
        raise typer.Exit(1) from None
    except (OSError, nats.errors.Error) as error:
        typer.echo(f"cannot reach NATS at {settings.nats_url_for_humans} after {wait_s:.0f} s: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"streams ensured ({copies} replica{'s' if copies > 1 else ''}): {', '.join(names)} on {server}")
