#!/usr/bin/env bash
# tools/compile-cost.sh [--all] [WORK_DIR]: what compiling ddl costs, in CPU seconds (user + system) and
# peak memory per translation unit, measured with /usr/bin/time (GNU time; Debian package `time`).
#   1. the one-file program bench/compile/lm_program.cpp (a small DeltaLM trained, saved, reloaded and
#      sampled) with g++ -O2, header-only and in the fast-build mode (ddl::compiled);
#   2. the libraries' and examples' translation units as the build compiles them (Release);
#   3. with --all: every translation unit of the README's test build (tools/run-tests.sh's configuration).
# A benchmark, not a test: the figures depend on the machine and its load (docs/results.md has them).
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
[ "${1:-}" = "--all" ] && { all=1; shift; }
work=${1:-build-compile-cost}
mkdir -p "$work"
work=$(cd "$work" && pwd)
command -v /usr/bin/time >/dev/null || tools/install-deps.sh time

# A compiler launcher that appends "cpu_seconds peak_kb object" for every compile to $work/units.log.
cat >"$work/timed" <<'SH'
#!/usr/bin/env bash
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
exec /usr/bin/time -a -o "$DDL_COMPILE_LOG" -f "%U %S %M $out" "$@"
SH
chmod +x "$work/timed"
export DDL_COMPILE_LOG="$work/units.log"
rm -f "$DDL_COMPILE_LOG"

targets=(ddl_compiled ddl-mnist ddl-cifar ddl-text ddl-ablation)
native=()
[ "$all" -eq 1 ] && targets=(all) && native=(-DDDL_NATIVE=OFF)  # as tools/run-tests.sh builds
cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DDDL_WARNINGS_AS_ERRORS=ON "${native[@]}" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$work/timed" >/dev/null
cmake --build "$work/build" --target clean >/dev/null
cmake --build "$work/build" -j "$(nproc)" --target "${targets[@]}" >/dev/null

# The one-file program, compiled alone as a user would (the flags of ddl::openmp and ddl::json).
flags=(-std=c++17 -O2 -DNDEBUG -fopenmp -DDDL_WITH_OPENMP=1 -DDDL_WITH_JSON=1 -Iinclude -I/usr/include/eigen3)
prog=bench/compile/lm_program.cpp
/usr/bin/time -a -o "$DDL_COMPILE_LOG" -f "%U %S %M lm_program (header-only)" \
  g++ "${flags[@]}" -c "$prog" -o "$work/lm_program_header_only.o"
/usr/bin/time -a -o "$DDL_COMPILE_LOG" -f "%U %S %M lm_program (ddl::compiled)" \
  g++ "${flags[@]}" -DDDL_EXTERN_TEMPLATES=1 -c "$prog" -o "$work/lm_program_compiled.o"
g++ -fopenmp "$work/lm_program_header_only.o" -o "$work/lm_program_header_only"
g++ -fopenmp "$work/lm_program_compiled.o" "$work/build/libddl_compiled.a" -o "$work/lm_program_compiled"
a=$("$work/lm_program_header_only" "$work/a.safetensors")
b=$("$work/lm_program_compiled" "$work/b.safetensors")
[ "$a" = "$b" ] || { echo "compile-cost: the two builds of lm_program print different results:\n$a\n$b" >&2; exit 1; }

# Table: one line per unit, then the sums per group.
awk '{ cpu = $1 + $2; mb = $3 / 1024; name = $4; for (i = 5; i <= NF; ++i) name = name " " $i
       sub(/.*CMakeFiles\//, "", name)
       printf "%8.1f s %7.0f MB  %s\n", cpu, mb, name
       group = name; sub(/\.dir\/.*/, "", group); sub(/ \(.*/, "", group)
       if (group ~ /^ddl_tests?_/) group = "tests"; else if (group ~ /^ddl_bench_/) group = "benchmarks"
       sum[group] += cpu; if (mb > peak[group]) peak[group] = mb; total += cpu }
     END { print "--- per group: CPU seconds, largest unit"
           for (g in sum) printf "%8.1f s %7.0f MB  %s\n", sum[g], peak[g], g
           printf "%8.1f s             all units\n", total }' "$DDL_COMPILE_LOG"
echo "lm_program output: $a"
