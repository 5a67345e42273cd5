# miaosha-server and miaosha-load on Debian bookworm, for the scale-out
# topology of docker-compose.yml.
#
# Stage 1 builds with Debian's -dev packages (and python3-yaml, which turns
# docs/openapi.yaml into the JSON of GET /openapi.json) and the CMake build of
# scripts/test.sh (same warning flags), product only and Release, then
# installs it into a staging prefix with `cmake --install`.
# scaleout/tests/dockerfile_build.sh runs these exact RUN cmake lines outside
# Docker in CI, so the image cannot drift from the CMake build.
# Stage 2 holds the runtime libraries, curl (the health check on /healthz),
# ca-certificates, redis-server (the matrix profile's redlock lock masters)
# and a CJK font (fonts-wqy-microhei, for the --lang zh pages), and runs as
# a non-root user.
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
      libhiredis-dev libmicrohttpd-dev libcjson-dev uuid-dev libcurl4-openssl-dev python3-yaml \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The image runs no tests: -DMIAOSHA_BUILD_TESTS=OFF builds the product alone
# and needs none of the test tools (redis-server, nginx, redis-cli).
RUN cmake -S . -B build/docker -DMIAOSHA_BUILD_TESTS=OFF -DMIAOSHA_WERROR=ON -DCMAKE_BUILD_TYPE=Release
RUN cmake --build build/docker -j "$(nproc)"
RUN cmake --install build/docker --prefix build/docker-root

FROM debian:bookworm-slim
# redis-server: `miaosha-load matrix` starts the redlock row's five private
# lock masters (and, without --redis, its own Redis) as child processes.
# fonts-wqy-microhei: the CJK font scripts/deps.sh installs (the smallest
# Debian font for simplified Chinese, 5 MB installed), so that whatever
# draws the image's `--lang zh` pages or matrix.svg inside a container
# shows characters, not empty boxes.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libhiredis0.14 libmicrohttpd12 libcjson1 \
      libuuid1 libcurl4 curl ca-certificates redis-server fonts-wqy-microhei \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin miaosha
COPY --from=build /src/build/docker-root/bin/miaosha-server /usr/local/bin/miaosha-server
COPY --from=build /src/build/docker-root/bin/miaosha-load /usr/local/bin/miaosha-load
COPY --from=build /src/build/docker-root/etc/miaosha/miaosha.json /etc/miaosha/miaosha.json
USER miaosha
WORKDIR /tmp
# Inside a container the service must listen on every interface; everything
# else comes from /etc/miaosha/miaosha.json and MIAOSHA_* variables. On a
# non-loopback address the server refuses to start without an admin token
# (PUT /stock wipes a sale): docker run -e MIAOSHA_ADMIN_TOKEN=... (or, for a
# throwaway demo, -e MIAOSHA_LISTEN_ALLOW_OPEN=true).
ENV MIAOSHA_CONFIG=/etc/miaosha/miaosha.json \
    MIAOSHA_LISTEN_ADDRESS=0.0.0.0 \
    MIAOSHA_LISTEN_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=2s --start-period=5s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${MIAOSHA_LISTEN_PORT}/healthz" >/dev/null || exit 1
CMD ["miaosha-server"]
