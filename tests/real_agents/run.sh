#!/bin/sh
# The real-agent end-to-end suite: real Claude Code, Codex and Gemini CLI
# (pinned, from npm, cached), each driven by a scripted mock of its model API
# on 127.0.0.1 inside a network namespace with nothing but loopback.
#
#   tests/real_agents/run.sh [claude|codex|gemini|all]... [--only 1-basic,...] [--keep]
#                            [--no-capture] [--overhead N]
#
# Needs: root (unshare -n -p), node >= 20, npm reaching the npm registry once
# (to fill the cache), the Rust toolchain. See tests/real_agents/README.md.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${CKPT_REAL_AGENTS_CACHE:-$HOME/.cache/ckpt-real-agents}
mkdir -p "$cache/runs"

# 1. ckpt itself (static binary; the harness copies it before using it).
if [ -z "${CKPT_BIN:-}" ]; then
  (cd "$repo" && cargo build-static --quiet)
  CKPT_BIN=$repo/target/x86_64-unknown-linux-gnu/release/ckpt
fi
export CKPT_BIN CKPT_REAL_AGENTS_CACHE=$cache

# 2. The clients, pinned, installed once into the cache and reused.
install() { # dir package@version
  if [ ! -x "$cache/$1/node_modules/.bin/${3}" ]; then
    echo "installing $2 into $cache/$1" >&2
    mkdir -p "$cache/$1"
    timeout 600 npm install --prefix "$cache/$1" --no-audit --no-fund --loglevel=error "$2" >&2
  fi
}
wanted=" $* "
case "$wanted" in *" claude "*|*" codex "*|*" gemini "*) ;; *) wanted=" all $wanted" ;; esac
case "$wanted" in *" claude "*|*" all "*) install claude-code-2.1.332 @anthropic-ai/claude-code@2.1.332 claude ;; esac
case "$wanted" in *" codex "*|*" all "*) install codex-0.171.0 @openai/codex@0.171.0 codex ;; esac
case "$wanted" in *" gemini "*|*" all "*) install gemini-cli-0.61.0 @google/gemini-cli@0.61.0 gemini ;; esac

# 3. Loopback-only namespaces must be available (root, unshare).
if ! unshare -n -p -f --mount-proc sh -c 'ip link set lo up' 2>/dev/null; then
  echo "run.sh: cannot create a network namespace (needs root: unshare -n -p -f --mount-proc)" >&2
  exit 2
fi

exec node "$here/harness.js" "$@"
