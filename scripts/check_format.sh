#!/usr/bin/env bash
# Every tracked C source and header is formatted as .clang-format says
# (clang-format from Debian 12, version 14: scripts/deps.sh installs it).
# Names each file that is not; exits 1 if any.
set -eu
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format not found (scripts/deps.sh installs it)"
  exit 1
fi
fail=0
for f in $(git ls-files '*.c' '*.h' '*.cpp'); do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "check_format: $f is not clang-formatted (clang-format -i $f)"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "check_format: ok"
exit "$fail"
