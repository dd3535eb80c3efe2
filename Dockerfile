# syntax=docker/dockerfile:1
#
# sagad and sagactl as static binaries on a distroless base, run as a
# non-root user. Build and run (docs/CLUSTER.md, "The image"):
#
#   docker build -t sagad .
#   docker run --rm -v sagad-data:/data sagad          # embedded NATS on the container's loopback
#
# The image is configured with SAGAD_* variables so that the health check,
# which runs `sagad healthcheck` with the same environment, finds the HTTP
# listener wherever it is. deploy/compose/ runs it on a NATS cluster.
# A second target, demo-worker, is examples/worker (for the compose file).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO_ENABLED=0: static binaries, no libc in the image. The VCS stamp
# (-buildvcs, on by default with .git in the context) feeds --version.
ENV CGO_ENABLED=0
# A context whose .git git cannot read (a worktree's, say) builds without
# the stamp rather than not at all.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -e; pkgs="./cmd/sagad ./cmd/sagactl ./examples/worker"; \
    go build -trimpath -ldflags="-s -w" -o /out/ $pkgs || \
    { echo "building without VCS information"; go build -buildvcs=false -trimpath -ldflags="-s -w" -o /out/ $pkgs; }; \
    mkdir -p /out/data /out/workspace

# The demo worker (examples/worker), for deploy/compose.
FROM gcr.io/distroless/static-debian12:nonroot AS demo-worker
COPY --from=build /out/worker /usr/local/bin/sagad-demo-worker
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sagad-demo-worker"]

# sagad (the default target: the last stage).
FROM gcr.io/distroless/static-debian12:nonroot AS sagad
COPY --from=build /out/sagad /out/sagactl /usr/local/bin/
# /data holds the embedded server's JetStream files and the role seeds
# (/data/creds); it belongs to the non-root user so that a new volume does.
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/workspace /workspace
USER 65532:65532
WORKDIR /workspace
ENV SAGAD_DATA_DIR=/data \
    SAGAD_WORKSPACE=/workspace
VOLUME ["/data"]
# 4222: the embedded NATS server (with no --nats-url); 9464: /metrics,
# /healthz, /readyz. Both listen on the container's loopback until told
# otherwise (SAGAD_NATS_LISTEN=0.0.0.0:4222 with SAGAD_SERVER_TLS_CERT and
# SAGAD_SERVER_TLS_KEY, SAGAD_HTTP_LISTEN=0.0.0.0:9464 with
# SAGAD_INSECURE=true): sagad refuses plain text off loopback unless told.
EXPOSE 4222 9464
# Healthy when /readyz answers 200: connected to NATS, consumers running,
# JetStream writes succeeding, no phase stalled. distroless has no shell or
# curl: sagad probes itself.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/sagad", "healthcheck"]
# SIGTERM starts the graceful shutdown (--shutdown-timeout, 30s): give
# `docker stop` more than that (docker stop -t 40; compose's stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sagad"]
