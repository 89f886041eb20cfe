# The image deploy/kubernetes/ runs: `docker build -t outboxctl:0.1.0 .`
#
# Build stage: the toolchain and what the bundled librdkafka needs (its own configure script, no
# cmake, no libcurl). Runtime stage: Debian slim with only the shared libraries the binary links
# (OpenSSL for the Kafka sink's TLS, zlib) and CA certificates, as a non-root user.
# deploy/check-image.sh builds the runtime stage's root with debootstrap from the package list on
# the RUNTIME_PACKAGES line below and runs the binary in it; keep that line the only list.

FROM rust:1.89-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc make perl pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
 && strip target/release/outboxctl

FROM debian:bookworm-slim
ARG RUNTIME_PACKAGES="ca-certificates libssl3 zlib1g"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/outboxctl /usr/local/bin/outboxctl
# 65532: the runAsUser of deploy/kubernetes/*.yaml.
USER 65532:65532
ENTRYPOINT ["outboxctl"]
CMD ["--help"]
