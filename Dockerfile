# syntax=docker/dockerfile:1
# The storefront image: built with cgo (mattn/go-sqlite3), run as a non-root user on a slim
# Debian with the same glibc as the builder.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/stockguard .

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin stockguard \
 && mkdir -p /data && chown stockguard /data
COPY --from=build /out/stockguard /usr/local/bin/stockguard
USER stockguard
WORKDIR /data
ENV ADDR=:8080 \
    DATABASE_URL=/data/stockguard.db
EXPOSE 8080
VOLUME ["/data"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/healthz"]
# SIGTERM starts the graceful shutdown (finish in-flight purchases, release locks, close the DB).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/stockguard"]
