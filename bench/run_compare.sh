#!/usr/bin/env bash
# ddl against PyTorch on the same training step, same threads, in interleaved rounds: each round runs
# ddl's benchmark once and then PyTorch's script once, so that both sides meet the same load.
#   bench/run_compare.sh [--net mlp|conv|lm] [--precision float|bf16] [--rounds R] [build-dir] [threads]
#   (defaults: mlp, float, 3, build-bench, 2)
#   mlp : ddl_bench_net BM_NetStep_Paired   beside bench/pytorch/bench_deltanet.py
#         (784 -> 256, 4 Delta blocks of hidden 1024, B = 128; plain and delta)
#   conv: ddl_bench_conv_block BM_ConvNetStep beside bench/pytorch/bench_conv_deltanet.py
#         (ddl-cifar's ConvDeltaNet, B = 128; plain and delta)
#   lm  : ddl_bench_lm BM_LmStep_Paired       beside bench/pytorch/bench_lm.py
#         (DeltaLM d 256, L 4, 4 heads, T 256, B 16, vocab 256, float; additive dv1, delta dv1, delta cc
#         (dv 4); PyTorch's variants dv1-additive, dv1, cc; its first round checks its model against
#         tools/ddl_torch.py's DeltaLM (--verify), later rounds skip that)
# --precision bf16 times ddl's step under its bf16 policy on oneDNN (the benchmark's precision:1); where the
# CPU has no native bf16 the script says so ("not measured on this CPU", exit 0) without running PyTorch.
# Reported per side: the median of the rounds' medians and the minimum of the rounds' minima; PyTorch
# in its fastest mode, whichever it is (bench/pytorch/modes.py: eager, torch.jit.script, and bf16
# autocast with float master weights where the CPU has native bf16 products). Both sides run with OMP_WAIT_POLICY=passive (spinning
# threads steal the cores they wait for on a shared machine); PyTorch with
# torch.set_num_threads(threads), and its script refuses (exit 3) when it would run on the reference BLAS.
# Load flatters ddl (PyTorch slows down more under it), so before each round the machine must be quiet:
# other processes busy less than --max-busy cores (default 0.3) over a 3 s sample of /proc/stat. The
# script waits up to --quiet-wait seconds (default 900) per round for that; a round that starts on a busy
# machine makes the summary print the figures but no ratio.
# tools/run-bench.sh installs what this needs and builds the benchmarks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
net=mlp
precision=float
rounds=3
max_busy=0.3
quiet_wait=900
while [ $# -gt 0 ]; do
  case $1 in
    --net) net=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --max-busy) max_busy=$2; shift 2 ;;
    --quiet-wait) quiet_wait=$2; shift 2 ;;
    *) break ;;
  esac
done
build=${1:-build-bench}
threads=${2:-2}
case $net in
  mlp) exe="$build/bench/ddl_bench_net" filter='BM_NetStep_Paired' script="$here/pytorch/bench_deltanet.py" ;;
  conv) exe="$build/bench/ddl_bench_conv_block" filter='BM_ConvNetStep' script="$here/pytorch/bench_conv_deltanet.py" ;;
  lm) exe="$build/bench/ddl_bench_lm" filter='BM_LmStep_Paired' script="$here/pytorch/bench_lm.py" ;;
  *) echo "run_compare.sh: --net expects mlp, conv or lm, got '$net'" >&2; exit 1 ;;
esac
case $precision in
  float) filter="$filter/.*precision:0" ;;
  bf16) filter="$filter/.*precision:1" ;;
  *) echo "run_compare.sh: --precision expects float or bf16, got '$precision'" >&2; exit 1 ;;
esac
# The residual kinds / variants reported, in order; the first is the baseline of the ratio lines.
if [ "$net" = lm ]; then variants="additive delta cc"; else variants="plain delta"; fi
[ -x "$exe" ] || { echo "run_compare.sh: $exe not found; build it first (tools/run-bench.sh does)" >&2; exit 1; }
command -v jq >/dev/null || { echo "run_compare.sh: needs jq (sudo apt-get install jq)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Cores kept busy by other processes over 3 s (nothing of ours runs meanwhile), from /proc/stat's cpu line.
busy_cores() {
  local a b
  a=$(head -1 /proc/stat)
  sleep 3
  b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN {
    split(a, x, " "); split(b, y, " "); total = 0; idle = 0
    for (i = 2; i <= 9; i++) total += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%.2f", (total > 0 ? n * (total - idle) / total : 0) }'
}
# Waits until busy_cores < max_busy (at most quiet_wait s); prints the last sample; fails if never quiet.
wait_quiet() {
  local start=$SECONDS busy
  while :; do
    busy=$(busy_cores)
    if awk -v b="$busy" -v m="$max_busy" 'BEGIN { exit !(b < m) }'; then echo "$busy"; return 0; fi
    if [ $((SECONDS - start)) -ge "$quiet_wait" ]; then echo "$busy"; return 1; fi
    sleep 10
  done
}
loaded_rounds=""

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $net step (ddl in $precision), $threads threads, $rounds interleaved rounds," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), tree $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"
: >"$tmp/ddl.txt"
: >"$tmp/torch.txt"
for r in $(seq 1 "$rounds"); do
  if busy=$(wait_quiet); then
    echo "# round $r: other processes busy $busy cores before it"
  else
    echo "# round $r: the machine stayed busy ($busy cores of other processes after ${quiet_wait} s of waiting)"
    loaded_rounds="$loaded_rounds $r"
  fi
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$exe" --benchmark_filter="$filter" --benchmark_out="$tmp/ddl$r.json" \
    --benchmark_out_format=json >/dev/null 2>"$tmp/ddl.err" || { cat "$tmp/ddl.err" >&2; exit 1; }
  # A benchmark that skipped (bf16 where the CPU has none) says why: nothing to compare on this CPU.
  skipped=$(jq -r '[.benchmarks[] | select(.error_occurred == true) | .error_message] | first // empty' "$tmp/ddl$r.json")
  if [ -n "$skipped" ]; then
    echo "$net step in $precision: not measured on this CPU ($skipped)"
    exit 0
  fi
  # One line per residual kind: "<residual> <median_ms> <min_ms>" of this run.
  if [ "$net" = mlp ]; then
    jq -r '.benchmarks[] | select(.name | startswith("BM_NetStep_Paired")) |
           "plain \(.plain_ms) \(.min_plain_ms)\ndelta \(.delta_ms) \(.min_delta_ms)"' "$tmp/ddl$r.json" >>"$tmp/ddl.txt"
  elif [ "$net" = lm ]; then
    jq -r '.benchmarks[] | select(.name | startswith("BM_LmStep_Paired")) |
           "additive \(.additive_ms) \(.min_additive_ms)\ndelta \(.delta_ms) \(.min_delta_ms)\ncc \(.cc_ms) \(.min_cc_ms)"' \
      "$tmp/ddl$r.json" >>"$tmp/ddl.txt"
  else  # Google Benchmark's time per iteration of the run (ms) serves as both
    jq -r '.benchmarks[] | select(.name | startswith("BM_ConvNetStep")) |
           (.real_time / (if .time_unit == "ns" then 1e6 elif .time_unit == "us" then 1e3 else 1 end)) as $ms |
           "\(if (.name | test("delta:1")) then "delta" else "plain" end) \($ms) \($ms)"' \
      "$tmp/ddl$r.json" >>"$tmp/ddl.txt"
  fi
  extra=()
  [ "$net" = lm ] && [ "$r" != 1 ] && extra=(--no-verify)
  if ! OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive /usr/bin/python3 "$script" --threads "$threads" "${extra[@]}" \
    >"$tmp/torch$r.txt" 2>"$tmp/torch.err"; then
    cat "$tmp/torch$r.txt" "$tmp/torch.err" >&2
    exit 3
  fi
  [ "$r" = 1 ] && grep '^#' "$tmp/torch1.txt"
  # PyTorch's lm variants under ddl's names: dv1-additive = additive, dv1 = delta, cc = cc.
  awk -v net="$net" '$1 == "pytorch" { sub("median_ms=", "", $4); sub("min_ms=", "", $5); v = $3
      if (net == "lm") v = v == "dv1-additive" ? "additive" : v == "dv1" ? "delta" : v
      print v, $2, $4, $5 }' "$tmp/torch$r.txt" >>"$tmp/torch.txt"
done

# ddl.txt: residual median min; torch.txt: residual mode median min. Medians of medians, minima of minima;
# PyTorch's figure is its fastest mode's (by medians), its minimum the least over all modes.
awk -v net="$net" -v variants="$variants" -v loaded="$loaded_rounds" '
  function med(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  FNR == 1 { file++ }
  file == 1 { dm[$1] = dm[$1] " " $2; if (!($1 in dn) || $3 + 0 < dn[$1]) dn[$1] = $3 + 0 }
  file == 2 { k = $1 " " $2; tm[k] = tm[k] " " $3; if (!(k in tn) || $4 + 0 < tn[k]) tn[k] = $4 + 0
              if (!($2 in seen)) { seen[$2] = 1; modes[++nm] = $2 } }
  END {
    nv = split(variants, vs, " ")
    for (r = 1; r <= nv; r++) {
      res = vs[r]
      d = med(dm[res]); best = -1; bmin = -1; line = ""
      for (m = 1; m <= nm; m++) {
        k = res " " modes[m]
        if (!(k in tm)) continue
        e = med(tm[k]); line = line sprintf(", %s median %.2f ms", modes[m], e)
        if (best < 0 || e < best) { best = e; mode = modes[m] }
        if (bmin < 0 || tn[k] < bmin) bmin = tn[k]
      }
      printf "%s %s step: ddl median %.2f ms, min %.2f ms; pytorch%s, min %.2f ms\n", net, res, d, dn[res], substr(line, 2), bmin
      if (loaded == "") printf "  pytorch fastest (%s) / ddl: %.2f by medians, %.2f by minima\n", mode, best / d, bmin / dn[res]
      else printf "  no ratio: round(s)%s started on a busy machine, where load flatters ddl\n", loaded
      ddl[res] = d
    }
    for (r = 2; r <= nv; r++)
      printf "ddl %s / ddl %s = %.2f (medians), %.2f (minima)\n", vs[r], vs[1], ddl[vs[r]] / ddl[vs[1]], dn[vs[r]] / dn[vs[1]]
  }' "$tmp/ddl.txt" "$tmp/torch.txt"
