# runner in a container: the binary, git (which runner drives) and a shell, running as an
# unprivileged user. Build: `docker build -t runner .`; run a manifest mounted at /work:
# `docker run --rm -v "$PWD:/work" -w /work runner apply manifest.yaml`.
# Workers and gates run inside the same container, so an image for real drains adds the
# tools they need (compilers, the agent CLI) on top of this one (`FROM runner`).

FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY manifests ./manifests
RUN cargo build --release --locked && strip target/release/runner

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates openssh-client tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 runner
COPY --from=build /src/target/release/runner /usr/local/bin/runner
USER runner
WORKDIR /work
# tini reaps what workers leave and forwards SIGTERM, so `kubectl delete` and `docker stop`
# cancel a drain the way a closed terminal does: reports written, processes ended.
ENTRYPOINT ["/usr/bin/tini", "--", "runner"]
CMD ["--help"]
