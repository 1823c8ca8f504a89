# One image for every FleetPilot process: `fleetpilot run <service>` (demand, fleet, provisioner, decider,
# bench), `fleetpilot sim vast|ollama` for the simulators, and the CLI. Non-root, no dev dependencies.
#   docker build -t fleetpilot .
#   docker run --rm fleetpilot run demand

# python:3.11-slim by its multi-platform index digest (OCI image index, 16 platforms; Python 3.11.15 on Debian
# trixie), as Docker Official Images publish it: docker-library/repo-info, repos/python/remote/3.11-slim.md.
# The tag moves with every rebuild, the digest does not: bump both together.
FROM python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/fleetpilot
WORKDIR /src
COPY pyproject.toml README.md ./
COPY requirements ./requirements
COPY shared ./shared
COPY services ./services
COPY sim ./sim
# the local model and the agent evaluation: `fleetpilot llm` and `fleetpilot agent eval` (never imported by services)
COPY evaluation ./evaluation
# The runtime dependencies from the hash-locked requirements (pip refuses any file whose sha256 differs; no
# numpy, scipy, matplotlib or nats-server binary: 65 MB of packages instead of 256 MB), then FleetPilot itself,
# regular (not editable), without dependencies and built by the locked setuptools; byte-code compiled now, because
# the root filesystem is read-only at run time. compose builds with FLEETPILOT_LOCK=requirements/sim.lock: its demo
# profile runs the simulators from this image. `make lock` writes both locks.
ARG FLEETPILOT_LOCK=requirements/prod.lock
RUN /opt/fleetpilot/bin/pip install --require-hashes -r "${FLEETPILOT_LOCK}" \
 && /opt/fleetpilot/bin/pip install --no-deps --no-build-isolation . \
 && /opt/fleetpilot/bin/python -m compileall -q /opt/fleetpilot/lib \
 && /opt/fleetpilot/bin/pip uninstall --yes pip

# the same base as the build stage (see above): the venv copied below links against its Python
FROM python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff
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
