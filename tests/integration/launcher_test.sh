#!/usr/bin/env bash
# nexar_init_from_env under the real launchers, each started here:
#   launcher_test.sh slurm|slurm_pmix|mpirun|mpiexec|torchrun|env <launch_worker>
# slurm, slurm_pmix: a one-node Slurm cluster on this host (munged, slurmctld,
#   slurmd with test-owned config, state and sockets under a temporary
#   directory, stopped at exit), then srun -n 4 (Slurm's variables; again
#   with NEXAR_SEED_PORT; srun --mpi=pmi2, whose PMI_FD speaks PMI-1; the
#   README's batch script through sbatch --wait), or
#   srun --mpi=pmix -n 4 (skipped, 77, when Slurm's pmix plugin is absent).
# mpirun: Open MPI's mpirun -np 4 --oversubscribe (PMIx; then with libpmix
#   made unloadable: refused, and the documented OMPI_COMM_WORLD_* fallback
#   with NEXAR_SEED_HOST/NEXAR_SEED_PORT). mpiexec: MPICH's
#   Hydra mpiexec -n 4 (PMI-1 on PMI_FD). torchrun: --no_python
#   --nproc_per_node=4, with the agent store (static rendezvous) and without
#   (c10d rendezvous).
# env: refusals with no hang: a missing token under mpirun, an inconsistent
#   world under mpirun and in Slurm and torchrun variables, ranks that
#   disagree on the world, the token file's permissions.
# Every run checks the launcher the library says it used (NEXAR_DEBUG=info)
# and that each of the 4 ranks got the launcher's rank and finished allreduce,
# point-to-point and RPC. A launcher that is not installed fails the test
# (scripts/deps.sh installs them all).
set -u
MODE=$1
W=$(realpath "$2")
T=$(mktemp -d /tmp/nxlaunch.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ -f "$T/munged.pid" ]; then
    local m
    m=$(cat "$T/munged.pid")
    kill "$m" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$m" 2>/dev/null || break; sleep 0.1; done
  fi
  for _ in 1 2 3 4 5; do rm -rf "$T" 2>/dev/null && break; sleep 0.2; done
}
trap cleanup EXIT
. "$(dirname "$0")/port_lib.sh"
export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
unset NEXAR_SEED_ADDR MASTER_ADDR MASTER_PORT RANK WORLD_SIZE PMI_FD PMIX_RANK SLURM_PROCID

need() {
  for b in "$@"; do
    command -v "$b" >/dev/null 2>&1 ||
      { echo "FAIL: $b is not installed (run scripts/deps.sh)"; exit 1; }
  done
}

# check <launcher name> <output file> [world]: every rank ok, the right launcher
check() {
  local want=$1 f=$2 n=${3:-4} rc=0
  for ((r = 0; r < n; r++)); do
    grep -q "launch_worker: rank $r of $n ok" "$f" || { echo "FAIL: rank $r of $n not ok"; rc=1; }
  done
  local used
  used=$(grep -cF "init_from_env: launcher $want" "$f")
  [ "$used" = "$n" ] || { echo "FAIL: $used of $n ranks used launcher $want"; rc=1; }
  if [ $rc != 0 ]; then cat "$f"; exit 1; fi
}

# refused <pattern> <output file> <rc>: the run failed, quickly, saying why
# Fixed ports are drawn from 20000-31999, below the kernel's ephemeral range
# (32768-60999): a port there can be taken by any other test's connection,
# and a rank that then reaches someone else's listener waits out its timeout.
refused() {
  local pat=$1 f=$2 rc=$3
  if [ "$rc" = 0 ] || [ "$rc" = 124 ] || ! grep -q -- "$pat" "$f"; then
    echo "FAIL: expected a refusal matching '$pat' (rc $rc):"; cat "$f"; exit 1
  fi
}

ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)

mpirun_run() { # env... -- extra args
  timeout 60 mpirun.openmpi "${ROOT[@]}" --oversubscribe -np 4 \
    -x NEXAR_DEBUG=info -x LAUNCH_RANK_VAR=OMPI_COMM_WORLD_RANK \
    -x LAUNCH_WORLD_VAR=OMPI_COMM_WORLD_SIZE "$@" "$W"
}

start_slurm() {
  need munged slurmctld slurmd srun sinfo
  if [ "$(id -u)" != 0 ]; then echo "SKIP: a Slurm cluster needs root here"; exit 77; fi
  local h p
  h=$(hostname)
  p=$(free_port 2) || exit 1
  head -c 1024 /dev/urandom > "$T/munge.key"
  chmod 400 "$T/munge.key"
  /usr/sbin/munged --force --key-file="$T/munge.key" --socket="$T/munge.sock" \
    --pid-file="$T/munged.pid" --log-file="$T/munged.log" --seed-file="$T/munge.seed" ||
    { echo "FAIL: munged did not start"; cat "$T/munged.log"; exit 1; }
  mkdir -p "$T/state" "$T/spool"
  cat > "$T/slurm.conf" <<CONF
ClusterName=nxtest
SlurmctldHost=$h
SlurmctldPort=$p
SlurmdPort=$((p + 1))
AuthType=auth/munge
AuthInfo=socket=$T/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$h CPUs=4 State=UNKNOWN
PartitionName=nx Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$T/slurm.conf
  /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" > "$T/ctld.out" 2>&1 &
  PIDS+=($!)
  /usr/sbin/slurmd -D -f "$SLURM_CONF" -N "$h" > "$T/slurmd.out" 2>&1 &
  PIDS+=($!)
  # slurmd registers within a second on an idle machine; next to other tests
  # on 2 cores it has been seen 'unknown*' (not responding) past 20 s: wait
  # up to 60 s, and restart slurmd once half-way
  local s="" k
  for k in $(seq 300); do
    s=$(sinfo -h -o %T 2>/dev/null)
    [ "$s" = idle ] && return 0
    if [ "$k" = 150 ]; then
      kill "${PIDS[-1]}" 2>/dev/null
      wait "${PIDS[-1]}" 2>/dev/null
      /usr/sbin/slurmd -D -f "$SLURM_CONF" -N "$h" >> "$T/slurmd.out" 2>&1 &
      PIDS+=($!)
    fi
    sleep 0.2
  done
  echo "FAIL: the Slurm node is '$s', not idle, after 60 s"
  tail -20 "$T"/slurmctld.log "$T"/slurmd.log "$T"/*.out 2>/dev/null
  exit 1
}

case $MODE in
slurm)
  start_slurm
  timeout 60 srun -n 4 env NEXAR_DEBUG=info LAUNCH_RANK_VAR=SLURM_PROCID \
    LAUNCH_WORLD_VAR=SLURM_NTASKS "$W" > "$T/out" 2>&1
  check Slurm "$T/out"
  echo "ok srun -n 4 (Slurm variables, seed on the first node of SLURM_STEP_NODELIST)"
  # a second step of the same job... and an explicit port
  timeout 60 srun -n 4 env NEXAR_DEBUG=info NEXAR_SEED_PORT=$(free_port) \
    LAUNCH_RANK_VAR=SLURM_PROCID LAUNCH_WORLD_VAR=SLURM_NTASKS "$W" > "$T/out" 2>&1
  check Slurm "$T/out"
  grep -q "(port NEXAR_SEED_PORT)" "$T/out" || { echo "FAIL: NEXAR_SEED_PORT not used"; exit 1; }
  echo "ok srun -n 4 with NEXAR_SEED_PORT"
  # Slurm's pmi2 plugin also answers the PMI-1 wire protocol on PMI_FD
  timeout 60 srun --mpi=pmi2 -n 4 env NEXAR_DEBUG=info LAUNCH_RANK_VAR=SLURM_PROCID \
    LAUNCH_WORLD_VAR=SLURM_NTASKS "$W" > "$T/out" 2>&1
  check PMI-1 "$T/out"
  echo "ok srun --mpi=pmi2 -n 4 (PMI-1 on Slurm's PMI_FD)"
  # the README's batch script, through sbatch (one node here, so --ntasks)
  cat > "$T/job.sh" <<JOB
#!/bin/bash
#SBATCH --ntasks=4
export NEXAR_CLUSTER_TOKEN_FILE=$T/.nexar-token-\$SLURM_JOB_ID
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > "\$NEXAR_CLUSTER_TOKEN_FILE")
export NEXAR_DEBUG=info LAUNCH_RANK_VAR=SLURM_PROCID LAUNCH_WORLD_VAR=SLURM_NTASKS
srun $W
rm -f "\$NEXAR_CLUSTER_TOKEN_FILE"
JOB
  timeout 90 env -u NEXAR_CLUSTER_TOKEN sbatch --wait -o "$T/job.out" "$T/job.sh" > "$T/sbatch" 2>&1 ||
    { echo "FAIL: sbatch"; cat "$T/sbatch" "$T/job.out" "$T/job.sh"; exit 1; }
  check Slurm "$T/job.out"
  ls "$T"/.nexar-token-* >/dev/null 2>&1 && { echo "FAIL: the job's token file is left"; exit 1; }
  echo "ok sbatch of the README's batch script (a token file per job, srun)"
  ;;
slurm_pmix)
  start_slurm
  if ! srun --mpi=list 2>&1 | grep -q pmix; then
    echo "SKIP: Slurm's pmix plugin is not installed (srun --mpi=list: $(srun --mpi=list 2>&1 | tr '\n' ' '))"
    exit 77
  fi
  timeout 60 srun --mpi=pmix -n 4 env NEXAR_DEBUG=info LAUNCH_RANK_VAR=SLURM_PROCID \
    LAUNCH_WORLD_VAR=SLURM_NTASKS "$W" > "$T/out" 2>&1
  check PMIx "$T/out"
  echo "ok srun --mpi=pmix -n 4 (seed address through PMIx)"
  ;;
mpirun)
  need mpirun.openmpi
  mpirun_run -x NEXAR_CLUSTER_TOKEN > "$T/out" 2>&1
  check PMIx "$T/out"
  echo "ok mpirun.openmpi -np 4 (PMIx)"
  # without a usable libpmix: refused, naming the documented fallback ...
  mpirun_run -x NEXAR_CLUSTER_TOKEN -x NEXAR_PMIX_LIB=/nonexistent/libpmix.so.2 > "$T/out" 2>&1
  refused "cannot be loaded.*or set NEXAR_SEED_HOST and NEXAR_SEED_PORT" "$T/out" $?
  # ... which forms the world from OMPI_COMM_WORLD_RANK/SIZE when asked for
  # (the port is checked free, yet a test running alongside may bind it
  # first: such a run gets one more attempt on another port)
  for attempt in 1 2; do
    mpirun_run -x NEXAR_CLUSTER_TOKEN -x NEXAR_PMIX_LIB=/nonexistent/libpmix.so.2 \
      -x NEXAR_SEED_HOST=127.0.0.1 -x NEXAR_SEED_PORT=$(free_port) > "$T/out" 2>&1
    grep -q "Address already in use" "$T/out" || break
    echo "note: the seed port was taken before rank 0 could listen (attempt $attempt)"
  done
  check "Open MPI variables (PMIx unusable" "$T/out"
  echo "ok mpirun without libpmix: refused, or the OMPI_COMM_WORLD_* fallback with NEXAR_SEED_HOST/PORT"
  ;;
mpiexec)
  need mpiexec.mpich
  timeout 60 mpiexec.mpich -n 4 -genv NEXAR_DEBUG info -genv LAUNCH_RANK_VAR PMI_RANK \
    -genv LAUNCH_WORLD_VAR PMI_SIZE "$W" > "$T/out" 2>&1
  check PMI-1 "$T/out"
  echo "ok mpiexec.mpich -n 4 (PMI-1 on PMI_FD)"
  ;;
torchrun)
  need torchrun
  p=$(free_port 6) || exit 1
  # --redirects/--tee: torchrun 1.13 on Python 3.11 crashes otherwise
  timeout 90 torchrun --no_python --nproc_per_node=4 --redirects 1 --tee 1 --master_port $p \
    env NEXAR_DEBUG=info LAUNCH_RANK_VAR=RANK LAUNCH_WORLD_VAR=WORLD_SIZE "$W" > "$T/out" 2>&1
  check torchrun "$T/out"
  grep -q "MASTER_PORT + 1" "$T/out" || { echo "FAIL: agent store not detected"; cat "$T/out"; exit 1; }
  echo "ok torchrun --nproc_per_node=4 (agent store on MASTER_PORT, seed on MASTER_PORT + 1)"
  # with c10d rendezvous torchrun picks MASTER_PORT itself: it binds a free
  # port, closes it and hands the number to the workers, so another process
  # may take it first (seen once in CI: "listen on 0.0.0.0:P: Address already
  # in use" on rank 0, twice in a row once); that is torchrun's race, so it
  # gets more attempts, each on a new rendezvous port, and a taken port's
  # holder is shown
  for attempt in 1 2 3 4; do
    timeout 90 torchrun --no_python --nproc_per_node=4 --redirects 1 --tee 1 --rdzv_backend c10d \
      --rdzv_endpoint 127.0.0.1:$(free_port) --rdzv_id nx$$a$attempt \
      env NEXAR_DEBUG=info LAUNCH_RANK_VAR=RANK LAUNCH_WORLD_VAR=WORLD_SIZE "$W" > "$T/out" 2>&1
    grep -q "Address already in use" "$T/out" || break
    taken=$(grep -o "listen on 0.0.0.0:[0-9]*" "$T/out" | head -1 | cut -d: -f2)
    echo "note: torchrun's MASTER_PORT $taken was taken before rank 0 could listen (attempt $attempt):"
    [ -n "$taken" ] && ss -Htuanp "( sport = :$taken )" 2>/dev/null | head -5
  done
  check torchrun "$T/out"
  grep -q "(port MASTER_PORT)" "$T/out" || { echo "FAIL: seed not on MASTER_PORT"; cat "$T/out"; exit 1; }
  echo "ok torchrun --rdzv_backend c10d (no agent store: seed on MASTER_PORT)"
  ;;
env)
  need mpirun.openmpi
  start=$SECONDS
  (unset NEXAR_CLUSTER_TOKEN; mpirun_run) > "$T/out" 2>&1
  refused "NEXAR_CLUSTER_TOKEN or NEXAR_CLUSTER_TOKEN_FILE" "$T/out" $?
  echo "ok mpirun without a token: refused naming both variables"
  mpirun_run -x NEXAR_CLUSTER_TOKEN -x NEXAR_WORLD_SIZE=3 > "$T/out" 2>&1
  refused "inconsistent world: NEXAR_WORLD_SIZE=3 but PMIx says the world size is 4" "$T/out" $?
  echo "ok mpirun with NEXAR_WORLD_SIZE=3: refused"
  need mpiexec.mpich
  timeout 60 mpiexec.mpich -n 4 -genv NEXAR_WORLD_SIZE 3 "$W" > "$T/out" 2>&1
  refused "inconsistent world: NEXAR_WORLD_SIZE=3 but PMI-1 says the world size is 4" "$T/out" $?
  echo "ok mpiexec with NEXAR_WORLD_SIZE=3: refused"
  # rank 0 alone cannot host the seed (its port is taken): the others learn
  # why through the launcher instead of waiting
  p=$(free_port) || exit 1
  /usr/bin/python3 -c "import socket,time;s=socket.socket();s.bind(('0.0.0.0',$p));s.listen();time.sleep(60)" &
  busy=$!
  PIDS+=($busy)
  sleep 0.5
  timeout 60 mpiexec.mpich -n 4 -genv NEXAR_SEED_PORT $p "$W" > "$T/out" 2>&1
  rc=$?
  kill $busy 2>/dev/null
  refused "init_from_env (PMI-1): rank 0: " "$T/out" $rc
  n=$(grep -c "init_from_env (PMI-1): rank 0: " "$T/out")
  [ "$n" = 3 ] || { echo "FAIL: $n of 3 ranks told why rank 0 failed"; cat "$T/out"; exit 1; }
  echo "ok mpiexec with rank 0's seed port taken: every rank told why, no hang"
  slurm_env=(SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_JOB_ID=7 SLURM_STEP_ID=0
    SLURM_STEP_NODELIST=localhost)
  out=$(env "${slurm_env[@]}" SLURM_STEP_NODELIST='node[01-04' timeout 20 "$W" 2>&1)
  refused "SLURM_STEP_NODELIST 'node\[01-04': '\[' without '\]'" <(echo "$out") $?
  out=$(env "${slurm_env[@]}" SLURM_PROCID=4 timeout 20 "$W" 2>&1)
  refused "rank 4 is outside a world of 4 (SLURM_PROCID=4, SLURM_NTASKS=4" <(echo "$out") $?
  out=$(env "${slurm_env[@]}" NEXAR_WORLD_SIZE=2 timeout 20 "$W" 2>&1)
  refused "inconsistent world: NEXAR_WORLD_SIZE=2 but Slurm" <(echo "$out") $?
  out=$(env "${slurm_env[@]}" SLURM_STEP_NUM_NODES=2 timeout 20 "$W" 2>&1)
  refused "names 1 nodes, SLURM_STEP_NUM_NODES=2" <(echo "$out") $?
  echo "ok Slurm variables: malformed node list, rank outside the world, inconsistent sizes"
  # ranks that disagree on the world: the one that differs is refused by the
  # seed at once, the seed's own rank gives up after its connect timeout
  p=$(free_port 6) || exit 1
  env MASTER_ADDR=127.0.0.1 MASTER_PORT=$p RANK=0 WORLD_SIZE=2 NEXAR_CONNECT_TIMEOUT_MS=4000 \
    timeout 30 "$W" > "$T/r0" 2>&1 &
  r0=$!
  sleep 0.5
  env MASTER_ADDR=127.0.0.1 MASTER_PORT=$p RANK=1 WORLD_SIZE=3 timeout 30 "$W" > "$T/r1" 2>&1
  refused "joiner expects world size 3, the seed forms 2" "$T/r1" $?
  wait $r0
  refused "init_from_env\|did not form\|TIMEOUT" "$T/r0" $?
  echo "ok ranks disagreeing on WORLD_SIZE: refused, no hang"
  # token file: refused when group- or world-readable, used when private
  printf '%s\n' "$NEXAR_CLUSTER_TOKEN" > "$T/tok"
  chmod 644 "$T/tok"
  out=$(env -u NEXAR_CLUSTER_TOKEN NEXAR_CLUSTER_TOKEN_FILE="$T/tok" MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$((p + 5)) RANK=0 WORLD_SIZE=1 timeout 20 "$W" 2>&1)
  refused "accessible by group or others (mode 0644)" <(echo "$out") $?
  out=$(NEXAR_CLUSTER_TOKEN_FILE="$T/tok" MASTER_ADDR=127.0.0.1 MASTER_PORT=$((p + 5)) RANK=0 \
    WORLD_SIZE=1 timeout 20 "$W" 2>&1)
  refused "both NEXAR_CLUSTER_TOKEN and NEXAR_CLUSTER_TOKEN_FILE are set" <(echo "$out") $?
  chmod 600 "$T/tok"
  out=$(env -u NEXAR_CLUSTER_TOKEN NEXAR_CLUSTER_TOKEN_FILE="$T/tok" MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$((p + 5)) RANK=0 WORLD_SIZE=1 NEXAR_DEBUG=info timeout 20 "$W" 2>&1) ||
    { echo "FAIL: a private token file was not accepted: $out"; exit 1; }
  grep -q "launch_worker: rank 0 of 1 ok" <<<"$out" || { echo "FAIL: $out"; exit 1; }
  echo "ok NEXAR_CLUSTER_TOKEN_FILE: 0644 refused, 0600 used, both variables refused"
  echo "env refusals took $((SECONDS - start)) s"
  ;;
*)
  echo "usage: $0 slurm|slurm_pmix|mpirun|mpiexec|torchrun|env <launch_worker>"
  exit 2
  ;;
esac
