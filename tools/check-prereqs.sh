#!/usr/bin/env bash
# Checks what `make demo` / `make test` need before anything is built, and says what to do.
# Usage: tools/check-prereqs.sh [PYTHON]
set -u
PY="${1:-python3}"
fail=0
say() { printf 'dslog prerequisites: %s\n' "$*" >&2; }

if ! command -v "$PY" >/dev/null 2>&1; then
  say "no '$PY' on PATH. Install Python 3.11 or newer (e.g. 'apt-get install python3 python3-venv')."
  fail=1
elif ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  say "'$PY' is $("$PY" -V 2>&1); dslog-dagster needs Python 3.11 or newer. Run 'make PYTHON=python3.11 ...'."
  fail=1
elif ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  say "'$PY' cannot create virtual environments. Install the venv module (e.g. 'apt-get install python3-venv')."
  fail=1
fi

CXX_BIN="${CXX:-c++}"
if ! command -v "$CXX_BIN" >/dev/null 2>&1; then
  say "no C++ compiler ('$CXX_BIN'). The ProvRC kernels are C++17: install g++ >= 9 or clang++ >= 10 (e.g. 'apt-get install g++')."
  fail=1
else
  tmp="$(mktemp -d)"
  printf '#include <optional>\nint main(){std::optional<int> x{1};return *x-1;}\n' > "$tmp/t.cpp"
  if ! "$CXX_BIN" -std=c++17 "$tmp/t.cpp" -o "$tmp/t" >/dev/null 2>&1; then
    say "'$CXX_BIN' cannot compile C++17. Install g++ >= 9 or clang++ >= 10, or point CXX at one."
    fail=1
  fi
  rm -rf "$tmp"
fi

if ! command -v java >/dev/null 2>&1; then
  say "warning: no 'java' on PATH. The Spark parts of the pipeline need Java 17 (e.g. 'apt-get install openjdk-17-jre-headless'); the NumPy parts run without it."
else
  jv="$(java -version 2>&1 | head -n1 | sed -E 's/.*version "([0-9]+).*/\1/')"
  if [ "${jv:-0}" -lt 17 ] 2>/dev/null; then
    say "warning: java is version ${jv}; the Spark parts need Java 17 or newer."
  fi
  if ! command -v javac >/dev/null 2>&1 && ! [ -x "${JAVA_HOME:-/nonexistent}/bin/javac" ]; then
    say "warning: no 'javac' (a JDK). Spark aggregations with shuffled keys then find their row ids by a slower join, and the id-tap tests fail; install e.g. 'apt-get install openjdk-17-jdk-headless'."
  fi
fi
exit $fail
