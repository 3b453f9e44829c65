# examples/tests/lib.sh: sourced by the programs' shell tests (examples/CMakeLists.txt runs each as
# `bash tests/<name>.sh ...`). fail records a failed check and lets the test go on, so that one run
# reports every failure; finish ends the test with its verdict.
failures=0

# fail MESSAGE: prints "FAIL: MESSAGE" and counts it.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# finish NAME: prints "NAME: all checks passed" and exits 0, or "NAME: N failure(s)" and exits 1.
finish() {
  if [ "$failures" -eq 0 ]; then
    echo "$1: all checks passed"
    exit 0
  fi
  echo "$1: $failures failure(s)"
  exit 1
}
