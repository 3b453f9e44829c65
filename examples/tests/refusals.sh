#!/usr/bin/env bash
# ddl-mnist refuses bad numbers, unusable output folders and NaN training with a clear message and
# its documented exit status, and never hands a path to a shell (gnuplot gets it as an argument).
#   refusals.sh DDL_MNIST TINY_IDX_DIR WORK_DIR
set -uo pipefail
exe=$1 data=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1  # the default --out (out/mnist) of the refused runs lands here
small=(--data "$data" --depth 2 --hidden 32 --threads 1)  # plus --width 16 --batch 32 --lr 0.005 unless tested
runEnv=()  # extra environment of the program under test (PATH for gnuplot)
failures=0

# expect STATUS 'TEXT' ARGS...: ddl-mnist ARGS exits with STATUS and prints TEXT (fixed string).
expect() {
  local status=$1 text=$2
  shift 2
  local out rc
  out=$(env "${runEnv[@]}" "$exe" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: ddl-mnist $* -> exit $rc (expected $status), output:"
    echo "$out" | tail -5
    echo "  expected to contain: $text"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $rc: $(grep -F -- "$text" <<<"$out" | head -1)"
  fi
}

# Numbers: checked for syntax, integrality and range before anything runs.
expect 1 "--epochs expects an integer in [1, 1000000], got '2.7'" "${small[@]}" --epochs 2.7
expect 1 "--epochs expects an integer in [1, 1000000], got '4294967297'" "${small[@]}" --epochs 4294967297
expect 1 "--epochs expects an integer in [1, 1000000], got '1e300'" "${small[@]}" --epochs 1e300
expect 1 "--warmup expects an integer in [0, 9223372036854775807], got '-5'" "${small[@]}" --warmup -5
expect 1 "--val expects an integer in [0, 9223372036854775807], got '-1'" "${small[@]}" --val -1
expect 1 "--batch expects an integer in [1, 1048576], got '0'" "${small[@]}" --batch 0
expect 1 "--width expects an integer in [1, 65536], got 'nan'" "${small[@]}" --width nan
expect 1 "--lr expects a finite number in [0, 1.7976931348623157e+308], got 'nan'" "${small[@]}" --lr nan
expect 1 "--seed expects an integer in [0, 18446744073709551615], got '-1'" "${small[@]}" --seed -1
expect 1 "--precision expects one of float, bf16, bf16-emulated, auto, got 'half'" "${small[@]}" --precision half
# bf16 where it cannot run natively (an AVX2 CPU, played by limiting oneDNN; or a build without oneDNN): refused
# with the reason and the ways out.
runEnv=(DNNL_MAX_CPU_ISA=AVX2)
expect 1 "(--precision bf16-emulated gives its numerics on any CPU, slowly; auto keeps float)" "${small[@]}" --precision bf16
runEnv=()
expect 1 "--val 400 leaves no training samples (the training set has 400)" "${small[@]}" --val 400
expect 1 "--audit gathers the gate statistics over the validation set after every epoch, and --val 0 holds none out" "${small[@]}" --val 0 --audit
expect 1 "--label-smoothing expects a number in [0, 1), got '1'" "${small[@]}" --label-smoothing 1
expect 1 "--beta2 expects a number in [0, 1), got '1'" "${small[@]}" --beta2 1
expect 1 "option --epochs needs a value" "${small[@]}" --epochs
expect 1 "unknown option '--epoch'" "${small[@]}" --epoch 3

# Outputs that cannot be written (these work for root too: chmod would not stop root).
touch "$work/a-file"
expect 2 "cannot create output folder '$work/a-file/out'" "${small[@]}" --epochs 1 --out "$work/a-file/out"
expect 2 "cannot write to output folder '/proc/self'" "${small[@]}" --epochs 1 --out /proc/self
# A full disk (a 4 KiB file-size limit): the new checkpoint cannot be written, the previous one stays
# byte-identical and no temporary file or lock is left behind. (400 samples, 33 held out for
# validation by default: 12 steps of 32 per epoch; the resume extends the run by a second epoch.)
"$exe" "${small[@]}" --width 16 --batch 32 --epochs 1 --out "$work/full" >/dev/null 2>&1
cp "$work/full/checkpoint.safetensors" "$work/previous.safetensors"
out=$( (ulimit -f 4 && "$exe" "${small[@]}" --width 16 --batch 32 --epochs 2 --resume --out "$work/full") 2>&1)
rc=$?
if [ "$rc" -ne 2 ] || ! grep -qF "cannot write the checkpoint of step 24" <<<"$out" || ! grep -qF "File too large" <<<"$out"; then
  echo "FAIL: full disk -> exit $rc: $out"
  failures=$((failures + 1))
elif ! cmp -s "$work/full/checkpoint.safetensors" "$work/previous.safetensors" ||
  [ "$(ls "$work/full" | grep -cv -e '^checkpoint.safetensors$' -e '^metrics.csv$' -e '^curves.gp$' -e '^curves.png$')" -ne 0 ]; then
  echo "FAIL: full disk: the previous checkpoint changed or a temporary was left: $(ls "$work/full")"
  failures=$((failures + 1))
else
  echo "ok: full disk -> $rc: $(grep -F "cannot write" <<<"$out" | cut -c1-150)"
fi

# Missing data and a missing checkpoint.
expect 2 "hint: install Fashion-MNIST" --data "$work/no-such-dir"
# Training and test images of different sizes: named as a mismatch between the splits.
be32() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
mkdir -p "$work/mixed"
find "$data" -maxdepth 1 -type f -exec cp {} "$work/mixed/" \;
rm -f "$work/mixed"/t10k-images*
count=$(cat "$work/mixed"/t10k-labels* | { gzip -dcf 2>/dev/null || true; } | od -An -tu1 -j4 -N4 |
  awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4}')
{ be32 2051; be32 "$count"; be32 3; be32 3; head -c $((count * 9)) /dev/zero; } >"$work/mixed/t10k-images-idx3-ubyte"
expect 2 "but the test images are 1 x 3 x 3 (9 values): both splits must have one image size" \
  --data "$work/mixed" --depth 2 --hidden 32 --threads 1 --epochs 1 --out "$work/mixed-out"
expect 2 "hint: --resume and --eval-only need a checkpoint.safetensors" "${small[@]}" --resume --out "$work/none"
# The oriented-gradient histograms (--input pixels+hog, the default) need one-channel images whose sides
# are multiples of 4, and are computed once, so per-step augmentation is refused with them.
mkdir -p "$work/three"
for part in train t10k; do
  cp "$data/$part-labels"* "$work/three/"
  n=$(cat "$work/three/$part-labels"* | { gzip -dcf 2>/dev/null || true; } | od -An -tu1 -j4 -N4 |
    awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4}')
  { be32 2051; be32 "$n"; be32 3; be32 3; head -c $((n * 9)) /dev/urandom; } >"$work/three/$part-images-idx3-ubyte"
done
expect 2 "sides are multiples of the cell (4), got 1 x 3 x 3 (use --input pixels)" \
  --data "$work/three" --depth 2 --hidden 32 --threads 1 --epochs 1 --out "$work/three-out"
expect 0 "final test accuracy" --data "$work/three" --input pixels --width 16 --depth 1 --hidden 32 --threads 1 \
  --epochs 1 --out "$work/three-pixels"
expect 1 "--augment flip transforms the images at every step, but the oriented-gradient histograms of --input pixels+hog" \
  "${small[@]}" --augment flip
expect 1 "--input expects one of pixels, pixels+hog" "${small[@]}" --input hog
small+=(--width 16 --batch 32)

# NaN/Inf: a learning rate of 1e30 blows the weights up; training stops with exit status 3.
expect 3 "ddl::TrainingLoop: training stopped in epoch 1, batch 2: step 2 failed" "${small[@]}" --epochs 2 --lr 1e30 --out "$work/nan"
# Without the guard the NaN reaches an operation that refuses it: still exit 3, not a usage error.
expect 3 "is not finite" "${small[@]}" --epochs 2 --lr 1e30 --no-nan-guard --out "$work/nan-unguarded"
small+=(--lr 0.005)

# gnuplot gets the paths as arguments, never through a shell: a stand-in gnuplot records its
# arguments, and a quote-laden output folder must not run the command hidden in it.
mkdir -p "$work/bin"
cat >"$work/bin/gnuplot" <<'GP'
#!/bin/sh
printf '%s\n' "$@" >"$(dirname "$0")/gnuplot-args"
GP
chmod +x "$work/bin/gnuplot"
odd="$work/it's \$(touch $work/PWNED-1) \`touch $work/PWNED-2\`';touch $work/PWNED-3;'"
runEnv=("PATH=$work/bin:$PATH")
expect 0 "curves: $odd/curves.png" "${small[@]}" --epochs 1 --out "$odd"
if ls "$work" | grep -q PWNED; then
  echo "FAIL: a command hidden in --out ran"
  failures=$((failures + 1))
fi
if [ "$(cat "$work/bin/gnuplot-args" 2>/dev/null)" != "$(printf '%s\n' -c "$odd/curves.gp" "$odd/metrics.csv" "$odd/curves.png")" ]; then
  echo "FAIL: gnuplot got other arguments:"
  cat "$work/bin/gnuplot-args"
  failures=$((failures + 1))
fi
# Without gnuplot: one quiet line, success.
runEnv=(PATH=/nonexistent)
expect 0 "gnuplot not found: no curves.png" "${small[@]}" --epochs 1 --out "$work/no-gnuplot"

[ "$failures" -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
