#!/usr/bin/env bash
# compose_check.sh — validates docker-compose.yml and the Dockerfile without
# a Docker engine: Debian's docker-compose (1.29) parses and resolves the
# file (`config`), then the resolved configuration is checked against the
# topology scaleout/README.md describes and against config/nginx.conf.template.
. "$(dirname "$0")/lib.sh"
cd "$SRC" || exit 1
command -v docker-compose >/dev/null || { say "FAIL docker-compose not installed (Debian package docker-compose)"; exit 1; }

ck "docker-compose config accepts the file" -- docker-compose -f docker-compose.yml config -q
cfg=$(docker-compose -f docker-compose.yml --profile matrix config 2>&1)
services=$(docker-compose -f docker-compose.yml --profile matrix config --services 2>/dev/null | LC_ALL=C sort | tr '\n' ' ')
ck "services: redis app1 app2 app3 nginx + load/matrix + the failover, observe and cluster profiles' ($services)" -- \
  test "$services" = "app-cluster app-failover app1 app2 app3 grafana load lock1 lock2 lock3 lock4 lock5 matrix nginx prometheus redis redis-cluster-create redis-master redis-node-1 redis-node-2 redis-node-3 redis-node-4 redis-node-5 redis-node-6 redis-replica1 redis-replica2 sentinel1 sentinel2 sentinel3 "
flat=$(tr '\n' ' ' <<<"$cfg" | tr -s ' ')
ck "load and matrix only run with --profile matrix" -- \
  bash -c "grep -qE ' load: .*profiles: - matrix.* matrix: .*profiles: - matrix' <<<'$flat'"

has() { grep -q -- "$1" <<<"$cfg"; }

# The failover profile (scripts/failover.sh without Docker).
fcfg=$(docker-compose -f docker-compose.yml --profile failover config 2>&1)
ck "docker-compose config accepts the failover profile" -- \
  docker-compose -f docker-compose.yml --profile failover config -q
# One service's block of the resolved file, on one line.
svc_line() { sed -n "/^  $1:/,/^  [a-z]/p" <<<"$fcfg" | sed '$d' | tr '\n' ' ' | tr -s ' '; }
line_has() { grep -qE -- "$2" <<<"$(svc_line "$1")"; }
for s in redis-master redis-replica1 redis-replica2 sentinel1 sentinel2 sentinel3 \
    lock1 lock2 lock3 lock4 lock5 app-failover; do
  ck "failover: $s runs only with --profile failover" -- line_has "$s" ' profiles: - failover( |$)'
done
for i in 1 2; do
  ck "failover: redis-replica$i replicates redis-master" -- \
    line_has "redis-replica$i" "- --replicaof - redis-master - .?6379"
done
for i in 1 2 3; do
  ck "failover: sentinel$i monitors mymaster at redis-master, quorum 2" -- \
    line_has "sentinel$i" 'sentinel monitor mymaster redis-master 6379 2 '
done
ck "failover: app-failover asks the three Sentinels" -- \
  line_has app-failover 'MIAOSHA_REDIS_SENTINELS: sentinel1:26379,sentinel2:26379,sentinel3:26379'
ck "failover: app-failover WAITs for every replica (all)" -- \
  line_has app-failover "MIAOSHA_REDIS_WAIT_REPLICAS: '?all'?"
ck "failover: app-failover offers redlock on the five lock masters" -- \
  line_has app-failover 'MIAOSHA_REDLOCK_NODES: lock1:6379,lock2:6379,lock3:6379,lock4:6379,lock5:6379'
for i in 1 2 3 4 5; do
  ck "failover: app-failover starts after lock$i" -- \
    line_has app-failover "depends_on:( [a-z0-9-]+: condition: service_[a-z_]+)* lock$i: condition"
done
# The cluster profile (scripts/redis-cluster.sh without Docker).
ccfg=$(docker-compose -f docker-compose.yml --profile cluster config 2>&1)
ck "docker-compose config accepts the cluster profile" -- \
  docker-compose -f docker-compose.yml --profile cluster config -q
cline() { sed -n "/^  $1:/,/^  [a-z]/p" <<<"$ccfg" | sed '$d' | tr '\n' ' ' | tr -s ' '; }
cline_has() { grep -qE -- "$2" <<<"$(cline "$1")"; }
for s in redis-node-1 redis-node-2 redis-node-3 redis-node-4 redis-node-5 redis-node-6 \
    redis-cluster-create app-cluster; do
  ck "cluster: $s runs only with --profile cluster" -- cline_has "$s" ' profiles: - cluster( |$)'
done
for i in 1 2 3 4 5 6; do
  ck "cluster: redis-node-$i is cluster-enabled, node timeout 1000 ms" -- \
    cline_has "redis-node-$i" "- --cluster-enabled - .?yes.? .*- --cluster-node-timeout - .?1000"
  ck "cluster: redis-cluster-create waits until redis-node-$i is healthy" -- \
    cline_has redis-cluster-create "depends_on:.* redis-node-$i: condition: service_healthy"
done
ck "cluster: redis-cluster-create makes 3 masters with a replica each of the six nodes" -- \
  cline_has redis-cluster-create 'for n in 1 2 3 4 5 6; .*redis-cli --cluster create .* --cluster-replicas 1 --cluster-yes'
ck "cluster: app-cluster starts once the cluster is made" -- \
  cline_has app-cluster 'depends_on: redis-cluster-create: condition: service_completed_successfully'
ck "cluster: app-cluster's seeds are the six nodes" -- \
  cline_has app-cluster 'MIAOSHA_REDIS_CLUSTER_NODES: redis-node-1:6379,redis-node-2:6379,redis-node-3:6379,redis-node-4:6379,redis-node-5:6379,redis-node-6:6379'
ck "cluster: app-cluster WAITs for the master's replica (1: all is refused with a cluster)" -- \
  cline_has app-cluster "MIAOSHA_REDIS_WAIT_REPLICAS: '?1'?( |$)"
ck "cluster: app-cluster is published on 127.0.0.1 only" -- \
  cline_has app-cluster 'host_ip: 127.0.0.1|127.0.0.1:[0-9]+:[0-9]+'
ck "cluster: app-cluster has no redis.host (the seeds replace it)" -- \
  bash -c "! grep -q MIAOSHA_REDIS_HOST <<<'$(cline app-cluster)'"
# The observe profile: Prometheus and Grafana with the files of scaleout/observe.
ocfg=$(docker-compose -f docker-compose.yml --profile observe config 2>&1)
ck "docker-compose config accepts the observe profile" -- \
  docker-compose -f docker-compose.yml --profile observe config -q
oline() { sed -n "/^  $1:/,/^  [a-z]/p" <<<"$ocfg" | sed '$d' | tr '\n' ' ' | tr -s ' '; }
for s in prometheus grafana; do
  ck "observe: $s runs only with --profile observe" -- \
    bash -c "grep -qE ' profiles: - observe( |\$)' <<<'$(oline $s)'"
  ck "observe: $s is published on 127.0.0.1 only" -- \
    bash -c "grep -qE 'host_ip: 127.0.0.1|127.0.0.1:[0-9]+:[0-9]+' <<<'$(oline $s)'"
done
ck "observe: prometheus reads scaleout/observe/prometheus.yml" -- \
  bash -c "grep -q -- '$SRC/scaleout/observe/prometheus.yml:/etc/prometheus/prometheus.yml' <<<'$(oline prometheus)'"
ck "observe: grafana provisions from scaleout/observe/grafana" -- \
  bash -c "grep -q -- '$SRC/scaleout/observe/grafana/provisioning:/etc/grafana/provisioning' <<<'$(oline grafana)' && grep -q -- '$SRC/scaleout/observe/grafana/dashboards:/var/lib/grafana/dashboards' <<<'$(oline grafana)'"
command -v promtool >/dev/null || { say "FAIL promtool not installed (Debian package prometheus)"; exit 1; }
ck "observe: promtool check config accepts prometheus.yml" -- \
  promtool check config scaleout/observe/prometheus.yml
ck "observe: prometheus.yml scrapes app1..app3:8080" -- \
  grep -qF '["app1:8080", "app2:8080", "app3:8080"]' scaleout/observe/prometheus.yml
ck "observe: the dashboard is JSON with panels on the audit gauges" -- \
  python3 -c "import json,sys; d=json.load(open('scaleout/observe/grafana/dashboards/miaosha.json')); e=' '.join(t['expr'] for p in d['panels'] for t in p['targets']); sys.exit(0 if all(m in e for m in ('miaosha_stock','miaosha_sold','miaosha_oversold','miaosha_undersold')) and 'by (sku, mode)' in e else 1)"
ck "observe: the data source's uid is the dashboard's" -- \
  grep -q 'uid: miaosha-prometheus' scaleout/observe/grafana/provisioning/datasources/prometheus.yml

loadcmd=$(sed -n '/^  load:/,/^  [a-z]/p' <<<"$cfg" | sed -n '/^    command:/,/^    [a-z]/p' | grep '^    - ' | tr '\n' ' ')
# (miaosha-load resolves the service name "nginx" at start: a name, not only
# an address, is accepted since --target uses getaddrinfo.)
ck "load: runs the matrix against nginx ($loadcmd)" -- \
  bash -c "grep -qE -- '- miaosha-load +- matrix .*- --target +- http://nginx:80' <<<'$loadcmd'"

ck "redis: official redis:7 image" -- has "image: redis:7"
ck "redis: AOF on, appendfsync always" -- bash -c "grep -qF -- '- --appendonly - \"yes\" - --appendfsync - always' <<<'$flat'"
ck "redis: a volume for /data" -- has "redis-data:/data"
ids=$(grep -o 'MIAOSHA_INSTANCE_ID: app[0-9]' <<<"$cfg" | sort -u | wc -l)
ck "three distinct instance ids ($ids)" -- test "$ids" = 3
n=$(grep -c "MIAOSHA_LISTEN_ADDRESS: 0.0.0.0" <<<"$cfg")
ck "the instances listen on 0.0.0.0 inside their containers ($n)" -- test "$n" -ge 3
n=$(grep -c "MIAOSHA_ADMIN_TOKEN: " <<<"$cfg")
ck "so they, and the matrix that starts instances, have an admin token ($n)" -- test "$n" -ge 5
ck "nginx: official image" -- has "image: nginx:"
ck "nginx: the template from config/ is mounted where the image fills it" -- \
  has "$SRC/config/nginx.conf.template:/etc/nginx/templates/default.conf.template"
for v in $(grep -o '\${LB_[A-Z0-9_]*}' config/nginx.conf.template | sort -u | tr -d '${}'); do
  ck "nginx: template placeholder $v is set in the compose file" -- has "$v:"
done
n=$(grep -c "context: $SRC\$" <<<"$cfg")
ck "the instances are built from the top directory (its Dockerfile) ($n builds)" -- test "$n" -ge 3 -a -f Dockerfile

df=Dockerfile
ck "Dockerfile: build stage on Debian bookworm" -- grep -q '^FROM debian:bookworm AS build' $df
ck "Dockerfile: final stage on Debian bookworm" -- grep -qE '^FROM debian:bookworm(-slim)?$' $df
for p in libhiredis0.14 libmicrohttpd12 libcjson1 libuuid1 libcurl4; do
  ck "Dockerfile: runtime package $p" -- bash -c "sed -n '/^FROM debian:bookworm-slim/,\$p' $df | grep -qw $p"
done
ck "Dockerfile: no -dev package in the final stage" -- bash -c "! sed -n '/^FROM debian:bookworm-slim/,\$p' $df | grep -q -- '-dev'"
ck "Dockerfile: non-root USER" -- bash -c "grep -E '^USER ' $df | grep -vqE '^USER (root|0)\$'"
ck "Dockerfile: HEALTHCHECK on /healthz" -- grep -q 'HEALTHCHECK' $df
ck "Dockerfile: the healthcheck's curl is installed in the final stage" -- \
  bash -c "sed -n '/^FROM debian:bookworm-slim/,/^COPY/p' $df | grep -qE '(^| )curl( |\$)'"
ck "Dockerfile: EXPOSE 8080" -- grep -q '^EXPOSE 8080' $df
ck ".dockerignore keeps build trees out" -- grep -qx 'build/' .dockerignore
finish
