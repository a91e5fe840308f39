# qdr-controller: a static (musl) binary on an empty base image, run as a non-root user,
# with OpenSSL built from source and linked in (feature vendored-openssl).
# Build from the repository root: docker build -f deploy/docker/controller.Dockerfile -t qdr-operator/controller:0.1.0 .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl -p qdr-controller --features vendored-openssl --bin qdr-controller \
 && cp target/x86_64-unknown-linux-musl/release/qdr-controller /qdr-controller

FROM scratch
COPY --from=build /qdr-controller /qdr-controller
USER 65532:65532
ENTRYPOINT ["/qdr-controller"]
