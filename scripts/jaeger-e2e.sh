#!/usr/bin/env bash
# jaeger-e2e.sh: the signup example's traces, checked in a real Jaeger.
#
# It builds Jaeger (github.com/jaegertracing/jaeger/cmd/jaeger v1.76.0) from
# the Go module proxy into a cache directory outside the repository, once
# (about 3 minutes and 2.3 GB of memory; a plain build has no UI assets, but
# the HTTP API works), starts it on 127.0.0.1 only with in-memory storage,
# runs `go run ./examples/signup -demo` exporting to it by OTLP/HTTP, and
# asserts through Jaeger's query API (/api/traces) that:
#
#   1. each POST /signup request is a trace whose SERVER span contains a
#      "send default" PRODUCER span (and the request's SQL spans);
#   2. each job of a successful signup has a "process default" CONSUMER span,
#      in a trace of its own, whose references point to its send span
#      (a FOLLOWS_FROM reference: an OpenTelemetry link);
#   3. the worker's SQL spans (bunotel) are inside that process span.
#
# Run it from anywhere. The example runs on the database it picks (see
# examples/internal/exampledb): MySQL or MariaDB at BUNQUEUE_MYSQL_DSN,
# PostgreSQL at BUNQUEUE_PG_DSN, else an SQLite file:
#
#   scripts/jaeger-e2e.sh
#
# Environment (all optional):
#   JAEGER_CACHE_DIR   where the jaeger binary is built and kept
#                      (default: ${XDG_CACHE_HOME:-~/.cache}/bunqueue/jaeger-v1.76.0)
#   JAEGER_OTLP_PORT   OTLP/HTTP receiver port on 127.0.0.1 (default 4318)
#   JAEGER_QUERY_PORT  query HTTP API port on 127.0.0.1 (default 16686)
#   KEEP_JAEGER=1      leave Jaeger running at the end (its pid is printed)
#
# It exits 0 when every check passes, 1 otherwise. It is not part of
# `go test ./...`.
set -euo pipefail

JAEGER_VERSION=v1.76.0
JAEGER_PKG=github.com/jaegertracing/jaeger/cmd/jaeger
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${JAEGER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bunqueue/jaeger-$JAEGER_VERSION}
otlp_port=${JAEGER_OTLP_PORT:-4318}
query_port=${JAEGER_QUERY_PORT:-16686}
query="http://127.0.0.1:$query_port"
export JAEGER_LISTEN_HOST=127.0.0.1

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bunqueue-jaeger-e2e.XXXXXX")
jaeger_pid=
cleanup() {
	local rc=$?
	if [[ -n $jaeger_pid ]] && kill -0 "$jaeger_pid" 2>/dev/null; then
		if [[ ${KEEP_JAEGER:-} == 1 ]]; then
			log "Jaeger left running: pid $jaeger_pid, API $query, log $work/jaeger.log"
			exit "$rc"
		fi
		kill "$jaeger_pid" 2>/dev/null || true
		wait "$jaeger_pid" 2>/dev/null || true
	fi
	if ((rc != 0)) && [[ -f $work/jaeger.log ]]; then
		log "last lines of Jaeger's log:"
		tail -n 20 "$work/jaeger.log" >&2 || true
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools ---------------------------------------------------------------

if ! command -v jq >/dev/null; then
	log "installing jq"
	if [[ $(id -u) == 0 ]]; then
		apt-get install -y -q jq >/dev/null
	else
		sudo apt-get install -y -q jq >/dev/null
	fi
fi
for tool in curl ss go; do
	command -v "$tool" >/dev/null || die "$tool is needed"
done

# --- build Jaeger (once) -------------------------------------------------

# `go install pkg@version` refuses Jaeger's module (its go.mod has a replace
# directive), so build it as a tool of a throwaway module in a temporary
# directory, with the same replace. The repository's go.mod is not touched.
build_jaeger() {
	local mod="$work/jaeger-tool"
	mkdir -p "$mod" "$cache"
	cat >"$mod/go.mod" <<-EOF
		module jaegertool

		go 1.24.6

		// As in jaeger's own go.mod.
		replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
	EOF
	log "building jaeger $JAEGER_VERSION into $cache (about 3 minutes, 2.3 GB of memory)"
	(
		cd "$mod"
		export GOFLAGS=-mod=mod GOWORK=off
		nice -n 19 go get -tool "$JAEGER_PKG@$JAEGER_VERSION"
		nice -n 19 go build -o "$cache/jaeger.tmp" "$JAEGER_PKG"
	)
	mv "$cache/jaeger.tmp" "$cache/jaeger"
}

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one build at a time
if [[ ! -x $cache/jaeger ]]; then
	build_jaeger
else
	log "reusing $cache/jaeger"
fi
flock -u 9
exec 9>&-

# --- start Jaeger on loopback -----------------------------------------------

for port in "$otlp_port" "$query_port"; do
	if ss -Hltn "sport = :$port" | grep -q .; then
		die "port $port is already in use (another Jaeger?): $(ss -Hltnp "sport = :$port")"
	fi
done

# The all-in-one default listens on every interface for the query ports;
# this configuration names 127.0.0.1 for every endpoint it opens, and keeps
# only what the check needs: OTLP/HTTP in, memory storage, the query API.
cat >"$work/jaeger.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:$query_port
    grpc:
      endpoint: 127.0.0.1:0

receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp_port

processors:
  batch:
    timeout: 100ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF

log "starting jaeger (OTLP/HTTP 127.0.0.1:$otlp_port, query API $query)"
"$cache/jaeger" --config "$work/jaeger.yaml" >"$work/jaeger.log" 2>&1 &
jaeger_pid=$!

for ((i = 0; ; i++)); do
	kill -0 "$jaeger_pid" 2>/dev/null || die "jaeger exited at start"
	if curl -sf "$query/api/services" >/dev/null &&
		ss -Hltn "sport = :$otlp_port" | grep -q .; then
		break
	fi
	((i < 300)) || die "jaeger did not come up in 30s"
	sleep 0.1
done

# Every socket Jaeger listens on must be on 127.0.0.1.
listening=$(ss -Hltunp | grep "pid=$jaeger_pid," || true)
[[ -n $listening ]] || die "ss -p shows no socket of jaeger (pid $jaeger_pid): cannot check where it listens"
printf '%s\n' "$listening" | awk '{print "   jaeger listens on", $1, $5}' >&2
outside=$(printf '%s\n' "$listening" | awk 'NF && $5 !~ /^127\.0\.0\.1:/')
[[ -z $outside ]] || die "jaeger listens beyond 127.0.0.1: $outside"

# --- run the example ---------------------------------------------------------

log "running go run ./examples/signup -demo"
(
	cd "$repo"
	# The example's own default service name, "signup", not one from the
	# caller's environment.
	env -u OTEL_SERVICE_NAME -u OTEL_RESOURCE_ATTRIBUTES -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT \
		OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" \
		go run ./examples/signup -demo
) >"$work/demo.log" 2>&1 || {
	cat "$work/demo.log" >&2
	die "the signup demo failed"
}
sed 's/^/   demo| /' "$work/demo.log" >&2

# --- check the traces ----------------------------------------------------------

# traces OPERATION: the traces of service signup with a span of that name.
traces() {
	curl -sfG "$query/api/traces" \
		--data-urlencode service=signup \
		--data-urlencode "operation=$1" \
		--data-urlencode limit=1000 \
		--data-urlencode lookback=1h
}

# The checks, on {"requests": <traces of POST /signup>, "processes":
# <traces of process default>}. Span kinds are the tag span.kind; a parent
# is a CHILD_OF reference, an OpenTelemetry link a FOLLOWS_FROM one.
# shellcheck disable=SC2016
check_jq='
def kind: first(.tags[]? | select(.key == "span.kind") | .value) // "";
def tag($k): first(.tags[]? | select(.key == $k) | .value) // "";
def parentID: first(.references[]? | select(.refType == "CHILD_OF") | .spanID) // null;
# is the span (in $byid) the span $anc or inside it?
def within($byid; $anc):
  if .spanID == $anc then true
  else parentID as $p
    | if $p == null or $byid[$p] == null then false else $byid[$p] | within($byid; $anc) end
  end;
def byid: map({key: .spanID, value: .}) | from_entries;

[.requests.data[]? | . as $t | ($t.spans | byid) as $by
  | ($t.spans[] | select(.operationName == "POST /signup" and kind == "server")) as $srv
  | {
      traceID: $t.traceID,
      server: $srv.spanID,
      status: ($srv | tag("http.response.status_code")),
      sql: [$t.spans[] | select(kind == "client" and tag("db.statement") != "" and within($by; $srv.spanID))
            | {op: .operationName, stmt: tag("db.statement"), start: .startTime}] | sort_by(.start),
      sends: [$t.spans[] | select(.operationName == "send default" and kind == "producer" and within($by; $srv.spanID))
              | {traceID, spanID}]
    }] as $requests
| [.processes.data[]? | . as $t | ($t.spans | byid) as $by
  | $t.spans[] | select(.operationName == "process default" and kind == "consumer") as $p
  | {
      traceID: $t.traceID,
      spanID: $p.spanID,
      outcome: ($p | tag("bunqueue.outcome")),
      refs: [$p.references[]? | {refType, traceID, spanID}],
      sql: [$t.spans[] | select(kind == "client" and (tag("db.statement") != "") and within($by; $p.spanID))
            | {op: .operationName, stmt: tag("db.statement"), start: .startTime}] | sort_by(.start)
    }] as $processes
| ($requests | map(.sends[]) ) as $sends
| {
    requests: $requests,
    processes: $processes,
    linked: [$sends[] as $s
      | {send: $s,
         process: first($processes[] | select(any(.refs[]; .traceID == $s.traceID and .spanID == $s.spanID)))}
      | select(.process != null)]
  }
'

log "waiting for the traces in Jaeger"
for ((i = 0; ; i++)); do
	traces 'POST /signup' >"$work/requests.json" || die "GET $query/api/traces failed"
	traces 'process default' >"$work/processes.json" || die "GET $query/api/traces failed"
	jq -n --slurpfile r "$work/requests.json" --slurpfile p "$work/processes.json" \
		'{requests: $r[0], processes: $p[0]}' >"$work/traces.json"
	jq "$check_jq" "$work/traces.json" >"$work/result.json"
	# The demo makes three requests (two signups, one that rolls back) and
	# two jobs: wait until both are linked, or 15 s.
	if jq -e '(.requests | length) >= 3 and (.linked | length) >= 2' "$work/result.json" >/dev/null; then
		break
	fi
	((i < 30)) || break
	sleep 0.5
done

# --- report ----------------------------------------------------------------------

fails=0
check() { # check NAME JQ-EXPR-ON-RESULT DETAIL-JQ-EXPR
	local detail
	detail=$(jq -r "$3" "$work/result.json")
	if jq -e "$2" "$work/result.json" >/dev/null; then
		printf 'PASS  %s: %s\n' "$1" "$detail"
	else
		printf 'FAIL  %s: %s\n' "$1" "$detail"
		fails=$((fails + 1))
	fi
}

echo
echo "Jaeger at $query, service signup:"
jq -r '.requests[] | "  request trace \(.traceID): POST /signup (\(.status)) > \(.sql | map(.op) | join(", ")); send default \(.sends | map(.spanID) | join(", "))"' "$work/result.json"
jq -r '.processes[] | "  process trace \(.traceID): process default (\(.outcome)) refs \(.refs | map("\(.refType) \(.traceID)/\(.spanID)") | join(", ")) > \(.sql | map(.op) | join(", "))"' "$work/result.json"
echo

check "request traces" \
	'(.requests | length) >= 3 and all(.requests[]; (.sends | length) == 1
		and any(.sql[]; .op == "INSERT" and (.stmt | test("INTO `example_signup_user`"; "i"))))' \
	'"\(.requests | length) POST /signup SERVER traces (want 3), \([.requests[] | select((.sends | length) == 1)] | length) with a send default PRODUCER span and the INSERT of the user inside"'
check "process traces" \
	'(.processes | length) >= 2' \
	'"\(.processes | length) process default CONSUMER spans (want 2: the rolled-back signup has none)"'
check "send -> process link" \
	'(.linked | length) >= 2 and all(.linked[]; . as $l | $l.process.traceID != $l.send.traceID
		and any($l.process.refs[]; .refType == "FOLLOWS_FROM" and .traceID == $l.send.traceID and .spanID == $l.send.spanID))' \
	'"\(.linked | length) process spans reference their send span by FOLLOWS_FROM, in a trace of their own: \([.linked[] | "\(.send.traceID) -> \(.process.traceID)"] | join(", "))"'
check "worker SQL inside process" \
	'(.linked | length) >= 2 and all(.linked[];
		any(.process.sql[]; .op == "SELECT" and (.stmt | test("FROM `example_signup_user`"; "i")))
		and any(.process.sql[]; .op == "INSERT" and (.stmt | test("INTO `example_signup_sent`"; "i"))))' \
	'"\([.linked[] | .process.sql | length] | map(tostring) | join(" and ")) SQL spans inside the linked process spans (\(.linked[0].process.sql | map(.op) | join(", "))), each with the worker'"'"'s SELECT of the user and INSERT into example_signup_sent"'

echo
if ((fails > 0)); then
	cp "$work/traces.json" "${TMPDIR:-/tmp}/bunqueue-jaeger-e2e-traces.json"
	echo "FAIL: $fails of 4 checks (Jaeger's answers kept in ${TMPDIR:-/tmp}/bunqueue-jaeger-e2e-traces.json)"
	exit 1
fi
echo "PASS: 4 of 4 checks"
