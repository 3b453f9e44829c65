#!/bin/bash
# ddl-tokenize on the fixture vocabulary of tests/fixtures/bpe (its merges are listed in
# tests/test_bpe_tokenizer.cpp): the exact bytes of the token files, the train / validation cut at a
# line start, and refusals (bad options: exit 1; a vocabulary too large for uint16 or a missing input:
# exit 2, leaving an existing output as it was; an output that is an input: exit 1; a FIFO: exit 2).
# Usage: tokenize.sh DDL_TOKENIZE WORK_DIR FIXTURE_DIR
set -u
exe=$1 work=$2 fix=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "tokenize: FAILED: $*"; exit 1; }
hex() { od -An -v -tx1 "$1" | tr -d ' \n'; }
tok=(--vocab "$fix/vocab.json" --merges "$fix/merges.txt")

# "hello world\n" -> he ll o | Ġworld | \n = 257 259 111 267 10; "the café\n" -> t he | Ġ c a f é | \n
# = 116 257 32 99 97 102 271 10 (é is the merge "Ã ©", id 271). uint16 little-endian.
printf 'hello world\nthe caf\xc3\xa9\n' > text.txt
"$exe" "${tok[@]}" --in text.txt --out all.bin > all.log || fail "plain run: exit $?"
[ "$(hex all.bin)" = "010103016f000b010a007400010120006300610066000f010a00" ] || fail "all.bin is $(hex all.bin)"
grep -q "all.bin: 13 tokens from 22 bytes" all.log || fail "summary: $(cat all.log)"

# 22 bytes, fraction 0.5: the cut at byte 11 moves to the next line start, byte 12.
"$exe" "${tok[@]}" --in text.txt --out train.bin --val-out val.bin --val-fraction 0.5 > split.log || fail "split run: exit $?"
[ "$(hex train.bin)" = "010103016f000b010a00" ] || fail "train.bin is $(hex train.bin)"
[ "$(hex val.bin)" = "7400010120006300610066000f010a00" ] || fail "val.bin is $(hex val.bin)"

# Chunked reading: 7-byte chunks give the ids of the text read whole (the chunks are cut only where
# no pre-token can cross, ddl::gpt2SafeCut).
for i in $(seq 1 200); do printf 'hello world\nthe  caf\xc3\xa9 12\n  it'"'"'s\n\xff\xfe x\n\n'; done > long.txt
"$exe" "${tok[@]}" --in long.txt --out whole.bin > /dev/null || fail "long.txt: exit $?"
"$exe" "${tok[@]}" --in long.txt --out chunked.bin --chunk-bytes 7 > /dev/null || fail "--chunk-bytes 7: exit $?"
cmp -s whole.bin chunked.bin || fail "7-byte chunks changed the ids"
"$exe" "${tok[@]}" --in long.txt --out t1.bin --val-out v1.bin --val-fraction 0.3 > /dev/null || fail "split 1"
"$exe" "${tok[@]}" --in long.txt --out t2.bin --val-out v2.bin --val-fraction 0.3 --chunk-bytes 5 > /dev/null || fail "split 2"
cmp -s t1.bin t2.bin && cmp -s v1.bin v2.bin || fail "5-byte chunks changed the split or the ids"

# <|endoftext|> (id 272) only with --specials.
printf 'the<|endoftext|>' > eot.txt
"$exe" "${tok[@]}" --specials --in eot.txt --out eot.bin > /dev/null || fail "--specials: exit $?"
[ "$(hex eot.bin)" = "740001011001" ] || fail "eot.bin is $(hex eot.bin)"

# Refusals.
"$exe" "${tok[@]}" --in text.txt --out x.bin --val-fraction 0.2 2> usage.err; rc=$?
[ $rc = 1 ] && grep -q -- "--val-fraction needs --val-out" usage.err || fail "--val-fraction alone: exit $rc, $(cat usage.err)"
"$exe" --vocab "$fix/vocab.json" --in text.txt --out x.bin 2> usage2.err; rc=$?
[ $rc = 1 ] && grep -q "give either --vocab and --merges, or --tokenizer" usage2.err || fail "--vocab alone: exit $rc"
cp all.bin keep.bin
"$exe" "${tok[@]}" --in missing.txt --out keep.bin 2> missing.err; rc=$?
[ $rc = 2 ] && grep -q "missing.txt': not found" missing.err || fail "missing input: exit $rc, $(cat missing.err)"
cmp -s all.bin keep.bin || fail "a failed run changed its output"
sed 's/"<|endoftext|>": 272/"<|endoftext|>": 70000/' "$fix/vocab.json" > wide.json
"$exe" --vocab wide.json --merges "$fix/merges.txt" --in text.txt --out keep.bin 2> wide.err; rc=$?
[ $rc = 2 ] && grep -q "70001 ids, more than the 65536" wide.err || fail "wide vocabulary: exit $rc, $(cat wide.err)"
cmp -s all.bin keep.bin || fail "a refused run changed its output"

# An output that is an input (by file identity: another spelling, a hard link) or the other output is
# refused (exit 1) before anything is read or written; every file stays as it was.
refused() {  # refused 'TEXT' ARGS...: exit 1 naming TEXT within 10 s
  local text=$1
  shift
  timeout -k 5 10 "$exe" "$@" > refused.log 2>&1
  local rc=$?
  [ $rc = 1 ] && grep -qF -- "$text" refused.log || fail "ddl-tokenize $*: exit $rc, expected 1 and '$text': $(cat refused.log)"
}
cp text.txt self.txt
ln self.txt self-link.txt
cp -r "$fix" tokdir
cp tokdir/vocab.json vocab.keep
refused "--out 'self.txt' is the file --in reads ('self.txt')" "${tok[@]}" --in self.txt --out self.txt
refused "--out './self.txt' is the file --in reads" "${tok[@]}" --in self.txt --out ./self.txt
refused "--out 'self-link.txt' is the file --in reads" "${tok[@]}" --in self.txt --out self-link.txt
refused "--val-out 'self.txt' is the file --in reads" "${tok[@]}" --in self.txt --out t.bin --val-out self.txt
refused "--out 'tokdir/vocab.json' is the file --tokenizer reads" --tokenizer tokdir --in text.txt --out tokdir/vocab.json
refused "--out 'tokdir/merges.txt' is the file --merges reads" --vocab tokdir/vocab.json --merges tokdir/merges.txt \
  --in text.txt --out tokdir/merges.txt
refused "--out 'same.bin' and --val-out './same.bin' are one file" "${tok[@]}" --in text.txt --out same.bin \
  --val-out ./same.bin
cmp -s text.txt self.txt && cmp -s tokdir/vocab.json vocab.keep && cmp -s tokdir/merges.txt "$fix/merges.txt" ||
  fail "a refused run changed its input"
[ ! -e same.bin ] && [ ! -e t.bin ] || fail "a refused run wrote an output"

# A FIFO (or any other non-regular file) as --in is refused at once, not waited on.
mkfifo fifo.txt
timeout -k 5 10 "$exe" "${tok[@]}" --in fifo.txt --out fifo.bin > fifo.log 2>&1; rc=$?
[ $rc = 2 ] && grep -q "fifo.txt': not found or not a regular file" fifo.log || fail "--in FIFO: exit $rc, $(cat fifo.log)"

ls -A | grep -qE '(\.tmp\.|\.ddl-tmp\.)[0-9]+$' && fail "a temporary file was left behind"
echo "tokenize: all checks passed"
