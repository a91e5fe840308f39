# qdr-controller: the glibc release binary and exactly the shared libraries it loads (laid out by
# deploy/docker/rootfs.sh) on an empty base image, run as a non-root user. `make images`
# builds the images the tests run with the same cargo command and the same script, on the same
# Debian release (bookworm), so both hold the same files; tests/tests/install.rs checks it.
# Build from the repository root: docker build -f deploy/docker/controller.Dockerfile -t ghcr.io/qdr-operator/controller:0.5.0 .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --release -p qdr-controller --bin qdr-controller \
 && deploy/docker/rootfs.sh target/release/qdr-controller /rootfs

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
ENTRYPOINT ["/qdr-controller"]
