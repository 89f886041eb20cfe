
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'outboxctl' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'outboxctl'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'outboxctl' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL, for every command that connects (see its --help)')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables, for every command that connects')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long, for every command that connects')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout, for every command that has --json')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('migrate', 'migrate', [CompletionResultType]::ParameterValue, 'Create or upgrade the outbox schema (safe when several replicas run it at once)')
            [CompletionResult]::new('publish', 'publish', [CompletionResultType]::ParameterValue, 'Insert events: one from flags, or many from a JSON-lines file')
            [CompletionResult]::new('relay', 'relay', [CompletionResultType]::ParameterValue, 'Relay ready events to a sink: `--once` for cron, or as a daemon')
            [CompletionResult]::new('stats', 'stats', [CompletionResultType]::ParameterValue, 'Backlog, lag, in-flight, dead letters and throughput')
            [CompletionResult]::new('top', 'top', [CompletionResultType]::ParameterValue, 'A live view of the outbox for on-call: backlog, lag, throughput, relays, dead letters')
            [CompletionResult]::new('dead', 'dead', [CompletionResultType]::ParameterValue, 'Dead letters: list, show, discard and export events the relay gave up on')
            [CompletionResult]::new('dlq', 'dlq', [CompletionResultType]::ParameterValue, 'Dead letters: list, show, discard and export events the relay gave up on')
            [CompletionResult]::new('requeue', 'requeue', [CompletionResultType]::ParameterValue, 'Send dead-lettered events again, by ids or by filters (--all for every one)')
            [CompletionResult]::new('replay', 'replay', [CompletionResultType]::ParameterValue, 'Send published events again, to any sink, without changing them')
            [CompletionResult]::new('ordering', 'ordering', [CompletionResultType]::ParameterValue, 'Ordered delivery per key (tenant_id, aggregate_type, aggregate_id), switched on in the database.')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Log mode: relays read the outbox as a log, with no write per published event.')
            [CompletionResult]::new('events', 'events', [CompletionResultType]::ParameterValue, 'Any event, in any state: list, show, cancel, reschedule and edit')
            [CompletionResult]::new('event', 'event', [CompletionResultType]::ParameterValue, 'Any event, in any state: list, show, cancel, reschedule and edit')
            [CompletionResult]::new('prune', 'prune', [CompletionResultType]::ParameterValue, 'Delete published events past their retention, in short batches (for cron)')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Tell what is wrong with an outbox before it hurts: one PASS / WARN / FAIL line per check')
            [CompletionResult]::new('grants', 'grants', [CompletionResultType]::ParameterValue, 'Print the GRANT statements a role needs for one use of outboxctl (or apply them)')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('demo', 'demo', [CompletionResultType]::ParameterValue, 'Show the tool end to end in a scratch schema, then drop it')
            [CompletionResult]::new('bench', 'bench', [CompletionResultType]::ParameterValue, 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;migrate' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--status', '--status', [CompletionResultType]::ParameterName, 'List applied and pending migrations; change nothing')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List applied and pending migrations; change nothing')
            [CompletionResult]::new('--check', '--check', [CompletionResultType]::ParameterName, 'Change nothing; exit 0 when the schema is up to date, 6 when migrations are pending (also a seed-era table `migrate` would adopt, or no outbox at all), 2 when existing tables conflict with migration 1. For init containers and deploy pipelines')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;publish' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")')
            [CompletionResult]::new('--file', '--file', [CompletionResultType]::ParameterName, 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type, e.g. order.placed')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type, e.g. order')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id, e.g. 42')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid [default: 00000000-0000-0000-0000-000000000000, the nil uuid]')
            [CompletionResult]::new('--payload', '--payload', [CompletionResultType]::ParameterName, 'Payload as JSON, or @PATH to read it from a file, or @- to read it from stdin')
            [CompletionResult]::new('--header', '--header', [CompletionResultType]::ParameterName, 'A header to store with the event (repeatable): --header schema-version=1. In the environment variable, one KEY=VALUE per line')
            [CompletionResult]::new('--idempotency-key', '--idempotency-key', [CompletionResultType]::ParameterName, 'Idempotency key [default: a fresh random uuid, so every call inserts a new event]')
            [CompletionResult]::new('--delay', '--delay', [CompletionResultType]::ParameterName, 'Deliver no earlier than this long from now (database clock), e.g. 5m')
            [CompletionResult]::new('--at', '--at', [CompletionResultType]::ParameterName, 'Deliver no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows per INSERT statement in bulk mode')
            [CompletionResult]::new('--batch-bytes', '--batch-bytes', [CompletionResultType]::ParameterName, 'Bytes of JSON lines per INSERT statement in bulk mode, at most (e.g. 16MiB): a batch ends at --batch-size lines or this many bytes, whichever comes first, so memory stays bounded by it and the longest line. A longer line is inserted alone')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;relay' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--sink', '--sink', [CompletionResultType]::ParameterName, 'Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null discards events on purpose), null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id} (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take the placeholders of --http-header [default: stdout]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'What each event is sent as: `document` (outboxctl''s JSON document) or `cloudevents` (CloudEvents 1.0)')
            [CompletionResult]::new('--cloudevents-mode', '--cloudevents-mode', [CompletionResultType]::ParameterName, 'With --format cloudevents: how the attributes travel, `binary` or `structured`')
            [CompletionResult]::new('--cloudevents-source', '--cloudevents-source', [CompletionResultType]::ParameterName, 'With --format cloudevents: the `source` attribute, a URI-reference, e.g. https://shop.example.com/orders [default: /outboxctl/DATABASE/SCHEMA]')
            [CompletionResult]::new('--mode', '--mode', [CompletionResultType]::ParameterName, 'How claims are settled. `lease`: claim commits a lease, publish runs outside any transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and mark in one transaction that stays open during the publish (fewer writes per event). `log`: while `outboxctl log enable` is on, read the outbox as a log between transaction-id snapshots, one reader at a time, with no write per published event. `auto`: log while log mode is on; otherwise tx for stdout, file, null, Redis and Kafka (a batch is published within one --publish-timeout), lease for HTTP, NATS and RabbitMQ (a publish per event: a slow sink would keep the transaction open up to the lease). tx and lease refuse to start while log mode is on, and log while it is off')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows claimed per batch')
            [CompletionResult]::new('--batch-bytes', '--batch-bytes', [CompletionResultType]::ParameterName, 'Bytes claimed per batch, at most (payload and headers, e.g. 16MiB, 512KiB): a batch stops at --batch-size rows or at this many bytes, whichever comes first, so the relay''s memory stays within a small multiple of it. An event larger than this is claimed alone')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Publishes in flight at once within a batch')
            [CompletionResult]::new('--pipeline-depth', '--pipeline-depth', [CompletionResultType]::ParameterName, 'Batches in flight at once (1-4): the next batch is claimed while the previous one publishes, when that one''s claim came back full. 1 claims, publishes and settles one batch after another. A relay killed mid-batch re-sends at most this many batches [default: 2; 1 for stdout, file and null (a local write leaves nothing to overlap)]. For kafka:// the next claim waits until the previous one has returned, so a key''s events keep their order. In log mode: pages, each read on from the one before and settled after it [default: 2 for every sink]')
            [CompletionResult]::new('--lease', '--lease', [CompletionResultType]::ParameterName, 'How long a claim is held before another relay may take the row [default: 30s]')
            [CompletionResult]::new('--publish-timeout', '--publish-timeout', [CompletionResultType]::ParameterName, 'Timeout of one publish (a stdout or file write too); must be shorter than --lease [default: half the lease]')
            [CompletionResult]::new('--max-attempts', '--max-attempts', [CompletionResultType]::ParameterName, 'Attempts before a row is dead-lettered. A sink outage (the sink took no event of a batch) counts none: the rows are given back untouched')
            [CompletionResult]::new('--backoff-base', '--backoff-base', [CompletionResultType]::ParameterName, 'Backoff after the first failure; doubles per attempt, with jitter')
            [CompletionResult]::new('--backoff-max', '--backoff-max', [CompletionResultType]::ParameterName, 'Upper bound of the backoff')
            [CompletionResult]::new('--poll-interval', '--poll-interval', [CompletionResultType]::ParameterName, 'Daemon: look for work at least this often even without a notification')
            [CompletionResult]::new('--shutdown-timeout', '--shutdown-timeout', [CompletionResultType]::ParameterName, 'On SIGTERM/SIGINT, wait this long for in-flight publishes before giving up on them')
            [CompletionResult]::new('--max-events', '--max-events', [CompletionResultType]::ParameterName, 'With --once: stop after about this many events')
            [CompletionResult]::new('--max-duration', '--max-duration', [CompletionResultType]::ParameterName, 'With --once: stop claiming after this long')
            [CompletionResult]::new('--http-header', '--http-header', [CompletionResultType]::ParameterName, 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header ''Upstash-Deduplication-Id: {idempotency_key}''. In the environment variable, one header per line')
            [CompletionResult]::new('--kafka-property', '--kafka-property', [CompletionResultType]::ParameterName, 'A librdkafka property for the kafka sink (repeatable), e.g. security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=relay, sasl.password=..., linger.ms=10. Values are never shown or logged; prefer the environment variable for secrets (one KEY=VALUE per line). bootstrap.servers, enable.idempotence and message.timeout.ms are the relay''s')
            [CompletionResult]::new('--signing-secret-env', '--signing-secret-env', [CompletionResultType]::ParameterName, 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line')
            [CompletionResult]::new('--async-commit', '--async-commit', [CompletionResultType]::ParameterName, 'Let the relay''s own session commit asynchronously (synchronous_commit=off). A mark lost in a server crash only causes a re-publish with the same dedup id')
            [CompletionResult]::new('--metrics-addr', '--metrics-addr', [CompletionResultType]::ParameterName, 'Daemon: serve Prometheus metrics (GET /metrics) and probes (GET /livez: the loop makes progress; GET /readyz: the database answers and the sink is not in an outage) on this address, e.g. 0.0.0.0:9464. Off by default. Not with --once (a run that exits is not scraped: use `stats` for cron). A port in use fails the start (exit 1)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--once', '--once', [CompletionResultType]::ParameterName, 'Drain what is ready now, print a summary, exit')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;stats' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--by', '--by', [CompletionResultType]::ParameterName, 'Break the figures down by a column')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format: human (a table), json (the same as --json) or prometheus (text exposition, for node_exporter''s textfile collector) [default: human, json with --json]. An explicit --format wins over --json')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Write the output to this file instead of stdout, atomically: a temporary file in the same directory, renamed over PATH, so a reader (node_exporter) never sees half a file. With --format prometheus or json')
            [CompletionResult]::new('--warn-lag', '--warn-lag', [CompletionResultType]::ParameterName, 'WARNING when the lag is longer than this, e.g. 1m. The lag is how late the most overdue pending event is: a ready event counts from when it fell due (available_at); one waiting for a retry, or being retried, from when it first fell due (taken as its created_at: for an event published with a delay that has since failed, the delay counts too); one scheduled for later and never tried does not count')
            [CompletionResult]::new('--crit-lag', '--crit-lag', [CompletionResultType]::ParameterName, 'CRITICAL when the lag (see --warn-lag) is longer than this, e.g. 5m')
            [CompletionResult]::new('--warn-dead', '--warn-dead', [CompletionResultType]::ParameterName, 'WARNING when more than N events are dead-lettered (0: any dead letter)')
            [CompletionResult]::new('--crit-dead', '--crit-dead', [CompletionResultType]::ParameterName, 'CRITICAL when more than N events are dead-lettered')
            [CompletionResult]::new('--warn-backlog', '--warn-backlog', [CompletionResultType]::ParameterName, 'WARNING when more than N events are due and unpublished (ready + in flight; scheduled events are not backlog until due)')
            [CompletionResult]::new('--crit-backlog', '--crit-backlog', [CompletionResultType]::ParameterName, 'CRITICAL when more than N events are due and unpublished (ready + in flight)')
            [CompletionResult]::new('--warn-retrying', '--warn-retrying', [CompletionResultType]::ParameterName, 'WARNING when more than N pending events have failed at least once (retrying)')
            [CompletionResult]::new('--crit-retrying', '--crit-retrying', [CompletionResultType]::ParameterName, 'CRITICAL when more than N pending events have failed at least once (retrying)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('--check', '--check', [CompletionResultType]::ParameterName, 'Compare the totals with the thresholds below and print one Nagios status line with performance data (or --json). Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the database unreachable, bad arguments, or any other error), instead of the general ones. Needs at least one threshold')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;top' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--interval', '--interval', [CompletionResultType]::ParameterName, 'How often to read the figures and redraw (at least 100ms). Also the width of one bar of the throughput sparkline')
            [CompletionResult]::new('--by', '--by', [CompletionResultType]::ParameterName, 'What the table of the largest backlogs groups by')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('ls', 'ls', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('discard', 'discard', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('rm', 'rm', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;dlq' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('ls', 'ls', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('discard', 'discard', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('rm', 'rm', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;dead;list' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead;ls' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dlq;list' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dlq;ls' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead;show' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dlq;show' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead;discard' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows deleted per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every dead-lettered event (no filter)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List what would be discarded; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead;rm' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows deleted per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every dead-lettered event (no filter)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List what would be discarded; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dlq;discard' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows deleted per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every dead-lettered event (no filter)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List what would be discarded; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dlq;rm' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows deleted per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every dead-lettered event (no filter)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List what would be discarded; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead;export' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, '`publish`: the keys `publish --file` accepts. `full`: every column (id, attempts, last_error, times...), for analysis; not accepted by `publish`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dlq;export' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, '`publish`: the keys `publish --file` accepts. `full`: every column (id, attempts, last_error, times...), for analysis; not accepted by `publish`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;dead;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('discard', 'discard', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;dead;help;list' {
            break
        }
        'outboxctl;dead;help;show' {
            break
        }
        'outboxctl;dead;help;discard' {
            break
        }
        'outboxctl;dead;help;export' {
            break
        }
        'outboxctl;dead;help;help' {
            break
        }
        'outboxctl;dlq;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('discard', 'discard', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;dlq;help;list' {
            break
        }
        'outboxctl;dlq;help;show' {
            break
        }
        'outboxctl;dlq;help;discard' {
            break
        }
        'outboxctl;dlq;help;export' {
            break
        }
        'outboxctl;dlq;help;help' {
            break
        }
        'outboxctl;requeue' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the most recently dead-lettered first')
            [CompletionResult]::new('--delay', '--delay', [CompletionResultType]::ParameterName, 'Make the events due this long from now (database clock) instead of now, e.g. 10m')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows updated per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every dead-lettered event (no filter)')
            [CompletionResult]::new('--keep-attempts', '--keep-attempts', [CompletionResultType]::ParameterName, 'Keep attempt_count instead of resetting it to 0 (the relay then dead-letters the event again after one more failure)')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List exactly what would be requeued; change nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;replay' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--sink', '--sink', [CompletionResultType]::ParameterName, 'Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null discards events on purpose), null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id} (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take the placeholders of --http-header [default: stdout]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'What each event is sent as: `document` (outboxctl''s JSON document) or `cloudevents` (CloudEvents 1.0)')
            [CompletionResult]::new('--cloudevents-mode', '--cloudevents-mode', [CompletionResultType]::ParameterName, 'With --format cloudevents: how the attributes travel, `binary` or `structured`')
            [CompletionResult]::new('--cloudevents-source', '--cloudevents-source', [CompletionResultType]::ParameterName, 'With --format cloudevents: the `source` attribute, a URI-reference, e.g. https://shop.example.com/orders [default: /outboxctl/DATABASE/SCHEMA]')
            [CompletionResult]::new('--from-id', '--from-id', [CompletionResultType]::ParameterName, 'Start at this id: selected events with a lower id are not sent. How a stopped replay resumes (its error names the id)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events, the lowest ids first')
            [CompletionResult]::new('--replay-id', '--replay-id', [CompletionResultType]::ParameterName, 'The replay this run continues: its audit id is the ID of the fresh keys and of the `outbox-replay-id` header (instead of this run''s own), so a resumed replay sends each event as the stopped one would have. A stopped run''s resume hint includes it')
            [CompletionResult]::new('--rate', '--rate', [CompletionResultType]::ParameterName, 'At most this many events per unit of time: N/s, N/m or N/h (e.g. 200/s), in bursts of at most one second''s worth [default: as fast as the sink takes them]')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows read per statement (in id order, after the last one read)')
            [CompletionResult]::new('--batch-bytes', '--batch-bytes', [CompletionResultType]::ParameterName, 'Bytes read per statement, at most (payload and headers, e.g. 16MiB): memory stays within a small multiple of it. An event larger than this is read alone')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Publishes in flight at once (events of one key are never in flight together)')
            [CompletionResult]::new('--publish-timeout', '--publish-timeout', [CompletionResultType]::ParameterName, 'Timeout of one publish (a stdout or file write too) [default: 15s]')
            [CompletionResult]::new('--retry-for', '--retry-for', [CompletionResultType]::ParameterName, 'Keep retrying what the sink fails (an outage, or an event it fails for now) this long, with --backoff-base and --backoff-max, before stopping (exit code 5) with the id to resume from')
            [CompletionResult]::new('--backoff-base', '--backoff-base', [CompletionResultType]::ParameterName, 'Backoff after the first failure; doubles per attempt, with jitter')
            [CompletionResult]::new('--backoff-max', '--backoff-max', [CompletionResultType]::ParameterName, 'Upper bound of the backoff')
            [CompletionResult]::new('--http-header', '--http-header', [CompletionResultType]::ParameterName, 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header ''Upstash-Deduplication-Id: {idempotency_key}''. In the environment variable, one header per line')
            [CompletionResult]::new('--kafka-property', '--kafka-property', [CompletionResultType]::ParameterName, 'A librdkafka property for the kafka sink (repeatable), e.g. security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=relay, sasl.password=..., linger.ms=10. Values are never shown or logged; prefer the environment variable for secrets (one KEY=VALUE per line). bootstrap.servers, enable.idempotence and message.timeout.ms are the relay''s')
            [CompletionResult]::new('--signing-secret-env', '--signing-secret-env', [CompletionResultType]::ParameterName, 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Every published event still in the table (no filter)')
            [CompletionResult]::new('--fresh-keys', '--fresh-keys', [CompletionResultType]::ParameterName, 'Send each event with a new idempotency key, `KEY:replay:ID` (the original key and the replay''s id), so that a deduplicating consumer processes it again. The original key is in the header `outbox-replay-original-key`')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Count what would be sent and list the first 100 events; send nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;ordering' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('enable', 'enable', [CompletionResultType]::ParameterValue, 'Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead)')
            [CompletionResult]::new('disable', 'disable', [CompletionResultType]::ParameterValue, 'Switch ordered delivery off, for the named aggregate types or (without --aggregate-type) entirely')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Which aggregate types are ordered, their --on-dead, and how many keys are blocked')
            [CompletionResult]::new('skip', 'skip', [CompletionResultType]::ParameterValue, 'Skip a key''s head so the rest of the key flows: a dead head that blocks its key stops blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;ordering;enable' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'An aggregate type to order (repeatable); without it every type is ordered')
            [CompletionResult]::new('--on-dead', '--on-dead', [CompletionResultType]::ParameterName, 'What a dead-lettered head does to its key')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;ordering;disable' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'An aggregate type to stop ordering (repeatable; `*` is the every-type switch); without it ordering is switched off for every type')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;ordering;status' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;ordering;skip' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;ordering;help' {
            [CompletionResult]::new('enable', 'enable', [CompletionResultType]::ParameterValue, 'Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead)')
            [CompletionResult]::new('disable', 'disable', [CompletionResultType]::ParameterValue, 'Switch ordered delivery off, for the named aggregate types or (without --aggregate-type) entirely')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Which aggregate types are ordered, their --on-dead, and how many keys are blocked')
            [CompletionResult]::new('skip', 'skip', [CompletionResultType]::ParameterValue, 'Skip a key''s head so the rest of the key flows: a dead head that blocks its key stops blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;ordering;help;enable' {
            break
        }
        'outboxctl;ordering;help;disable' {
            break
        }
        'outboxctl;ordering;help;status' {
            break
        }
        'outboxctl;ordering;help;skip' {
            break
        }
        'outboxctl;ordering;help;help' {
            break
        }
        'outboxctl;log' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('enable', 'enable', [CompletionResultType]::ParameterValue, 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log''s position (events the log published are marked published, one write each, once) and drops the index. Audited')
            [CompletionResult]::new('disable', 'disable', [CompletionResultType]::ParameterValue, 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log''s position (events the log published are marked published, one write each, once) and drops the index. Audited')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Whether log mode is on, the log''s position, its reader and its retry set')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;log;enable' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;log;disable' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;log;status' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;log;help' {
            [CompletionResult]::new('enable', 'enable', [CompletionResultType]::ParameterValue, 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log''s position (events the log published are marked published, one write each, once) and drops the index. Audited')
            [CompletionResult]::new('disable', 'disable', [CompletionResultType]::ParameterValue, 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log''s position (events the log published are marked published, one write each, once) and drops the index. Audited')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Whether log mode is on, the log''s position, its reader and its retry set')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;log;help;enable' {
            break
        }
        'outboxctl;log;help;disable' {
            break
        }
        'outboxctl;log;help;status' {
            break
        }
        'outboxctl;log;help;help' {
            break
        }
        'outboxctl;events' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('ls', 'ls', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('reschedule', 'reschedule', [CompletionResultType]::ParameterValue, 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('edit', 'edit', [CompletionResultType]::ParameterValue, 'Change pending or dead events before they are handled: payload, headers, event type')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;event' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('ls', 'ls', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('reschedule', 'reschedule', [CompletionResultType]::ParameterValue, 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('edit', 'edit', [CompletionResultType]::ParameterValue, 'Change pending or dead events before they are handled: payload, headers, event type')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;events;list' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;events;ls' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;event;list' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;event;ls' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'Only events in these states (comma-separated or repeated). `pending` means ready, scheduled and in-flight. [default: all states]')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show at most this many events (a note on stderr says when more match)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;events;show' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;event;show' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;events;cancel' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'With filters: only events in these states (comma-separated or repeated; `pending` means ready, scheduled and in-flight) [default: ready, scheduled, dead; in-flight too with --force]. Published events are never cancelled')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'With filters: at most this many events, the newest first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'With filters: rows deleted per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Also cancel in-flight (leased) events; see above for what that means')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Show what would be cancelled or refused; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;event;cancel' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'With filters: only events in these states (comma-separated or repeated; `pending` means ready, scheduled and in-flight) [default: ready, scheduled, dead; in-flight too with --force]. Published events are never cancelled')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'With filters: at most this many events, the newest first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'With filters: rows deleted per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Also cancel in-flight (leased) events; see above for what that means')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Show what would be cancelled or refused; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;events;reschedule' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'With filters: only events in these states (ready, scheduled; comma-separated or repeated) [default: ready and scheduled]')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'With filters: at most this many events, the newest first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'With filters: rows updated per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--at', '--at', [CompletionResultType]::ParameterName, 'Due at this time (RFC 3339); a past time makes them due now')
            [CompletionResult]::new('--delay', '--delay', [CompletionResultType]::ParameterName, 'Due this long from now (database clock), e.g. 30m; 0s makes them due now')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Show what would be moved or refused; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;event;reschedule' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the next character literal (e.g. ''order.*'')')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type (exact)')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id (exact)')
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`, when it was created for `events`, when it was published for `replay` (in log mode, which records no time per event, when it was created for an event the log published)')
            [CompletionResult]::new('--until', '--until', [CompletionResultType]::ParameterName, 'Only events whose time is before this (RFC 3339, or a duration ago); see --since')
            [CompletionResult]::new('--error', '--error', [CompletionResultType]::ParameterName, 'Only events whose last_error contains this text (case-insensitive)')
            [CompletionResult]::new('--error-regex', '--error-regex', [CompletionResultType]::ParameterName, 'Only events whose last_error matches this PostgreSQL regular expression (case-sensitive; start it with (?i) to ignore case), e.g. ''HTTP (502|503)''')
            [CompletionResult]::new('--state', '--state', [CompletionResultType]::ParameterName, 'With filters: only events in these states (ready, scheduled; comma-separated or repeated) [default: ready and scheduled]')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'With filters: at most this many events, the newest first')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'With filters: rows updated per statement (each batch is its own short transaction)')
            [CompletionResult]::new('--at', '--at', [CompletionResultType]::ParameterName, 'Due at this time (RFC 3339); a past time makes them due now')
            [CompletionResult]::new('--delay', '--delay', [CompletionResultType]::ParameterName, 'Due this long from now (database clock), e.g. 30m; 0s makes them due now')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Show what would be moved or refused; change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;events;edit' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--payload', '--payload', [CompletionResultType]::ParameterName, 'The new payload as JSON, or @PATH to read it from a file, or @- from stdin (replaces the whole payload)')
            [CompletionResult]::new('--set-header', '--set-header', [CompletionResultType]::ParameterName, 'Set a header (repeatable): --set-header schema-version=2. In the environment variable, one KEY=VALUE per line')
            [CompletionResult]::new('--unset-header', '--unset-header', [CompletionResultType]::ParameterName, 'Remove a header (repeatable). In the environment variable, one name per line')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'The new event type')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--requeue', '--requeue', [CompletionResultType]::ParameterName, 'Dead events only: after the change, make them ready now with attempt_count 0 (like `outboxctl requeue`), in the same statement. Refused for events that are not dead')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print each event''s diff (event type, headers, payload as pretty JSON); change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;event;edit' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--payload', '--payload', [CompletionResultType]::ParameterName, 'The new payload as JSON, or @PATH to read it from a file, or @- from stdin (replaces the whole payload)')
            [CompletionResult]::new('--set-header', '--set-header', [CompletionResultType]::ParameterName, 'Set a header (repeatable): --set-header schema-version=2. In the environment variable, one KEY=VALUE per line')
            [CompletionResult]::new('--unset-header', '--unset-header', [CompletionResultType]::ParameterName, 'Remove a header (repeatable). In the environment variable, one name per line')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'The new event type')
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why, recorded in the audit table')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--requeue', '--requeue', [CompletionResultType]::ParameterName, 'Dead events only: after the change, make them ready now with attempt_count 0 (like `outboxctl requeue`), in the same statement. Refused for events that are not dead')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print each event''s diff (event type, headers, payload as pretty JSON); change nothing')
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI): without it the command refuses with exit code 2 and changes nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;events;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('reschedule', 'reschedule', [CompletionResultType]::ParameterValue, 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('edit', 'edit', [CompletionResultType]::ParameterValue, 'Change pending or dead events before they are handled: payload, headers, event type')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;events;help;list' {
            break
        }
        'outboxctl;events;help;show' {
            break
        }
        'outboxctl;events;help;cancel' {
            break
        }
        'outboxctl;events;help;reschedule' {
            break
        }
        'outboxctl;events;help;edit' {
            break
        }
        'outboxctl;events;help;help' {
            break
        }
        'outboxctl;event;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('reschedule', 'reschedule', [CompletionResultType]::ParameterValue, 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('edit', 'edit', [CompletionResultType]::ParameterValue, 'Change pending or dead events before they are handled: payload, headers, event type')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;event;help;list' {
            break
        }
        'outboxctl;event;help;show' {
            break
        }
        'outboxctl;event;help;cancel' {
            break
        }
        'outboxctl;event;help;reschedule' {
            break
        }
        'outboxctl;event;help;edit' {
            break
        }
        'outboxctl;event;help;help' {
            break
        }
        'outboxctl;prune' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--older-than', '--older-than', [CompletionResultType]::ParameterName, 'Delete events published more than this long ago (database clock), e.g. 7d')
            [CompletionResult]::new('--dead-older-than', '--dead-older-than', [CompletionResultType]::ParameterName, 'Also delete dead-lettered events dead for longer than this, e.g. 30d. Off by default')
            [CompletionResult]::new('--processed-older-than', '--processed-older-than', [CompletionResultType]::ParameterName, 'Also delete processed_messages rows (consumer dedup) older than this, e.g. 14d. Off by default; keep it longer than any redelivery can take')
            [CompletionResult]::new('--audit-older-than', '--audit-older-than', [CompletionResultType]::ParameterName, 'Also delete audit trail rows (outbox_audit: who requeued, discarded, cancelled, edited or pruned what, and an edit''s old and new payload) written longer ago than this, e.g. 400d. Off by default: without it the audit trail is kept for ever')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows deleted per batch (one short transaction each)')
            [CompletionResult]::new('--sleep', '--sleep', [CompletionResultType]::ParameterName, 'Pause between batches (throttle), e.g. 50ms')
            [CompletionResult]::new('--max-duration', '--max-duration', [CompletionResultType]::ParameterName, 'Start no batch after this long (the cron window), e.g. 10m')
            [CompletionResult]::new('--max-batches', '--max-batches', [CompletionResultType]::ParameterName, 'Stop after this many batches')
            [CompletionResult]::new('--actor', '--actor', [CompletionResultType]::ParameterName, 'Who runs this, recorded in the audit row beside the database role, e.g. alice or deploy-bot [default: $USER@hostname]')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Count what would be deleted; delete nothing (takes no lock)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;doctor' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--warn-lag', '--warn-lag', [CompletionResultType]::ParameterName, 'WARN when the lag is longer than this: how late the most overdue pending event is, as `stats --check` counts it (an event scheduled for later and never tried is not late)')
            [CompletionResult]::new('--crit-lag', '--crit-lag', [CompletionResultType]::ParameterName, 'FAIL when the lag (see --warn-lag) is longer than this')
            [CompletionResult]::new('--max-xact-age', '--max-xact-age', [CompletionResultType]::ParameterName, 'WARN when a transaction, prepared transaction or replication slot has held back vacuum''s xmin horizon for longer than this')
            [CompletionResult]::new('--retention', '--retention', [CompletionResultType]::ParameterName, 'WARN when published events older than this are still in the table (prune is not running)')
            [CompletionResult]::new('--lease', '--lease', [CompletionResultType]::ParameterName, 'How long a claim is held before another relay may take the row [default: 30s]')
            [CompletionResult]::new('--publish-timeout', '--publish-timeout', [CompletionResultType]::ParameterName, 'Timeout of one publish (a stdout or file write too); must be shorter than --lease [default: half the lease]')
            [CompletionResult]::new('--sink', '--sink', [CompletionResultType]::ParameterName, 'Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null discards events on purpose), null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id} (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take the placeholders of --http-header [default: stdout]')
            [CompletionResult]::new('--max-attempts', '--max-attempts', [CompletionResultType]::ParameterName, 'Attempts before a row is dead-lettered. A sink outage (the sink took no event of a batch) counts none: the rows are given back untouched')
            [CompletionResult]::new('--backoff-base', '--backoff-base', [CompletionResultType]::ParameterName, 'Backoff after the first failure; doubles per attempt, with jitter')
            [CompletionResult]::new('--backoff-max', '--backoff-max', [CompletionResultType]::ParameterName, 'Upper bound of the backoff')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;grants' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--role', '--role', [CompletionResultType]::ParameterName, 'The role to grant to (quoted as an identifier)')
            [CompletionResult]::new('--for', '--for', [CompletionResultType]::ParameterName, 'What the role will do')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--apply', '--apply', [CompletionResultType]::ParameterName, 'Run the statements (one transaction) instead of printing them')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;completions' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;demo' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;bench' {
            [CompletionResult]::new('--database-url', '--database-url', [CompletionResultType]::ParameterName, 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql')
            [CompletionResult]::new('--schema', '--schema', [CompletionResultType]::ParameterName, 'Schema holding the outbox tables (created by `migrate` if missing)')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting after this long (e.g. 5s)')
            [CompletionResult]::new('--pooler', '--pooler', [CompletionResultType]::ParameterName, 'What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any PgBouncer version): every statement in a transaction of its own that sets the schema and the session''s settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and requeue run this way (other commands exit 2)')
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'Events in the backlog for publish and drain')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows per claim')
            [CompletionResult]::new('--relays', '--relays', [CompletionResultType]::ParameterName, 'Relay processes draining at once (and connections for the SQL ceiling)')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Publishes in flight per relay')
            [CompletionResult]::new('--mode', '--mode', [CompletionResultType]::ParameterName, 'Relay mode to measure (auto means tx here: the null sink is local)')
            [CompletionResult]::new('--rate', '--rate', [CompletionResultType]::ParameterName, 'Offered rate for the latency test, events/s')
            [CompletionResult]::new('--latency-duration', '--latency-duration', [CompletionResultType]::ParameterName, 'How long the latency test offers load')
            [CompletionResult]::new('--delayed-events', '--delayed-events', [CompletionResultType]::ParameterName, 'Delayed events for the lateness test')
            [CompletionResult]::new('--prune-rows', '--prune-rows', [CompletionResultType]::ParameterName, 'Published rows for the prune test (0 skips it)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--keep-schema', '--keep-schema', [CompletionResultType]::ParameterName, 'Keep the scratch schema afterwards (for EXPLAIN and poking around)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More of outboxctl''s own log output (-v info, -vv debug, -vvv trace; other crates stay off). `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors: no log lines below error and no summary lines ("inserted event 42"). Data (tables, --json, relayed events) is still printed')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;help' {
            [CompletionResult]::new('migrate', 'migrate', [CompletionResultType]::ParameterValue, 'Create or upgrade the outbox schema (safe when several replicas run it at once)')
            [CompletionResult]::new('publish', 'publish', [CompletionResultType]::ParameterValue, 'Insert events: one from flags, or many from a JSON-lines file')
            [CompletionResult]::new('relay', 'relay', [CompletionResultType]::ParameterValue, 'Relay ready events to a sink: `--once` for cron, or as a daemon')
            [CompletionResult]::new('stats', 'stats', [CompletionResultType]::ParameterValue, 'Backlog, lag, in-flight, dead letters and throughput')
            [CompletionResult]::new('top', 'top', [CompletionResultType]::ParameterValue, 'A live view of the outbox for on-call: backlog, lag, throughput, relays, dead letters')
            [CompletionResult]::new('dead', 'dead', [CompletionResultType]::ParameterValue, 'Dead letters: list, show, discard and export events the relay gave up on')
            [CompletionResult]::new('requeue', 'requeue', [CompletionResultType]::ParameterValue, 'Send dead-lettered events again, by ids or by filters (--all for every one)')
            [CompletionResult]::new('replay', 'replay', [CompletionResultType]::ParameterValue, 'Send published events again, to any sink, without changing them')
            [CompletionResult]::new('ordering', 'ordering', [CompletionResultType]::ParameterValue, 'Ordered delivery per key (tenant_id, aggregate_type, aggregate_id), switched on in the database.')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Log mode: relays read the outbox as a log, with no write per published event.')
            [CompletionResult]::new('events', 'events', [CompletionResultType]::ParameterValue, 'Any event, in any state: list, show, cancel, reschedule and edit')
            [CompletionResult]::new('prune', 'prune', [CompletionResultType]::ParameterValue, 'Delete published events past their retention, in short batches (for cron)')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Tell what is wrong with an outbox before it hurts: one PASS / WARN / FAIL line per check')
            [CompletionResult]::new('grants', 'grants', [CompletionResultType]::ParameterValue, 'Print the GRANT statements a role needs for one use of outboxctl (or apply them)')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print a shell completion script')
            [CompletionResult]::new('demo', 'demo', [CompletionResultType]::ParameterValue, 'Show the tool end to end in a scratch schema, then drop it')
            [CompletionResult]::new('bench', 'bench', [CompletionResultType]::ParameterValue, 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'outboxctl;help;migrate' {
            break
        }
        'outboxctl;help;publish' {
            break
        }
        'outboxctl;help;relay' {
            break
        }
        'outboxctl;help;stats' {
            break
        }
        'outboxctl;help;top' {
            break
        }
        'outboxctl;help;dead' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error''s first line')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'A dead letter in full: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('discard', 'discard', [CompletionResultType]::ParameterValue, 'Delete dead-lettered events, by ids or by filters (--all for every one)')
            [CompletionResult]::new('export', 'export', [CompletionResultType]::ParameterValue, 'Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`')
            break
        }
        'outboxctl;help;dead;list' {
            break
        }
        'outboxctl;help;dead;show' {
            break
        }
        'outboxctl;help;dead;discard' {
            break
        }
        'outboxctl;help;dead;export' {
            break
        }
        'outboxctl;help;requeue' {
            break
        }
        'outboxctl;help;replay' {
            break
        }
        'outboxctl;help;ordering' {
            [CompletionResult]::new('enable', 'enable', [CompletionResultType]::ParameterValue, 'Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead)')
            [CompletionResult]::new('disable', 'disable', [CompletionResultType]::ParameterValue, 'Switch ordered delivery off, for the named aggregate types or (without --aggregate-type) entirely')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Which aggregate types are ordered, their --on-dead, and how many keys are blocked')
            [CompletionResult]::new('skip', 'skip', [CompletionResultType]::ParameterValue, 'Skip a key''s head so the rest of the key flows: a dead head that blocks its key stops blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited')
            break
        }
        'outboxctl;help;ordering;enable' {
            break
        }
        'outboxctl;help;ordering;disable' {
            break
        }
        'outboxctl;help;ordering;status' {
            break
        }
        'outboxctl;help;ordering;skip' {
            break
        }
        'outboxctl;help;log' {
            [CompletionResult]::new('enable', 'enable', [CompletionResultType]::ParameterValue, 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log''s position (events the log published are marked published, one write each, once) and drops the index. Audited')
            [CompletionResult]::new('disable', 'disable', [CompletionResultType]::ParameterValue, 'Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox back to queue mode at the log''s position (events the log published are marked published, one write each, once) and drops the index. Audited')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Whether log mode is on, the log''s position, its reader and its retry set')
            break
        }
        'outboxctl;help;log;enable' {
            break
        }
        'outboxctl;help;log;disable' {
            break
        }
        'outboxctl;help;log;status' {
            break
        }
        'outboxctl;help;events' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Events, newest first, with their state')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Any event in full, whatever its state: every column, payload and headers pretty-printed, the whole last_error, and its audit history (requeues, edits, reschedules)')
            [CompletionResult]::new('cancel', 'cancel', [CompletionResultType]::ParameterValue, 'Delete events before they are published, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('reschedule', 'reschedule', [CompletionResultType]::ParameterValue, 'Move when pending events are due, by ids (all or nothing) or by filters (in batches)')
            [CompletionResult]::new('edit', 'edit', [CompletionResultType]::ParameterValue, 'Change pending or dead events before they are handled: payload, headers, event type')
            break
        }
        'outboxctl;help;events;list' {
            break
        }
        'outboxctl;help;events;show' {
            break
        }
        'outboxctl;help;events;cancel' {
            break
        }
        'outboxctl;help;events;reschedule' {
            break
        }
        'outboxctl;help;events;edit' {
            break
        }
        'outboxctl;help;prune' {
            break
        }
        'outboxctl;help;doctor' {
            break
        }
        'outboxctl;help;grants' {
            break
        }
        'outboxctl;help;completions' {
            break
        }
        'outboxctl;help;demo' {
            break
        }
        'outboxctl;help;bench' {
            break
        }
        'outboxctl;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
