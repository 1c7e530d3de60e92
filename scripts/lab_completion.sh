#!/bin/sh
# Run on a lab host (make demo-real, tests/e2e/test_real_vllm.py): one 8-token completion from
# the vLLM there, of the served model named by $1, from the server whose env file is $2
# (default vllm.service's) on port $3 (default 8000). The API key goes from the root-only env
# file into a header file, never into a command line.
set -eu
set -a; . "${2:-/etc/vllm-hostkit/vllm.env}"; set +a
umask 077
header=$(mktemp)
trap 'rm -f "$header"' EXIT
printf 'Authorization: Bearer %s\n' "$VLLM_API_KEY" > "$header"
curl -sS --fail-with-body -m 120 -H @"$header" -H 'Content-Type: application/json' \
  -d "{\"model\": \"$1\", \"prompt\": \"The lab host says\", \"max_tokens\": 8, \"temperature\": 0}" \
  "http://127.0.0.1:${3:-8000}/v1/completions"
echo
