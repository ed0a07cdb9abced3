#!/bin/sh
# Issue 24's storage scenarios, for one ckpt binary (BENCHMARKS.md,
# "Storage"): run it with two binaries to compare them.
#
#   benches/storage.sh path/to/ckpt [scratch-dir]
#
# 1. the agent's shell call creates a 200 MB binary file, a second appends
#    4 bytes: the size of .agent-runtime/ and of `ckpt diff`'s output;
# 1b. the same, but the 4 bytes are written over the middle of the file;
# 2. a 200 MB untracked file the agent never touches and `ckpt exec -- true`
#    as the first call: its time and the size of .agent-runtime/.
# Needs git, GNU du and date; writes about 800 MB under the scratch dir
# (default: a new directory under ${TMPDIR:-/tmp}), removed at the end.
set -eu
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
scratch=${2:-$(mktemp -d "${TMPDIR:-/tmp}/ckpt-storage.XXXXXX")}
trap 'rm -rf "$scratch"' EXIT
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

mkdir -p "$scratch/big" && cd "$scratch/big"
git init -q .
"$bin" init >/dev/null
head -c 200000000 /dev/urandom > "$scratch/noise.bin"
t=$(now); "$bin" exec -- cp "$scratch/noise.bin" big.bin >/dev/null
echo "big file: the call that creates it took $(since "$t") s (cp alone: see below)"
t=$(now); cp "$scratch/noise.bin" "$scratch/copy.bin"; echo "big file: cp alone took $(since "$t") s"
rm "$scratch/copy.bin"
"$bin" exec -- sh -c 'printf abcd >> big.bin' >/dev/null
m=$(du -sb .agent-runtime/artifacts/chunks 2>/dev/null | cut -f1 || true)
echo "big file: .agent-runtime/ $(du -sb .agent-runtime | cut -f1) bytes" \
    "(blobs $(du -sb .agent-runtime/artifacts/blobs | cut -f1)," \
    "chunk manifests ${m:-0}," \
    "patch artifacts $(du -sb .agent-runtime/artifacts/patches | cut -f1))"
t=$(now); n=$("$bin" diff | wc -c)
echo "big file: ckpt diff printed $n bytes in $(since "$t") s"

mkdir -p "$scratch/middle" && cd "$scratch/middle"
git init -q .
"$bin" init >/dev/null
"$bin" exec -- sh -c 'head -c 200000000 /dev/urandom > big.bin' >/dev/null
"$bin" exec -- sh -c 'printf abcd | dd of=big.bin bs=1 seek=100000000 conv=notrunc 2>/dev/null' >/dev/null
echo "4 bytes over the middle: .agent-runtime/ $(du -sb .agent-runtime | cut -f1) bytes"
cd "$scratch" && rm -rf middle

mkdir -p "$scratch/first" && cd "$scratch/first"
git init -q .
head -c 200000000 /dev/urandom > data.bin
"$bin" init >/dev/null
t=$(now); "$bin" exec -- true >/dev/null
echo "first use: ckpt exec -- true took $(since "$t") s;" \
    ".agent-runtime/ $(du -sb .agent-runtime | cut -f1) bytes"
