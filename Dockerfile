# miaosha-server and miaosha-load on Debian bookworm (issue 5).
#
# Stage 1 builds with Debian's -dev packages and the same CMake commands as
# scripts/test.sh (configure, then build the two binaries, Release).
# scaleout/tests/dockerfile_build.sh runs these exact RUN cmake lines outside
# Docker in CI, so the image cannot drift from the CMake build.
# Stage 2 holds only the runtime libraries, runs as a non-root user and is
# health-checked on /healthz with curl.
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
      libhiredis-dev libmicrohttpd-dev libcjson-dev uuid-dev libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The top-level CMakeLists.txt looks up redis-server, nginx and redis-cli for
# the test suite; the image runs no tests, so they are pointed at /bin/false
# instead of being installed here.
RUN cmake -S . -B build/docker -DMIAOSHA_WERROR=ON -DCMAKE_BUILD_TYPE=Release -DMIAOSHA_REDIS_SERVER=/bin/false -DMIAOSHA_NGINX=/bin/false -DMIAOSHA_REDIS_CLI=/bin/false
RUN cmake --build build/docker -j "$(nproc)" --target miaosha-server miaosha-load

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libhiredis0.14 libmicrohttpd12 libcjson1 \
      libuuid1 libcurl4 curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin miaosha
COPY --from=build /src/build/docker/service/miaosha-server /usr/local/bin/miaosha-server
COPY --from=build /src/build/docker/loadtest/miaosha-load /usr/local/bin/miaosha-load
COPY config/miaosha.json /etc/miaosha/miaosha.json
USER miaosha
WORKDIR /tmp
# Inside a container the service must listen on every interface; everything
# else comes from /etc/miaosha/miaosha.json and MIAOSHA_* variables.
ENV MIAOSHA_CONFIG=/etc/miaosha/miaosha.json \
    MIAOSHA_LISTEN_ADDRESS=0.0.0.0 \
    MIAOSHA_LISTEN_PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=2s --start-period=5s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${MIAOSHA_LISTEN_PORT}/healthz" >/dev/null || exit 1
CMD ["miaosha-server"]
