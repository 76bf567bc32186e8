#!/usr/bin/env bash
# Architecture checks run by the test command (and CI):
#  1. dependencies point one way: a file under src/<layer>/ may include only
#     headers of its own folder or of a lower layer (README, "Design");
#  2. no file under src/ is longer than 800 lines.
# Known exceptions are listed below with the reason; anything else fails.
set -eu
cd "$(dirname "$0")/.."

# Lower number = lower layer. Folders on one level may not include each other.
level() {
  case "$1" in
  core | nexar) echo 0 ;; # nexar: the public header
  reduce) echo 1 ;;
  proto) echo 2 ;;
  transport) echo 3 ;;
  runtime) echo 4 ;;
  collective | p2p | rpc) echo 5 ;;
  cluster) echo 6 ;;
  *) echo -1 ;;
  esac
}

# "file include" pairs allowed against the rule, each with its reason. None
# today: a link reports to the engine through the callbacks the engine
# registers (transport/quic.h), never by including it.
allowed() {
  case "$1 $2" in
  esac
  return 1
}

fail=0
for f in $(find src -name '*.[ch]' | sort); do
  from=$(echo "$f" | cut -d/ -f2)
  lf=$(level "$from")
  if [ "$lf" -lt 0 ]; then
    echo "check_layers: $f: folder '$from' has no layer (add it to scripts/check_layers.sh)"
    fail=1
    continue
  fi
  for inc in $(sed -n 's/^#include "\([a-z_0-9]*\/[a-z_0-9]*\.h\)".*/\1/p' "$f"); do
    to=${inc%%/*}
    [ "$to" = "$from" ] && continue
    lt=$(level "$to")
    if [ "$lt" -lt 0 ] || [ "$lt" -ge "$lf" ]; then
      if allowed "$f" "$inc"; then continue; fi
      echo "check_layers: $f includes $inc: $from (layer $lf) may not depend on $to (layer $lt)"
      fail=1
    fi
  done
  n=$(wc -l <"$f")
  if [ "$n" -gt 800 ]; then
    echo "check_layers: $f has $n lines (limit 800): split it"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "check_layers: ok"
exit "$fail"
