
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
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('migrate', 'migrate', [CompletionResultType]::ParameterValue, 'Create or upgrade the outbox schema (safe when several replicas run it at once)')
            [CompletionResult]::new('publish', 'publish', [CompletionResultType]::ParameterValue, 'Insert events: one from flags, or many from a JSON-lines file')
            [CompletionResult]::new('relay', 'relay', [CompletionResultType]::ParameterValue, 'Relay ready events to a sink: `--once` for cron, or as a daemon')
            [CompletionResult]::new('stats', 'stats', [CompletionResultType]::ParameterValue, 'Backlog, lag, in-flight, dead letters and throughput')
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
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--status', '--status', [CompletionResultType]::ParameterName, 'List applied and pending migrations; change nothing')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'List applied and pending migrations; change nothing')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
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
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")')
            [CompletionResult]::new('--file', '--file', [CompletionResultType]::ParameterName, 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")')
            [CompletionResult]::new('--event-type', '--event-type', [CompletionResultType]::ParameterName, 'Event type, e.g. order.placed')
            [CompletionResult]::new('--aggregate-type', '--aggregate-type', [CompletionResultType]::ParameterName, 'Aggregate type, e.g. order')
            [CompletionResult]::new('--aggregate-id', '--aggregate-id', [CompletionResultType]::ParameterName, 'Aggregate id, e.g. 42')
            [CompletionResult]::new('--tenant', '--tenant', [CompletionResultType]::ParameterName, 'Tenant uuid [default: 00000000-0000-0000-0000-000000000000, the nil uuid]')
            [CompletionResult]::new('--payload', '--payload', [CompletionResultType]::ParameterName, 'Payload as JSON, or @PATH to read it from a file')
            [CompletionResult]::new('--header', '--header', [CompletionResultType]::ParameterName, 'A header to store with the event (repeatable): --header schema-version=1')
            [CompletionResult]::new('--idempotency-key', '--idempotency-key', [CompletionResultType]::ParameterName, 'Idempotency key [default: a fresh random uuid, so every call inserts a new event]')
            [CompletionResult]::new('--delay', '--delay', [CompletionResultType]::ParameterName, 'Deliver no earlier than this long from now (database clock), e.g. 5m')
            [CompletionResult]::new('--at', '--at', [CompletionResultType]::ParameterName, 'Deliver no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows per INSERT statement in bulk mode')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
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
            [CompletionResult]::new('--sink', '--sink', [CompletionResultType]::ParameterName, 'Where to publish: stdout, null, file:PATH, http(s)://URL')
            [CompletionResult]::new('--mode', '--mode', [CompletionResultType]::ParameterName, 'How claims are settled. `lease`: claim commits a lease, publish runs outside any transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and mark in one short transaction (fast local sinks; fewer writes per event). `auto`: tx for stdout, file and null, lease otherwise')
            [CompletionResult]::new('--batch-size', '--batch-size', [CompletionResultType]::ParameterName, 'Rows claimed per batch')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'Publishes in flight at once within a batch')
            [CompletionResult]::new('--lease', '--lease', [CompletionResultType]::ParameterName, 'How long a claim is held before another relay may take the row')
            [CompletionResult]::new('--publish-timeout', '--publish-timeout', [CompletionResultType]::ParameterName, 'Timeout of one publish; must be shorter than --lease [default: half the lease]')
            [CompletionResult]::new('--max-attempts', '--max-attempts', [CompletionResultType]::ParameterName, 'Attempts before a row is dead-lettered')
            [CompletionResult]::new('--backoff-base', '--backoff-base', [CompletionResultType]::ParameterName, 'Backoff after the first failure; doubles per attempt, with jitter')
            [CompletionResult]::new('--backoff-max', '--backoff-max', [CompletionResultType]::ParameterName, 'Upper bound of the backoff')
            [CompletionResult]::new('--poll-interval', '--poll-interval', [CompletionResultType]::ParameterName, 'Daemon: look for work at least this often even without a notification')
            [CompletionResult]::new('--shutdown-timeout', '--shutdown-timeout', [CompletionResultType]::ParameterName, 'On SIGTERM/SIGINT, wait this long for in-flight publishes before giving up on them')
            [CompletionResult]::new('--max-events', '--max-events', [CompletionResultType]::ParameterName, 'With --once: stop after about this many events')
            [CompletionResult]::new('--max-duration', '--max-duration', [CompletionResultType]::ParameterName, 'With --once: stop claiming after this long')
            [CompletionResult]::new('--http-header', '--http-header', [CompletionResultType]::ParameterName, 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header ''Upstash-Deduplication-Id: {idempotency_key}''')
            [CompletionResult]::new('--signing-secret-env', '--signing-secret-env', [CompletionResultType]::ParameterName, 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line')
            [CompletionResult]::new('--async-commit', '--async-commit', [CompletionResultType]::ParameterName, 'Let the relay''s own session commit asynchronously (synchronous_commit=off). A mark lost in a server crash only causes a re-publish with the same dedup id')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--once', '--once', [CompletionResultType]::ParameterName, 'Drain what is ready now, print a summary, exit')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
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
            [CompletionResult]::new('--by', '--by', [CompletionResultType]::ParameterName, 'Break the figures down by a column')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON on stdout instead of a table')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'outboxctl;completions' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
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
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log line format')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
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
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only errors')
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
