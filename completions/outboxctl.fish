# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_outboxctl_global_optspecs
    string join \n v/verbose q/quiet log-format= database-url= schema= connect-timeout= json h/help V/version
end

function __fish_outboxctl_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_outboxctl_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_outboxctl_using_subcommand
    set -l cmd (__fish_outboxctl_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c outboxctl -n "__fish_outboxctl_needs_command" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_needs_command" -l database-url -d 'PostgreSQL URL, for every command that connects (see its --help)' -r
complete -c outboxctl -n "__fish_outboxctl_needs_command" -l schema -d 'Schema holding the outbox tables, for every command that connects' -r
complete -c outboxctl -n "__fish_outboxctl_needs_command" -l connect-timeout -d 'Give up connecting after this long, for every command that connects' -r
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -l json -d 'Print JSON on stdout, for every command that has --json'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "migrate" -d 'Create or upgrade the outbox schema (safe when several replicas run it at once)'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "publish" -d 'Insert events: one from flags, or many from a JSON-lines file'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "relay" -d 'Relay ready events to a sink: `--once` for cron, or as a daemon'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "stats" -d 'Backlog, lag, in-flight, dead letters and throughput'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "top" -d 'A live view of the outbox for on-call: backlog, lag, throughput, relays, dead letters'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "dead" -d 'Dead letters: list, show, discard and export events the relay gave up on'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "dlq" -d 'Dead letters: list, show, discard and export events the relay gave up on'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "requeue" -d 'Send dead-lettered events again, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "replay" -d 'Send published events again, to any sink, without changing them'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "ordering" -d 'Ordered delivery per key (tenant_id, aggregate_type, aggregate_id), switched on in the database.'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "log" -d 'Log mode: relays read the outbox as a log, with no write per published event.'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "events" -d 'Any event, in any state: list, show, cancel, reschedule and edit'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "event" -d 'Any event, in any state: list, show, cancel, reschedule and edit'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "prune" -d 'Delete published events past their retention, in short batches (for cron)'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "doctor" -d 'Tell what is wrong with an outbox before it hurts: one PASS / WARN / FAIL line per check'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "grants" -d 'Print the GRANT statements a role needs for one use of outboxctl (or apply them)'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "demo" -d 'Show the tool end to end in a scratch schema, then drop it'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "bench" -d 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l status -l dry-run -d 'List applied and pending migrations; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l check -d 'Change nothing; exit 0 when the schema is up to date, 6 when migrations are pending (also a seed-era table `migrate` would adopt, or no outbox at all), 2 when existing tables conflict with migration 1. For init containers and deploy pipelines'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s f -l file -d 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")' -r -F
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l event-type -d 'Event type, e.g. order.placed' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l aggregate-type -d 'Aggregate type, e.g. order' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l aggregate-id -d 'Aggregate id, e.g. 42' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l tenant -d 'Tenant uuid [default: 00000000-0000-0000-0000-000000000000, the nil uuid]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l payload -d 'Payload as JSON, or @PATH to read it from a file, or @- to read it from stdin' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l header -d 'A header to store with the event (repeatable): --header schema-version=1. In the environment variable, one KEY=VALUE per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l idempotency-key -d 'Idempotency key [default: a fresh random uuid, so every call inserts a new event]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l delay -d 'Deliver no earlier than this long from now (database clock), e.g. 5m' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l at -d 'Deliver no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l batch-size -d 'Rows per INSERT statement in bulk mode' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l batch-bytes -d 'Bytes of JSON lines per INSERT statement in bulk mode, at most (e.g. 16MiB): a batch ends at --batch-size lines or this many bytes, whichever comes first, so memory stays bounded by it and the longest line. A longer line is inserted alone' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l sink -d 'Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null discards events on purpose), null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id} (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take the placeholders of --http-header [default: stdout]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l format -d 'What each event is sent as: `document` (outboxctl\'s JSON document) or `cloudevents` (CloudEvents 1.0)' -r -f -a "document\t''
cloudevents\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l cloudevents-mode -d 'With --format cloudevents: how the attributes travel, `binary` or `structured`' -r -f -a "binary\t''
structured\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l cloudevents-source -d 'With --format cloudevents: the `source` attribute, a URI-reference, e.g. https://shop.example.com/orders [default: /outboxctl/DATABASE/SCHEMA]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l mode -d 'How claims are settled. `lease`: claim commits a lease, publish runs outside any transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and mark in one transaction that stays open during the publish (fewer writes per event). `log`: while `outboxctl log enable` is on, read the outbox as a log between transaction-id snapshots, one reader at a time, with no write per published event. `auto`: log while log mode is on; otherwise tx for stdout, file, null, Redis and Kafka (a batch is published within one --publish-timeout), lease for HTTP, NATS and RabbitMQ (a publish per event: a slow sink would keep the transaction open up to the lease). tx and lease refuse to start while log mode is on, and log while it is off' -r -f -a "auto\t''
lease\t''
tx\t''
log\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l batch-size -d 'Rows claimed per batch' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l batch-bytes -d 'Bytes claimed per batch, at most (payload and headers, e.g. 16MiB, 512KiB): a batch stops at --batch-size rows or at this many bytes, whichever comes first, so the relay\'s memory stays within a small multiple of it. An event larger than this is claimed alone' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l concurrency -d 'Publishes in flight at once within a batch' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l pipeline-depth -d 'Batches in flight at once (1-4): the next batch is claimed while the previous one publishes, when that one\'s claim came back full. 1 claims, publishes and settles one batch after another. A relay killed mid-batch re-sends at most this many batches [default: 2; 1 for stdout, file and null (a local write leaves nothing to overlap)]. For kafka:// the next claim waits until the previous one has returned, so a key\'s events keep their order. In log mode: pages, each read on from the one before and settled after it [default: 2 for every sink]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l lease -d 'How long a claim is held before another relay may take the row [default: 30s]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l publish-timeout -d 'Timeout of one publish (a stdout or file write too); must be shorter than --lease [default: half the lease]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l max-attempts -d 'Attempts before a row is dead-lettered. A sink outage (the sink took no event of a batch) counts none: the rows are given back untouched' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l backoff-base -d 'Backoff after the first failure; doubles per attempt, with jitter' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l backoff-max -d 'Upper bound of the backoff' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l poll-interval -d 'Daemon: look for work at least this often even without a notification' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l shutdown-timeout -d 'On SIGTERM/SIGINT, wait this long for in-flight publishes before giving up on them' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l max-events -d 'With --once: stop after about this many events' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l max-duration -d 'With --once: stop claiming after this long' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l http-header -d 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header \'Upstash-Deduplication-Id: {idempotency_key}\'. In the environment variable, one header per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l kafka-property -d 'A librdkafka property for the kafka sink (repeatable), e.g. security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=relay, sasl.password=..., linger.ms=10. Values are never shown or logged; prefer the environment variable for secrets (one KEY=VALUE per line). bootstrap.servers, enable.idempotence and message.timeout.ms are the relay\'s' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l signing-secret-env -d 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l async-commit -d 'Let the relay\'s own session commit asynchronously (synchronous_commit=off). A mark lost in a server crash only causes a re-publish with the same dedup id' -r -f -a "true\t''
false\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l metrics-addr -d 'Daemon: serve Prometheus metrics (GET /metrics) and probes (GET /livez: the loop makes progress; GET /readyz: the database answers and the sink is not in an outage) on this address, e.g. 0.0.0.0:9464. Off by default. Not with --once (a run that exits is not scraped: use `stats` for cron). A port in use fails the start (exit 1)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l once -d 'Drain what is ready now, print a summary, exit'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l by -d 'Break the figures down by a column' -r -f -a "event-type\t''
tenant\t''
aggregate-type\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l format -d 'Output format: human (a table), json (the same as --json) or prometheus (text exposition, for node_exporter\'s textfile collector) [default: human, json with --json]. An explicit --format wins over --json' -r -f -a "human\t''
json\t''
prometheus\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l output -d 'Write the output to this file instead of stdout, atomically: a temporary file in the same directory, renamed over PATH, so a reader (node_exporter) never sees half a file. With --format prometheus or json' -r -F
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l warn-lag -d 'WARNING when the lag is longer than this, e.g. 1m. The lag is how late the most overdue pending event is: a ready event counts from when it fell due (available_at); one waiting for a retry, or being retried, from when it first fell due (taken as its created_at: for an event published with a delay that has since failed, the delay counts too); one scheduled for later and never tried does not count' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l crit-lag -d 'CRITICAL when the lag (see --warn-lag) is longer than this, e.g. 5m' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l warn-dead -d 'WARNING when more than N events are dead-lettered (0: any dead letter)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l crit-dead -d 'CRITICAL when more than N events are dead-lettered' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l warn-backlog -d 'WARNING when more than N events are due and unpublished (ready + in flight; scheduled events are not backlog until due)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l crit-backlog -d 'CRITICAL when more than N events are due and unpublished (ready + in flight)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l warn-retrying -d 'WARNING when more than N pending events have failed at least once (retrying)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l crit-retrying -d 'CRITICAL when more than N pending events have failed at least once (retrying)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l check -d 'Compare the totals with the thresholds below and print one Nagios status line with performance data (or --json). Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the database unreachable, bad arguments, or any other error), instead of the general ones. Needs at least one threshold'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l interval -d 'How often to read the figures and redraw (at least 100ms). Also the width of one bar of the throughput sparkline' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l by -d 'What the table of the largest backlogs groups by' -r -f -a "event-type\t''
aggregate-type\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand top" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "list" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "ls" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "show" -d 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "discard" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "rm" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "export" -d 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l batch-size -d 'Rows deleted per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l all -d 'Every dead-lettered event (no filter)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l dry-run -d 'List what would be discarded; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from discard" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l batch-size -d 'Rows deleted per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l all -d 'Every dead-lettered event (no filter)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l dry-run -d 'List what would be discarded; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from rm" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l format -d '`publish`: the keys `publish --file` accepts. `full`: every column (id, attempts, last_error, times...), for analysis; not accepted by `publish`' -r -f -a "publish\t''
full\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from export" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from help" -f -a "list" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from help" -f -a "show" -d 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from help" -f -a "discard" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from help" -f -a "export" -d 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dead; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "list" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "ls" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "show" -d 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "discard" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "rm" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "export" -d 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and not __fish_seen_subcommand_from list ls show discard rm export help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l batch-size -d 'Rows deleted per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l all -d 'Every dead-lettered event (no filter)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l dry-run -d 'List what would be discarded; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from discard" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l batch-size -d 'Rows deleted per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l all -d 'Every dead-lettered event (no filter)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l dry-run -d 'List what would be discarded; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from rm" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l format -d '`publish`: the keys `publish --file` accepts. `full`: every column (id, attempts, last_error, times...), for analysis; not accepted by `publish`' -r -f -a "publish\t''
full\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from export" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "list" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "show" -d 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "discard" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "export" -d 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l limit -d 'At most this many events, the most recently dead-lettered first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l delay -d 'Make the events due this long from now (database clock) instead of now, e.g. 10m' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l batch-size -d 'Rows updated per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l all -d 'Every dead-lettered event (no filter)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l keep-attempts -d 'Keep attempt_count instead of resetting it to 0 (the relay then dead-letters the event again after one more failure)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l dry-run -d 'List exactly what would be requeued; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand requeue" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l sink -d 'Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null discards events on purpose), null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id} (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take the placeholders of --http-header [default: stdout]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l format -d 'What each event is sent as: `document` (outboxctl\'s JSON document) or `cloudevents` (CloudEvents 1.0)' -r -f -a "document\t''
cloudevents\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l cloudevents-mode -d 'With --format cloudevents: how the attributes travel, `binary` or `structured`' -r -f -a "binary\t''
structured\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l cloudevents-source -d 'With --format cloudevents: the `source` attribute, a URI-reference, e.g. https://shop.example.com/orders [default: /outboxctl/DATABASE/SCHEMA]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l from-id -d 'Start at this id: selected events with a lower id are not sent. How a stopped replay resumes (its error names the id)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l limit -d 'At most this many events, the lowest ids first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l replay-id -d 'The replay this run continues: its audit id is the ID of the fresh keys and of the `outbox-replay-id` header (instead of this run\'s own), so a resumed replay sends each event as the stopped one would have. A stopped run\'s resume hint includes it' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l rate -d 'At most this many events per unit of time: N/s, N/m or N/h (e.g. 200/s), in bursts of at most one second\'s worth [default: as fast as the sink takes them]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l batch-size -d 'Rows read per statement (in id order, after the last one read)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l batch-bytes -d 'Bytes read per statement, at most (payload and headers, e.g. 16MiB): memory stays within a small multiple of it. An event larger than this is read alone' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l concurrency -d 'Publishes in flight at once (events of one key are never in flight together)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l publish-timeout -d 'Timeout of one publish (a stdout or file write too) [default: 15s]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l retry-for -d 'Keep retrying what the sink fails (an outage, or an event it fails for now) this long, with --backoff-base and --backoff-max, before stopping (exit code 5) with the id to resume from' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l backoff-base -d 'Backoff after the first failure; doubles per attempt, with jitter' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l backoff-max -d 'Upper bound of the backoff' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l http-header -d 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header \'Upstash-Deduplication-Id: {idempotency_key}\'. In the environment variable, one header per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l kafka-property -d 'A librdkafka property for the kafka sink (repeatable), e.g. security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=relay, sasl.password=..., linger.ms=10. Values are never shown or logged; prefer the environment variable for secrets (one KEY=VALUE per line). bootstrap.servers, enable.idempotence and message.timeout.ms are the relay\'s' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l signing-secret-env -d 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l all -d 'Every published event still in the table (no filter)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l fresh-keys -d 'Send each event with a new idempotency key, `KEY:replay:ID` (the original key and the replay\'s id), so that a deduplicating consumer processes it again. The original key is in the header `outbox-replay-original-key`'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l dry-run -d 'Count what would be sent and list the first 100 events; send nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand replay" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -f -a "enable" -d 'Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -f -a "disable" -d 'Switch ordered delivery off, for the named aggregate types or (without --aggregate-type) entirely'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -f -a "status" -d 'Which aggregate types are ordered, their --on-dead, and how many keys are blocked'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -f -a "skip" -d 'Skip a key\'s head so the rest of the key flows: a dead head that blocks its key stops blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and not __fish_seen_subcommand_from enable disable status skip help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l aggregate-type -d 'An aggregate type to order (repeatable); without it every type is ordered' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l on-dead -d 'What a dead-lettered head does to its key' -r -f -a "block\t'The key waits until the head is requeued or skipped'
skip\t'The rest of the key flows on past the dead head'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from enable" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l aggregate-type -d 'An aggregate type to stop ordering (repeatable; `*` is the every-type switch); without it ordering is switched off for every type' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from disable" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from status" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from skip" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from help" -f -a "enable" -d 'Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from help" -f -a "disable" -d 'Switch ordered delivery off, for the named aggregate types or (without --aggregate-type) entirely'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from help" -f -a "status" -d 'Which aggregate types are ordered, their --on-dead, and how many keys are blocked'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from help" -f -a "skip" -d 'Skip a key\'s head so the rest of the key flows: a dead head that blocks its key stops blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand ordering; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -f -a "enable" -d 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log\'s position (events the log published are marked published, one write each, once) and drops the index. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -f -a "disable" -d 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log\'s position (events the log published are marked published, one write each, once) and drops the index. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -f -a "status" -d 'Whether log mode is on, the log\'s position, its reader and its retry set'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and not __fish_seen_subcommand_from enable disable status help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from enable" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from disable" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from status" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from help" -f -a "enable" -d 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log\'s position (events the log published are marked published, one write each, once) and drops the index. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from help" -f -a "disable" -d 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log\'s position (events the log published are marked published, one write each, once) and drops the index. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from help" -f -a "status" -d 'Whether log mode is on, the log\'s position, its reader and its retry set'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand log; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "list" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "ls" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "show" -d 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "cancel" -d 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "reschedule" -d 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "edit" -d 'Change pending or dead events before they are handled: payload, headers, event type'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l state -d 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l state -d 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l state -d 'With filters: only events in these states (comma-separated or repeated; `pending` means ready, scheduled and in-flight) [default: ready, scheduled, dead; in-flight too with --force]. Published events are never cancelled' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l limit -d 'With filters: at most this many events, the newest first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l batch-size -d 'With filters: rows deleted per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l force -d 'Also cancel in-flight (leased) events; see above for what that means'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l dry-run -d 'Show what would be cancelled or refused; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from cancel" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l state -d 'With filters: only events in these states (ready, scheduled; comma-separated or repeated) [default: ready and scheduled]' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l limit -d 'With filters: at most this many events, the newest first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l batch-size -d 'With filters: rows updated per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l at -d 'Due at this time (RFC 3339); a past time makes them due now' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l delay -d 'Due this long from now (database clock), e.g. 30m; 0s makes them due now' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l dry-run -d 'Show what would be moved or refused; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from reschedule" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l payload -d 'The new payload as JSON, or @PATH to read it from a file, or @- from stdin (replaces the whole payload)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l set-header -d 'Set a header (repeatable): --set-header schema-version=2. In the environment variable, one KEY=VALUE per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l unset-header -d 'Remove a header (repeatable). In the environment variable, one name per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l event-type -d 'The new event type' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l requeue -d 'Dead events only: after the change, make them ready now with attempt_count 0 (like `outboxctl requeue`), in the same statement. Refused for events that are not dead'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l dry-run -d 'Print each event\'s diff (event type, headers, payload as pretty JSON); change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from edit" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from help" -f -a "list" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from help" -f -a "show" -d 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from help" -f -a "cancel" -d 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from help" -f -a "reschedule" -d 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from help" -f -a "edit" -d 'Change pending or dead events before they are handled: payload, headers, event type'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand events; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "list" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "ls" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "show" -d 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "cancel" -d 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "reschedule" -d 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "edit" -d 'Change pending or dead events before they are handled: payload, headers, event type'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and not __fish_seen_subcommand_from list ls show cancel reschedule edit help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l state -d 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l state -d 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l limit -d 'Show at most this many events (a note on stderr says when more match)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from ls" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l state -d 'With filters: only events in these states (comma-separated or repeated; `pending` means ready, scheduled and in-flight) [default: ready, scheduled, dead; in-flight too with --force]. Published events are never cancelled' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l limit -d 'With filters: at most this many events, the newest first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l batch-size -d 'With filters: rows deleted per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l force -d 'Also cancel in-flight (leased) events; see above for what that means'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l dry-run -d 'Show what would be cancelled or refused; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from cancel" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l event-type -d 'Event type as a glob: `*` matches any run of characters, `?` one character, `\\` makes the next character literal (e.g. \'order.*\')' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l tenant -d 'Tenant uuid' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l aggregate-type -d 'Aggregate type (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l aggregate-id -d 'Aggregate id (exact)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l since -d 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l until -d 'Only events whose time is before this (RFC 3339, or a duration ago); see --since' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l error -d 'Only events whose last_error contains this text (case-insensitive)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l error-regex -d 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. \'HTTP (502|503)\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l state -d 'With filters: only events in these states (ready, scheduled; comma-separated or repeated) [default: ready and scheduled]' -r -f -a "ready\t''
scheduled\t''
in-flight\t''
published\t''
dead\t''
pending\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l limit -d 'With filters: at most this many events, the newest first' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l batch-size -d 'With filters: rows updated per statement (each batch is its own short transaction)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l at -d 'Due at this time (RFC 3339); a past time makes them due now' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l delay -d 'Due this long from now (database clock), e.g. 30m; 0s makes them due now' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l dry-run -d 'Show what would be moved or refused; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from reschedule" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l payload -d 'The new payload as JSON, or @PATH to read it from a file, or @- from stdin (replaces the whole payload)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l set-header -d 'Set a header (repeatable): --set-header schema-version=2. In the environment variable, one KEY=VALUE per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l unset-header -d 'Remove a header (repeatable). In the environment variable, one name per line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l event-type -d 'The new event type' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l reason -d 'Why, recorded in the audit table' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l requeue -d 'Dead events only: after the change, make them ready now with attempt_count 0 (like `outboxctl requeue`), in the same statement. Refused for events that are not dead'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l dry-run -d 'Print each event\'s diff (event type, headers, payload as pretty JSON); change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -s y -l yes -d 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from edit" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from help" -f -a "list" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from help" -f -a "show" -d 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from help" -f -a "cancel" -d 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from help" -f -a "reschedule" -d 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from help" -f -a "edit" -d 'Change pending or dead events before they are handled: payload, headers, event type'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand event; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l older-than -d 'Delete events published more than this long ago (database clock), e.g. 7d' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l dead-older-than -d 'Also delete dead-lettered events dead for longer than this, e.g. 30d. Off by default' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l processed-older-than -d 'Also delete processed_messages rows (consumer dedup) older than this, e.g. 14d. Off by default; keep it longer than any redelivery can take' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l audit-older-than -d 'Also delete audit trail rows (outbox_audit: who requeued, discarded, cancelled, edited or pruned what, and an edit\'s old and new payload) written longer ago than this, e.g. 400d. Off by default: without it the audit trail is kept for ever' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l batch-size -d 'Rows deleted per batch (one short transaction each)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l sleep -d 'Pause between batches (throttle), e.g. 50ms' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l max-duration -d 'Start no batch after this long (the cron window), e.g. 10m' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l max-batches -d 'Stop after this many batches' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l actor -d 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l dry-run -d 'Count what would be deleted; delete nothing (takes no lock)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand prune" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l warn-lag -d 'WARN when the lag is longer than this: how late the most overdue pending event is, as `stats --check` counts it (an event scheduled for later and never tried is not late)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l crit-lag -d 'FAIL when the lag (see --warn-lag) is longer than this' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l max-xact-age -d 'WARN when a transaction, prepared transaction or replication slot has held back vacuum\'s xmin horizon for longer than this' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l retention -d 'WARN when published events older than this are still in the table (prune is not running)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l lease -d 'How long a claim is held before another relay may take the row [default: 30s]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l publish-timeout -d 'Timeout of one publish (a stdout or file write too); must be shorter than --lease [default: half the lease]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l sink -d 'Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null discards events on purpose), null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id} (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take the placeholders of --http-header [default: stdout]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l max-attempts -d 'Attempts before a row is dead-lettered. A sink outage (the sink took no event of a batch) counts none: the rows are given back untouched' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l backoff-base -d 'Backoff after the first failure; doubles per attempt, with jitter' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l backoff-max -d 'Upper bound of the backoff' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l role -d 'The role to grant to (quoted as an identifier)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l for -d 'What the role will do' -r -f -a "producer\t'The application and `publish`'
relay\t'`relay`'
operator\t'`dead`, `requeue`, `events`, `ordering skip`, `prune`'
monitor\t'`stats`, `doctor`, the lists'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -l apply -d 'Run the statements (one transaction) instead of printing them'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand grants" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l pooler -d 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session\'s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)' -r -f -a "none\t'PostgreSQL itself (or a pooler that passes the `options` startup parameter on)'
session\t'A pooler in session mode'
transaction\t'A pooler in transaction mode'"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l events -d 'Events in the backlog for publish and drain' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l batch-size -d 'Rows per claim' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l relays -d 'Relay processes draining at once (and connections for the SQL ceiling)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l concurrency -d 'Publishes in flight per relay' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l mode -d 'Relay mode to measure (auto means tx here: the null sink is local)' -r -f -a "auto\t''
lease\t''
tx\t''
log\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l rate -d 'Offered rate for the latency test, events/s' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l latency-duration -d 'How long the latency test offers load' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l delayed-events -d 'Delayed events for the lateness test' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l prune-rows -d 'Published rows for the prune test (0 skips it)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l keep-schema -d 'Keep the scratch schema afterwards (for EXPLAIN and poking around)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s v -l verbose -d 'More of outboxctl\'s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s q -l quiet -d 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "migrate" -d 'Create or upgrade the outbox schema (safe when several replicas run it at once)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "publish" -d 'Insert events: one from flags, or many from a JSON-lines file'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "relay" -d 'Relay ready events to a sink: `--once` for cron, or as a daemon'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "stats" -d 'Backlog, lag, in-flight, dead letters and throughput'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "top" -d 'A live view of the outbox for on-call: backlog, lag, throughput, relays, dead letters'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "dead" -d 'Dead letters: list, show, discard and export events the relay gave up on'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "requeue" -d 'Send dead-lettered events again, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "replay" -d 'Send published events again, to any sink, without changing them'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "ordering" -d 'Ordered delivery per key (tenant_id, aggregate_type, aggregate_id), switched on in the database.'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "log" -d 'Log mode: relays read the outbox as a log, with no write per published event.'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "events" -d 'Any event, in any state: list, show, cancel, reschedule and edit'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "prune" -d 'Delete published events past their retention, in short batches (for cron)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "doctor" -d 'Tell what is wrong with an outbox before it hurts: one PASS / WARN / FAIL line per check'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "grants" -d 'Print the GRANT statements a role needs for one use of outboxctl (or apply them)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "completions" -d 'Print a shell completion script'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "demo" -d 'Show the tool end to end in a scratch schema, then drop it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "bench" -d 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats top dead requeue replay ordering log events prune doctor grants completions demo bench help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from dead" -f -a "list" -d 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error\'s first line'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from dead" -f -a "show" -d 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from dead" -f -a "discard" -d 'Delete dead-lettered events, by ids or by filters (--all for every one)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from dead" -f -a "export" -d 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from ordering" -f -a "enable" -d 'Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from ordering" -f -a "disable" -d 'Switch ordered delivery off, for the named aggregate types or (without --aggregate-type) entirely'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from ordering" -f -a "status" -d 'Which aggregate types are ordered, their --on-dead, and how many keys are blocked'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from ordering" -f -a "skip" -d 'Skip a key\'s head so the rest of the key flows: a dead head that blocks its key stops blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from log" -f -a "enable" -d 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log\'s position (events the log published are marked published, one write each, once) and drops the index. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from log" -f -a "disable" -d 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log\'s position (events the log published are marked published, one write each, once) and drops the index. Audited'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from log" -f -a "status" -d 'Whether log mode is on, the log\'s position, its reader and its retry set'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from events" -f -a "list" -d 'Events, newest first, with their state'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from events" -f -a "show" -d 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from events" -f -a "cancel" -d 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from events" -f -a "reschedule" -d 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and __fish_seen_subcommand_from events" -f -a "edit" -d 'Change pending or dead events before they are handled: payload, headers, event type'
