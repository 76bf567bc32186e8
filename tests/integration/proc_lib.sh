# Shared set-up of the process tests (sourced): proc_scratch NAME makes the
# scratch directory D (/tmp/NAME.XXXXXX), the PIDS array whose processes are
# killed on exit (with D removed), and a fresh NEXAR_CLUSTER_TOKEN.
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$D"
}
proc_scratch() {
  D=$(mktemp -d "/tmp/$1.XXXXXX")
  PIDS=()
  trap cleanup EXIT
  export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
}
