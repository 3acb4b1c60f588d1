#!/usr/bin/env bash
# The official MCP conformance suite (npm @modelcontextprotocol/conformance, pinned)
# against `warden serve`'s /mcp, with the fixture tools of tests/conformance/tools.
# Installs the suite under target/conformance (Node >= 20 and npm needed; on Node 20 the
# suite's `globSync` import from `fs`, which Node 22 added, is taken from `glob`).
# Fails when a scenario of SCENARIOS_2025, SCENARIOS_2026 or SCENARIOS_TASKS fails on its wire; what is left out is listed in NOT_RUN.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
WARDEN=${WARDEN:-$TARGET/debug/warden}
SUITE_VERSION=0.2.0-alpha.12
DIR=$TARGET/conformance
# Each scenario on each protocol generation it applies to (`--spec-version`): the
# 2025-11-25 wire (sessions opened by `initialize`) and the 2026-07-28 wire
# (self-contained requests).
SCENARIOS_2025=(
  server-initialize server-session-lifecycle ping tools-list tools-call-simple-text
  tools-call-image tools-call-audio tools-call-embedded-resource tools-call-mixed-content
  tools-call-error tools-call-with-progress tools-call-with-logging logging-set-level
  json-schema-2020-12 dns-rebinding-protection server-sse-multiple-streams
  resources-list resources-read-text resources-read-binary resources-templates-read
  resources-subscribe resources-unsubscribe
  prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource
  prompts-get-with-image completion-complete
)
SCENARIOS_2026=(
  server-stateless tools-list tools-call-simple-text tools-call-image tools-call-audio
  tools-call-embedded-resource tools-call-mixed-content tools-call-error
  tools-call-with-progress json-schema-2020-12 dns-rebinding-protection
  server-sse-multiple-streams resources-list resources-read-text resources-read-binary
  resources-templates-read sep-2164-resource-not-found prompts-list prompts-get-simple
  prompts-get-with-args prompts-get-embedded-resource prompts-get-with-image
  completion-complete caching http-header-validation
)
# The Tasks extension (2026-07-28), against the tenant of tests/conformance/tasks.
SCENARIOS_TASKS=(
  tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal
  tasks-required-task-error tasks-dispatch-and-envelope tasks-request-headers
)
# Not run: sampling, elicitation and input-required results (a sandboxed tool cannot ask
# the client), server-sse-polling and http-custom-header-server-validation (not examined
# yet), the tasks extension's input-required flows (tasks-mrtr-*: a tool that asks its
# client for input) and its status notifications (the suite skips it: its harness is
# being rewritten), the skills extension. Listed so that a reader knows they are left out
# on purpose.
NOT_RUN=(tools-call-sampling tools-call-elicitation elicitation-sep1034-defaults
  elicitation-sep1330-enums input-required-result-* server-sse-polling
  http-custom-header-server-validation tasks-mrtr-* tasks-status-notifications
  sep-2640-skills-*)

command -v node >/dev/null || { echo "conformance: node is missing; install Node.js 20 or later" >&2; exit 1; }
command -v npm >/dev/null || { echo "conformance: npm is missing; install npm" >&2; exit 1; }
CLI=$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js
if [ ! -f "$CLI" ] || ! grep -q "\"version\": \"$SUITE_VERSION\"" "$DIR/node_modules/@modelcontextprotocol/conformance/package.json"; then
  mkdir -p "$DIR"
  (cd "$DIR" && npm init -y >/dev/null && npm install --no-audit --no-fund \
    "@modelcontextprotocol/conformance@$SUITE_VERSION" "glob@11" >/dev/null)
fi
if [ "$(node -e 'console.log(+process.versions.node.split(".")[0] < 22)')" = true ]; then
  # Node 20's `fs` has no globSync: take it from `glob` (installed beside the suite).
  perl -0pi -e 's/import\{([^}]*?)globSync as (\w+),([^}]*)\}from"fs";/import{$1$3}from"fs";import{globSync as $2}from"glob";/' "$CLI"
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

PORT=$(free_port)
WARDEN_OPERATOR_KEY=conformance "$WARDEN" serve --db "$WORK/warden.db" --listen "127.0.0.1:$PORT" \
  >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { cat "$WORK/serve.log" >&2; exit 1; }
# A tenant with the tools of FOLDER (each file uploaded, or registered with the schema
# beside it), behind a proxy of its own, whose port it leaves in PROXY_PORT.
tenant_behind_proxy() {
  local name=$1 folder=$2 key code tool schema
  key=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/admin/tenants" -H "Authorization: Bearer conformance" \
    -H 'Content-Type: application/json' -d "{\"name\": \"$name\"}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["api_key"])')
  [ -n "$key" ] || { echo "conformance: could not create a tenant" >&2; cat "$WORK/serve.log" >&2; exit 1; }
  for tool in "$folder"/*.py; do
    schema=${tool%.py}.schema.json
    if [ -f "$schema" ]; then
      # A hand-written schema beside the file: registered with it (the spec's `schema`).
      python3 -c 'import json, sys; print(json.dumps({"source": open(sys.argv[1]).read(), "schema": json.load(open(sys.argv[2]))}))' \
        "$tool" "$schema" >"$WORK/spec.json"
      code=$(curl -s -o "$WORK/register.json" -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/v1/tools" \
        -H "Authorization: Bearer $key" -H 'Content-Type: application/json' --data-binary "@$WORK/spec.json")
    else
      code=$(curl -s -o "$WORK/register.json" -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/v1/tools/upload" \
        -H "Authorization: Bearer $key" -F "file=@$tool")
    fi
    [ "$code" = 201 ] || [ "$code" = 200 ] || { echo "conformance: registering $tool: $code $(cat "$WORK/register.json")" >&2; exit 1; }
  done
  PROXY_PORT=$(free_port)
  TARGET="http://127.0.0.1:$PORT" KEY="$key" LISTEN="$PROXY_PORT" node tests/conformance/proxy.mjs &
  PIDS+=($!)
}
# The suite's tools (tests/conformance/tools), and apart the Tasks extension's fixtures
# (tests/conformance/tasks: `failing_job` requires a task, so it must not be the first
# tool another scenario calls without one).
tenant_behind_proxy conformance tests/conformance/tools
PROXY=$PROXY_PORT
tenant_behind_proxy tasks tests/conformance/tasks
PROXY_TASKS=$PROXY_PORT
sleep 1

failed=()
run() {
  local wire=$1 scenario=$2 proxy=${3:-$PROXY} log="$WORK/$1-$2.log"
  if node "$CLI" server --url "http://localhost:$proxy/mcp" --scenario "$scenario" \
    --spec-version "$wire" --expected-failures tests/conformance/expected-failures.yml \
    >"$log" 2>&1; then
    echo "conformance: $scenario ($wire) passed"
  else
    echo "conformance: $scenario ($wire) FAILED"; cat "$log"; failed+=("$scenario ($wire)")
  fi
}
for scenario in "${SCENARIOS_2025[@]}"; do run 2025-11-25 "$scenario"; done
for scenario in "${SCENARIOS_2026[@]}"; do run 2026-07-28 "$scenario"; done
for scenario in "${SCENARIOS_TASKS[@]}"; do run 2026-07-28 "$scenario" "$PROXY_TASKS"; done
echo "conformance: not run: ${NOT_RUN[*]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "conformance: ${#failed[@]} scenario(s) failed: ${failed[*]}" >&2
  exit 1
fi
