# fenceproxy container image: a static binary on distroless, as non-root.
#   docker build -t fenceproxy --build-arg VERSION=$(git describe --always) .
#   docker run -p 6033:6033 -p 9033:9033 \
#     -v $PWD/fenceproxy.yaml:/etc/fenceproxy/fenceproxy.yaml:ro fenceproxy
# The mounted config must listen on all interfaces (listen: 0.0.0.0:6033,
# admin: 0.0.0.0:9033: the defaults are loopback only) and may write its
# audit file to /var/log/fenceproxy (a volume). Reload: docker kill -s HUP.
# README.md, Deploying, has the details (health probes, secrets).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first: this layer stays cached while only the sources change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/fenceproxy ./cmd/fenceproxy \
 && mkdir -p /out/log

# static-debian12 has CA certificates (backend.tls: verify-full), tzdata
# and /etc/passwd with the nonroot user (65532), and no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fenceproxy /usr/local/bin/fenceproxy
COPY --from=build --chown=65532:65532 /out/log /var/log/fenceproxy
USER 65532:65532
VOLUME ["/var/log/fenceproxy"]
# 6033: MySQL protocol for apps; 9033: admin HTTP (/metrics /healthz /readyz /audit).
EXPOSE 6033 9033
# SIGTERM drains connections for timeouts.drain_delay + timeouts.shutdown
# (0s + 30s by default): give `docker stop -t 40` or a
# terminationGracePeriodSeconds above it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/fenceproxy"]
CMD ["serve", "--config", "/etc/fenceproxy/fenceproxy.yaml"]
