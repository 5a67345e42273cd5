#!/usr/bin/env bash
# matrix_multi.sh — the matrix's multi-instance scenario on the scale-out
# topology: `miaosha-load matrix --scenarios multi --target URL`
# sends its bursts through the topology's nginx to the three instances on the
# topology's Redis, instead of three instances of its own.
# Expected, per mode: none and mutex oversell (mutex is one lock per
# process: three processes, three locks), setnx, token, reentrant and
# fenced sell exactly the stock (lua too) — the matrix judges each cell and
# exits 0 only when all are as expected. The test also reads the cells back from matrix.csv
# and checks that the sales really spread over the three instances. The
# instances require an admin token, so the matrix's resets must carry it.
. "$(dirname "$0")/lib.sh"
# The instances require an admin token (they read it from the environment,
# as miaosha-load does): the matrix's stock resets through nginx must send it.
export MIAOSHA_ADMIN_TOKEN=mx-multi-secret
scaleout_up
http PUT "$SCALEOUT_URL/stock/mx-multi-probe"
ck "PUT /stock without the token is refused ($H_CODE)" -- test "$H_CODE" = 401

out=$T_DIR/matrix
"$LOAD" matrix --quick --scenarios multi --target "$SCALEOUT_URL" \
  --redis "127.0.0.1:$SCALEOUT_REDIS_PORT" --out "$out" >"$T_DIR/matrix.out" 2>&1
st=$?
cat "$T_DIR/matrix.out"
ck "matrix --scenarios multi --target nginx: every cell as expected (exit $st)" -- test $st -eq 0
ck "the report names the balancer" -- grep -qF "multi-instance scenario through $SCALEOUT_URL" "$T_DIR/matrix.out"

csv=$out/matrix.csv
for m in none mutex setnx token reentrant fenced; do
  row=$(grep "^multi,$m," "$csv")
  ck "matrix.csv has the multi/$m cell" -- test -n "$row"
done
grep -q "^multi,mutex,oversell,oversell,true," "$csv"; check $? "mutex oversells across the instances behind nginx"
for m in setnx token reentrant fenced; do
  grep -q "^multi,$m,exact,exact,true," "$csv"; check $? "$m sells exactly the stock through nginx"
done
# The matrix's SKUs are mx-multi-<mode>: each mode's orders came from all
# three instances (nginx round-robin), so the scenario did span processes.
for m in mutex token; do
  n=$(order_instances "mx-multi-$m" | wc -l)
  ck "$m: orders were taken by $n instances (3 expected)" -- test "$n" -eq 3
done
finish
