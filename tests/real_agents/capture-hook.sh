#!/bin/sh
# Hook command of the capture run: keeps the payload the client sent (and
# the hook process's cwd and the agents' own environment variables), then
# hands the same bytes to the real hook command, if one follows.
#
#   capture-hook.sh OUTDIR EVENT [COMMAND ARGS...]
dir=$1
ev=$2
shift 2
f="$dir/$(date +%s%N)-$$-$ev"
cat > "$f.json.tmp" && mv "$f.json.tmp" "$f.json"
{
  printf 'cwd=%s\n' "$(pwd)"
  env | grep -E '^(CLAUDE|CODEX|GEMINI|GOOGLE_GEMINI|CKPT)[A-Z_]*=' | grep -vE 'KEY|TOKEN|SECRET' | sort
} > "$f.meta"
[ $# -eq 0 ] && exit 0
exec "$@" < "$f.json"
