#!/usr/bin/env bash
# nexar-info: sections, SIMD kernels and the chosen one, where each setting
# came from (default, environment, launcher), the launcher it would use and
# the ones it would ignore, the token's source but never the token, and exit
# 1 naming a malformed variable.   info_test.sh <nexar-info>
set -u
I=$1
fail() { echo "FAIL: $1"; echo "$out"; exit 1; }
unset NEXAR_SEED_ADDR MASTER_ADDR PMIX_RANK PMI_FD SLURM_PROCID NEXAR_CLUSTER_TOKEN NEXAR_CLUSTER_TOKEN_FILE
out=$("$I") || fail "plain run"
for s in version build links launcher config; do grep -q "^\[$s\]" <<<"$out" || fail "no [$s]"; done
grep -q "^library *$("$I" | head -1 | sed 's/.*libnexar //')" <<<"$out" || fail "version"
grep -Eq "^SIMD kernels +available: scalar.*; chosen: (scalar|avx2|avx512)" <<<"$out" || fail "simd"
grep -Eq "^PMIx +(available|unavailable): " <<<"$out" || fail "pmix line"
grep -q "^CUDA adapter " <<<"$out" || fail "cuda line"
grep -Eq "^interface +lo +ipv4 +127.0.0.1" <<<"$out" || fail "loopback link"
grep -q "^used *none" <<<"$out" || fail "no launcher expected"
grep -Eq "^NEXAR_COLLECTIVE_TIMEOUT_MS +30000 +default$" <<<"$out" || fail "default source"
out=$(NEXAR_REDUCE_IMPL=scalar NEXAR_COLLECTIVE_TIMEOUT_MS=1234 "$I" --build --config) || fail "env run"
grep -q "chosen: scalar (NEXAR_REDUCE_IMPL)" <<<"$out" || fail "NEXAR_REDUCE_IMPL not honoured"
grep -Eq "^NEXAR_COLLECTIVE_TIMEOUT_MS +1234 +environment$" <<<"$out" || fail "environment source"
grep -Eq "^NEXAR_REDUCE_IMPL +scalar +environment$" <<<"$out" || fail "knob source"
tok=tok$RANDOM$RANDOM
out=$(SLURM_PROCID=2 SLURM_NTASKS=4 SLURM_STEP_ID=0 SLURM_JOB_ID=9 SLURM_STEP_NODELIST='gpu[07-08],cpu1' \
  MASTER_ADDR=h NEXAR_CLUSTER_TOKEN=$tok "$I" --launcher --config) || fail "slurm run"
grep -q "^used *Slurm" <<<"$out" || fail "Slurm not detected"
grep -q "^ignored *torchrun" <<<"$out" || fail "torchrun not listed as ignored"
grep -q "gpu07 (first of 3 nodes in SLURM_STEP_NODELIST)" <<<"$out" || fail "seed host"
grep -q "^seed port *20144 (derived" <<<"$out" || fail "derived port"
grep -Eq "^rank +2 +launcher \(Slurm: SLURM_PROCID\)" <<<"$out" || fail "rank source"
grep -Eq "^world_size +4 +launcher \(Slurm: SLURM_NTASKS\)" <<<"$out" || fail "world source"
grep -q "from NEXAR_CLUSTER_TOKEN" <<<"$out" || fail "token source"
grep -q "$tok" <<<"$out" && fail "the token was printed"
d=$(mktemp -d)
printf '%s\n' "$tok" > "$d/t"
chmod 600 "$d/t"
out=$(NEXAR_CLUSTER_TOKEN_FILE=$d/t "$I" --launcher --config) || fail "token file run"
grep -q "from NEXAR_CLUSTER_TOKEN_FILE" <<<"$out" || fail "token file source"
grep -q "$tok" <<<"$out" && fail "the token file's token was printed"
rm -rf "$d"
out=$(NEXAR_RING_MAX_WORLD=x "$I" --config 2>&1) && fail "malformed variable accepted"
grep -q "NEXAR_RING_MAX_WORLD='x'" <<<"$out" || fail "malformed variable not named"
echo "ok nexar-info"
