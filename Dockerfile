# syntax=docker/dockerfile:1
# muster's container image (the Helm chart's default image): the `muster` binary on a
# distroless base, run as the non-root user 65532.
#
#   docker build -t registry.example.com/muster:0.1.0 .
#
# Build stage: a release build against the committed Cargo.lock.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, so that a source-only change reuses this layer.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > benches/scale.rs \
 && cargo fetch --locked
COPY src ./src
COPY benches ./benches
COPY examples ./examples
# No debug info in the image's binary (the release profile keeps some for profiling).
RUN CARGO_PROFILE_RELEASE_DEBUG=0 cargo build --release --locked --bin muster \
 && install -D -m 0755 target/release/muster /out/muster

# Runtime stage: glibc and libgcc (the binary links them), CA certificates, no shell,
# user "nonroot" (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/muster /usr/local/bin/muster
USER 65532:65532
# /healthz, /readyz, /metrics (--http-addr) and the admission webhook (--webhook-addr).
EXPOSE 8080 9443
ENTRYPOINT ["/usr/local/bin/muster"]
CMD ["controller"]
