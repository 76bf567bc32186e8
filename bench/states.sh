#!/usr/bin/env bash
# states.sh - libnexar against Open MPI's and MPICH's defaults within each
# of the VM's two states (bench/states.c says why and how a burst is
# classified).
#
# usage: bench/states.sh    (knobs in the environment)
#   NP [2]  COLLS ["pingpong allgather"]  SIZES ["65536 262144"]
#   BURSTS [300]  ROUNDS [2]  THRESHOLD [0.25]
#   NEXAR_BUILD [build-dev]  SHARED_BENCH [../shared/bench]
#
# For each round, collective and size it runs the three, one after the
# other (nexar first in odd rounds, last in even ones), then prints per
# collective and size the median over rounds of each one's burst medians in
# the fast state and in the slow state (a run counts in a state where 20 of
# its bursts or more were in it), and libnexar's ratio to each.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NP=${NP:-2} COLLS=${COLLS:-"pingpong allgather"} SIZES=${SIZES:-"65536 262144"}
BURSTS=${BURSTS:-300} ROUNDS=${ROUNDS:-2} THRESHOLD=${THRESHOLD:-0.25}
NEXAR_BUILD=${NEXAR_BUILD:-$ROOT/build-dev}
SHARED_BENCH=${SHARED_BENCH:-$ROOT/../shared/bench}
[ -e "$NEXAR_BUILD/libnexar.so" ] || { echo "no $NEXAR_BUILD/libnexar.so: build first" >&2; exit 1; }

S=$(mktemp -d "${TMPDIR:-/tmp}/nexar-states.XXXXXX")
trap 'rm -rf "$S"' EXIT
cp -r "$SHARED_BENCH" "$S/bench" && chmod -R u+w "$S/bench"
cp "$ROOT/bench/backend_nexar.c" "$ROOT/bench/states.c" "$S/bench/src/"
B=$S/bench
gcc -O2 -I"$ROOT/include" -I"$B/src" -o "$B/states_nexar" "$B/src/states.c" \
  "$B/src/backend_nexar.c" -L"$NEXAR_BUILD" -lnexar -Wl,-rpath,"$NEXAR_BUILD" || exit 1
mpicc.openmpi -O2 -I"$B/src" -o "$B/states_ompi" "$B/src/states.c" "$B/src/backend_mpi.c" || exit 1
mpicc.mpich -O2 -I"$B/src" -o "$B/states_mpich" "$B/src/states.c" "$B/src/backend_mpi.c" || exit 1

run() { # IMPL COLL SIZE
  local a=("$2" "$3" "$BURSTS" "$THRESHOLD")
  case $1 in
    nexar) timeout 600 env BENCH_VARIANT=quic "$B/scripts/launch-local.sh" "$NP" "$B/states_nexar" "${a[@]}" ;;
    ompi) timeout 600 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP" "$B/states_ompi" "${a[@]}" ;;
    mpich) timeout 600 mpirun.mpich -np "$NP" "$B/states_mpich" "${a[@]}" ;;
  esac 2>&1 | grep '^states '
}

for ((r = 1; r <= ROUNDS; r++)); do
  order="nexar ompi mpich"
  ((r % 2)) || order="ompi mpich nexar"
  for c in $COLLS; do
    for z in $SIZES; do
      for i in $order; do run "$i" "$c" "$z" | tee -a "$S/lines"; done
    done
  done
done >&2

/usr/bin/python3 - "$S/lines" <<'PY'
import sys, statistics as st
d = {}
for l in open(sys.argv[1]):
    _, impl, coll, size, nf, f, ns, s = l.split()
    for state, cnt, v in (("fast", int(nf), float(f)), ("slow", int(ns), float(s))):
        if cnt >= 20:
            d.setdefault((coll, int(size), state), {}).setdefault(impl, []).append(v)
print("| collective | size | state | nexar us | Open MPI us | MPICH us | /Open MPI | /MPICH |")
print("|---|---|---|---|---|---|---|---|")
for (coll, size, state), m in sorted(d.items()):
    med = {k: st.median(v) for k, v in m.items()}
    x = med.get("nexar")
    cell = lambda k: "%.3f" % med[k] if k in med else "-"
    ratio = lambda k: "%.2f" % (x / med[k]) if x and med.get(k) else "-"
    print("| %s | %d | %s | %s | %s | %s | %s | %s |" % (coll, size, state, cell("nexar"),
          cell("openmpi"), cell("mpich"), ratio("openmpi"), ratio("mpich")))
PY
