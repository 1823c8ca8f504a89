# One image for every FleetPilot process: `fleetpilot run <service>` (demand, fleet, provisioner, decider,
# bench), `fleetpilot sim vast|ollama` for the simulators, and the CLI. Non-root, no dev dependencies.
#   docker build -t fleetpilot .
#   docker run --rm fleetpilot run demand

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/fleetpilot
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY sim ./sim
# the local model and the agent evaluation: `fleetpilot llm` and `fleetpilot agent eval` (never imported by services)
COPY evaluation ./evaluation
# A regular (not editable) install of the runtime dependencies only (no numpy, scipy, matplotlib or nats-server
# binary: 65 MB of packages instead of 256 MB); byte-code compiled now, because the root filesystem is read-only
# at run time. compose builds with FLEETPILOT_EXTRAS=[sim]: its demo profile runs the simulators from this image.
ARG FLEETPILOT_EXTRAS=""
RUN /opt/fleetpilot/bin/pip install ".${FLEETPILOT_EXTRAS}" \
 && /opt/fleetpilot/bin/python -m compileall -q /opt/fleetpilot/lib \
 && /opt/fleetpilot/bin/pip uninstall --yes pip

FROM python:3.11-slim
RUN groupadd --system --gid 10001 fleetpilot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin fleetpilot
COPY --from=build /opt/fleetpilot /opt/fleetpilot
ENV PATH=/opt/fleetpilot/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FLEETPILOT_HTTP_PORT=8000
WORKDIR /tmp
USER 10001:10001
EXPOSE 8000
# /health and /metrics are served on FLEETPILOT_HTTP_PORT by every service
ENTRYPOINT ["fleetpilot"]
CMD ["--help"]
