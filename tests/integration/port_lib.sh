# free_port [count] (sourced): print a port P such that P .. P+count-1 have
# no TCP or UDP socket bound here now. Ports come from 20000-31999, below
# Linux's ephemeral range (32768-60999), so an outgoing connection cannot
# take one later; the check keeps two tests that run at once (ctest -j) from
# listening on the same random port, as launcher.mpirun did once in CI
# ("listen on 0.0.0.0:27199: Address already in use").
free_port() {
  local n=${1:-1} p i busy
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % (12000 - n)))
    busy=0
    for ((i = 0; i < n; i++)); do
      if [ -n "$(ss -Htuan "( sport = :$((p + i)) )" 2>/dev/null)" ]; then busy=1; break; fi
    done
    [ $busy = 0 ] && { echo "$p"; return 0; }
  done
  echo "free_port: no free run of $n ports in 200 tries" >&2
  return 1
}
