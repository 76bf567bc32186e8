#!/usr/bin/env bash
# compare.sh - libnexar against Open MPI, MPICH and Gloo with one harness.
#
# usage: bench/compare.sh [--quick] [--install] [--keep] [-h]
#   --quick    ~3 min: allreduce + barrier, 2 repetitions, short time budget
#   --install  apt-get install the peers first (openmpi, mpich, gloo, gnuplot)
#   --keep     keep the scratch directory (logs, binaries)
#
# Copies the shared harness (../shared/bench, read-only) to a scratch
# directory, builds its Open MPI / MPICH / Gloo backends and our
# bench/backend_nexar.c against the project's build, then runs every
# implementation on the same collective, one after the other (nexar first
# in odd repetitions, last in even ones), for each world size and
# repetition: machine noise hits all of them alike. Ranks are processes on
# this host. Before and after each run bench/vmstate.c measures the state
# the VM is in (a cache line's one-way time between two CPUs: this VM's
# same-host times move 2-4x with it every few seconds, bench/states.c), so
# that ratio.md shows which repetitions met which state. Then nexar-perf
# measures the peak resident memory of one rank in a 256 MiB allreduce, and
# bench/plot.py writes medians over repetitions, the ratio table (nexar /
# peer) and the chart.
#
# Outputs in $OUT (default bench/results): compare.csv (every row of every
# run), vmstate.csv (the state before and after each run), memory.csv, medians.csv,
# ratio.md, ratio.png, env.txt.
#
# Knobs (environment, defaults in brackets; --quick changes the marked ones):
#   NPS ["2 4 8"]             world sizes
#   REPS [5; quick 2]         repetitions (the tables show medians: with 5,
#                             a library's median meets the VM's slow state
#                             only if 3 of its 5 runs did)
#   COLLS ["allreduce barrier broadcast allgather reduce_scatter alltoall pingpong";
#         quick "allreduce barrier"]
#   MAXSZ [64M]               largest size (harness: 8, 16, then powers of 4)
#   BUDGET [0.1; quick 0.03]  seconds of timed loop per size (harness -t)
#   PEERS ["ompi-tcp gloo"]   add ompi-default and/or mpich for more columns
#   MEM_SIZE [256M]           allreduce size of the memory measurement ("" skips)
#   RUN_TIMEOUT [300; quick 120]  seconds per launcher call
#   NEXAR_BUILD [build-bench] the project's build directory (configured and
#                             built here when needed, RelWithDebInfo)
#   SHARED_BENCH [../shared/bench]  the harness;  OUT [bench/results]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0 INSTALL=0 KEEP=0
for a in "$@"; do
  case $a in
    --quick) QUICK=1 ;;
    --install) INSTALL=1 ;;
    --keep) KEEP=1 ;;
    -h | --help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
if ((QUICK)); then
  : "${REPS:=2}" "${COLLS:=allreduce barrier}" "${BUDGET:=0.03}" "${RUN_TIMEOUT:=120}"
fi
: "${NPS:=2 4 8}" "${REPS:=5}"
: "${COLLS:=allreduce barrier broadcast allgather reduce_scatter alltoall pingpong}"
: "${MAXSZ:=64M}" "${BUDGET:=0.1}" "${PEERS:=ompi-tcp gloo}" "${MEM_SIZE=256M}"
: "${RUN_TIMEOUT:=300}" "${NEXAR_BUILD:=$ROOT/build-bench}"
: "${SHARED_BENCH:=$ROOT/../shared/bench}" "${OUT:=$ROOT/bench/results}"
COMMAND="bench/compare.sh $*"
T0=$(date +%s)
has() { command -v "$1" >/dev/null 2>&1; }
say() { echo "[$(($(date +%s) - T0))s] $*"; }

if ((INSTALL)); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq build-essential cmake pkg-config openmpi-bin libopenmpi-dev mpich \
    libmpich-dev libgloo-dev python3 gnuplot-nox >/dev/null || exit 1
fi
[[ -d $SHARED_BENCH/src ]] || { echo "compare.sh: no harness at $SHARED_BENCH" >&2; exit 1; }

# ---- libnexar and nexar-perf ------------------------------------------------
say "building libnexar in $NEXAR_BUILD"
if [[ ! -f $NEXAR_BUILD/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$NEXAR_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
fi
cmake --build "$NEXAR_BUILD" -j"$(nproc)" --target nexar nexar-perf shm_floor vmstate >/dev/null || exit 1
PERF=$NEXAR_BUILD/tools/nexar-perf VMSTATE=$NEXAR_BUILD/bench/vmstate

# ---- the harness, in a scratch copy -----------------------------------------
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/nexar-compare.XXXXXX")
((KEEP)) || trap 'rm -rf "$SCRATCH"' EXIT
cp -r "$SHARED_BENCH" "$SCRATCH/bench"
chmod -R u+w "$SCRATCH/bench"
cp "$ROOT/bench/backend_nexar.c" "$SCRATCH/bench/src/backend_nexar.c"
H=$SCRATCH/bench
LOGS=$H/logs
mkdir -p "$LOGS" "$OUT"
say "building the harness in $H"
make -s -C "$H" build/bench_nexar NEXAR_CFLAGS="-I$ROOT/include" \
  NEXAR_LIBS="-L$NEXAR_BUILD -lnexar -Wl,-rpath,$NEXAR_BUILD" >"$LOGS/build-nexar.log" 2>&1 || {
  cat "$LOGS/build-nexar.log" >&2
  exit 1
}

IMPLS=(nexar)
for p in $PEERS; do
  case $p in
    ompi-tcp | ompi-default)
      if has mpirun.openmpi && make -s -C "$H" build/bench_openmpi >"$LOGS/build-ompi.log" 2>&1
      then IMPLS+=("$p"); else echo "skipping $p (no Open MPI; try --install)"; fi ;;
    mpich)
      if has mpirun.mpich && make -s -C "$H" build/bench_mpich >"$LOGS/build-mpich.log" 2>&1
      then IMPLS+=(mpich); else echo "skipping mpich (no MPICH; try --install)"; fi ;;
    gloo)
      if make -s -C "$H" build/bench_gloo >"$LOGS/build-gloo.log" 2>&1
      then IMPLS+=(gloo-ring gloo-hd)
      else echo "skipping gloo (no libgloo-dev; try --install)"; fi ;;
    *) echo "compare.sh: unknown peer $p" >&2; exit 2 ;;
  esac
done

CSV=$OUT/compare.csv MEM=$OUT/memory.csv FAIL=$OUT/failures.txt MCP=$OUT/memcpy.csv
VMS=$OUT/vmstate.csv
rm -f "$CSV" "$MEM" "$FAIL" "$MCP"
echo "label,impl,nranks,coll,oneway_ns,after_ns" >"$VMS"
# the physical limit the large sizes are judged against, measured in this run
if make -s -C "$H" build/memcpy_bw >"$LOGS/build-memcpy.log" 2>&1; then
  say "memcpy bandwidth (one thread)"
  "$H/build/memcpy_bw" 0.6 >"$MCP" || rm -f "$MCP"
fi
# and libnexar's own large all_reduce scheme without the library (n = 2)
FLOOR=$OUT/shm_floor.txt
rm -f "$FLOOR"
if [[ -x $NEXAR_BUILD/bench/shm_floor ]]; then
  say "the two-rank all_reduce scheme, the data's exchange alone and its one-way move, without the library (bench/shm_floor.c)"
  { "$NEXAR_BUILD/bench/shm_floor" 64 512 15 allreduce &&
    "$NEXAR_BUILD/bench/shm_floor" 64 512 15 exchange &&
    "$NEXAR_BUILD/bench/shm_floor" 64 512 15 oneway; } >"$FLOOR" 2>&1 || rm -f "$FLOOR"
fi
ROOTARG=()
[[ $(id -u) == 0 ]] && ROOTARG=(--allow-run-as-root)

# cmd_for IMPL NP COLL: sets CMD (empty: this impl does not run that coll)
cmd_for() {
  local impl=$1 np=$2 coll=$3
  CMD=()
  case $impl in
    nexar) CMD=(env BENCH_VARIANT=quic "$H/scripts/launch-local.sh" "$np" "$H/build/bench_nexar") ;;
    ompi-tcp)
      CMD=(env BENCH_VARIANT=tcp mpirun.openmpi "${ROOTARG[@]}" --oversubscribe -np "$np"
        --mca btl "tcp,self" --mca pml ob1 "$H/build/bench_openmpi") ;;
    ompi-default)
      CMD=(env BENCH_VARIANT=default mpirun.openmpi "${ROOTARG[@]}" --oversubscribe -np "$np"
        "$H/build/bench_openmpi") ;;
    mpich) CMD=(env BENCH_VARIANT=default mpirun.mpich -np "$np" "$H/build/bench_mpich") ;;
    gloo-ring | gloo-hd)
      # Gloo's allreduce algorithms are separate variants; its other
      # collectives run once, as variant "tcp" (no reduce_scatter in Gloo)
      local algo=${impl#gloo-}
      if [[ $coll == allreduce ]]; then
        CMD=(env BENCH_GLOO_ALGO="$algo" "$H/scripts/launch-local.sh" "$np" "$H/build/bench_gloo")
      elif [[ $impl == gloo-ring && $coll != reduce_scatter ]]; then
        CMD=(env BENCH_VARIANT=tcp "$H/scripts/launch-local.sh" "$np" "$H/build/bench_gloo")
      fi ;;
  esac
}

runs=0 fails=0
for ((rep = 1; rep <= REPS; rep++)); do
  order=("${IMPLS[@]}")
  if ((rep % 2 == 0)); then # reverse the order in even repetitions
    order=()
    for ((k = ${#IMPLS[@]} - 1; k >= 0; k--)); do order+=("${IMPLS[k]}"); done
  fi
  for np in $NPS; do
    for coll in $COLLS; do
      say "rep $rep/$REPS n=$np $coll: ${order[*]}"
      for impl in "${order[@]}"; do
        cmd_for "$impl" "$np" "$coll"
        ((${#CMD[@]})) || continue
        log=$LOGS/$impl-n$np.log
        echo "+ ${CMD[*]} -e $MAXSZ -t $BUDGET -l rep$rep -c $coll" >>"$log"
        runs=$((runs + 1))
        before=$("$VMSTATE")
        timeout -k 10 "$RUN_TIMEOUT" "${CMD[@]}" -e "$MAXSZ" -t "$BUDGET" -o "$CSV" -l "rep$rep" \
          -c "$coll" >>"$log" 2>&1
        rc=$?
        echo "rep$rep,$impl,$np,$coll,$before,$("$VMSTATE")" >>"$VMS"
        if ((rc != 0)); then
          fails=$((fails + 1))
          echo "rep$rep $impl n=$np $coll: rc=$rc$( ((rc == 124)) && echo ' (timeout)')" |
            tee -a "$FAIL"
          tail -3 "$log" | sed 's/^/    /' >>"$FAIL"
        fi
      done
    done
  done
done

# ---- peak memory of one rank, 256 MiB allreduce (nexar-perf --procs) --------
if [[ -n $MEM_SIZE ]]; then
  echo "nranks,bytes,peak_rss_kib,ratio,command" >"$MEM"
  iters=2
  ((QUICK)) && iters=1
  for np in $NPS; do
    cmd=("$PERF" all_reduce --procs -n "$np" -b "$MEM_SIZE" -e "$MEM_SIZE" -w 1 -i "$iters" -c 1)
    say "memory: ${cmd[*]#"$NEXAR_BUILD"/}"
    out=$(timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" 2>&1)
    rc=$?
    echo "$out" >>"$LOGS/memory.log"
    line=$(grep '^# Peak RSS' <<<"$out")
    if ((rc != 0)) || [[ -z $line ]]; then
      echo "memory n=$np: rc=$rc" | tee -a "$FAIL"
      continue
    fi
    mib=$(sed -E 's/.*: ([0-9.]+) MiB.*/\1/' <<<"$line")
    ratio=$(sed -E 's/.*, ([0-9.]+) x the largest.*/\1/' <<<"$line")
    kib=$(awk -v m="$mib" 'BEGIN { printf "%d", m * 1024 }')
    shown="nexar-perf all_reduce --procs -n $np -b $MEM_SIZE -e $MEM_SIZE -w 1 -i $iters -c 1"
    echo "$np,$(numfmt --from=iec "$MEM_SIZE"),$kib,$ratio,$shown" >>"$MEM"
  done
fi

# ---- environment, summary, chart --------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  echo "command: $COMMAND"
  echo "knobs: NPS='$NPS' REPS=$REPS COLLS='$COLLS' MAXSZ=$MAXSZ BUDGET=$BUDGET" \
    "PEERS='$PEERS' MEM_SIZE=$MEM_SIZE"
  echo "libnexar: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "(+ working tree), build $(basename "$NEXAR_BUILD")"
  echo "kernel: $(uname -r)"
  echo "cpus: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "mem: $(free -g | awk '/Mem:/{print $2}') GiB"
  dpkg-query -W -f='${Package} ${Version}\n' openmpi-bin mpich libgloo-dev 2>/dev/null
  echo "runs: $runs, failed: $fails, wall: $(($(date +%s) - T0)) s"
} >"$OUT/env.txt"
say "summarizing"
python3 "$ROOT/bench/plot.py" "$CSV" --memory "$MEM" --env "$OUT/env.txt" --out "$OUT" || exit 1
# allreduce bus bandwidth at the largest size against the memcpy limit
if [[ -s $MCP ]]; then
  lim=$(awk -F, '$2 == 67108864 { print $3 }' "$MCP")
  {
    echo
    echo "## Physical limit (this run)"
    echo
    echo "One-thread memcpy: $(awk -F, '{ printf "%s%s B %s GB/s", (NR > 1 ? ", " : ""), $2, $3 }' "$MCP")."
    echo
    echo "| n | nexar allreduce busbw at the largest size (GB/s) | memcpy 64 MiB (GB/s) | memcpy / nexar |"
    echo "|---|---|---|---|"
    awk -F, -v lim="$lim" '$1 == "nexar/quic" && $3 == "allreduce" { if ($4 + 0 > big[$2] + 0) { big[$2] = $4; bw[$2] = $7 } }
      END { for (n in bw) if (bw[n] > 0) printf "| %s | %.3f | %s | %.2f |\n", n, bw[n], lim, lim / bw[n] }' \
      "$OUT/medians.csv" | sort -t'|' -k2 -n
    if [[ -s $FLOOR ]]; then
      echo
      echo "The same scheme as libnexar's two-rank 64 MiB all_reduce without the library" \
        "(each rank copies a 512 KiB chunk into shared memory, then adds the other's;" \
        "bench/shm_floor.c): $(sed -n 's/^shm_floor allreduce: //p' "$FLOOR")."
      echo
      echo "The two vectors only exchanged through shared memory the same way, each" \
        "chunk copied over the other's instead of added (a bound on any scheme that moves" \
        "the data through shared memory: each rank must receive 64 MiB):" \
        "$(sed -n 's/^shm_floor exchange: //p' "$FLOOR")."
      echo
      echo "One way only (rank 0 copies in, rank 1 copies out, as a broadcast; set" \
        "beside memcpy, the cost of moving the data between the cores; beside the" \
        "exchange, that of moving it both ways at once):" \
        "$(sed -n 's/^shm_floor oneway: //p' "$FLOOR")."
    fi
  } >>"$OUT/ratio.md"
fi
# which state each run met (vmstate.csv), beside the ratios
python3 - "$VMS" >>"$OUT/ratio.md" <<'PY' || exit 1
import csv, sys
SLOW = 150  # ns one way: this VM's fast states are ~20 and ~50 ns, its slow one ~250
def state(ns):
    return "?" if not ns.isdigit() else "S" if int(ns) >= SLOW else "f"
def run(r):  # f: fast before and after; S: slow; f>S or S>f: it changed
    a, b = state(r["oneway_ns"]), state(r["after_ns"])
    return a if a == b else a + ">" + b
runs, impls = {}, []
for r in csv.DictReader(open(sys.argv[1])):
    runs.setdefault((int(r["nranks"]), r["coll"]), {}).setdefault(r["impl"], []).append(run(r))
    if r["impl"] not in impls:
        impls.append(r["impl"])
print("\n## The VM's state at each run\n")
print("Per run, repetitions in order: f if a cache line's one-way time between two "
      "CPUs (bench/vmstate.c) was fast just before the run and just after it, S if it "
      "was slow (%d ns or more: every library's same-host times are 2-4x longer then), "
      "f>S or S>f if the state changed during the run (vmstate.csv has the times). A "
      "ratio between a median run in the slow state and one in a fast state compares "
      "the states, not the libraries.\n" % SLOW)
print("| n | collective | " + " | ".join(impls) + " |")
print("|---|---|" + "---|" * len(impls))
for (n, coll), m in sorted(runs.items()):
    print("| %d | %s | %s |" % (n, coll, " | ".join(" ".join(m.get(i, [])) for i in impls)))
PY
say "done: $OUT/ratio.md $OUT/ratio.png"
((KEEP)) && echo "scratch kept: $H (logs in $LOGS)"
[[ -s $FAIL ]] && { echo "some runs failed:"; cat "$FAIL"; }
exit 0
