
use builtin;
use str;

set edit:completion:arg-completer[outboxctl] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'outboxctl'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'outboxctl'= {
            cand --log-format 'Log line format'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand migrate 'Create or upgrade the outbox schema (safe when several replicas run it at once)'
            cand publish 'Insert events: one from flags, or many from a JSON-lines file'
            cand relay 'Relay ready events to a sink: `--once` for cron, or as a daemon'
            cand stats 'Backlog, lag, in-flight, dead letters and throughput'
            cand completions 'Print a shell completion script'
            cand demo 'Show the tool end to end in a scratch schema, then drop it'
            cand bench 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'outboxctl;migrate'= {
            cand --database-url 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql'
            cand --schema 'Schema holding the outbox tables (created by `migrate` if missing)'
            cand --connect-timeout 'Give up connecting after this long (e.g. 5s)'
            cand --log-format 'Log line format'
            cand --status 'List applied and pending migrations; change nothing'
            cand --dry-run 'List applied and pending migrations; change nothing'
            cand --json 'Print JSON on stdout instead of a table'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;publish'= {
            cand --database-url 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql'
            cand --schema 'Schema holding the outbox tables (created by `migrate` if missing)'
            cand --connect-timeout 'Give up connecting after this long (e.g. 5s)'
            cand -f 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")'
            cand --file 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")'
            cand --event-type 'Event type, e.g. order.placed'
            cand --aggregate-type 'Aggregate type, e.g. order'
            cand --aggregate-id 'Aggregate id, e.g. 42'
            cand --tenant 'Tenant uuid [default: 00000000-0000-0000-0000-000000000000, the nil uuid]'
            cand --payload 'Payload as JSON, or @PATH to read it from a file'
            cand --header 'A header to store with the event (repeatable): --header schema-version=1'
            cand --idempotency-key 'Idempotency key [default: a fresh random uuid, so every call inserts a new event]'
            cand --delay 'Deliver no earlier than this long from now (database clock), e.g. 5m'
            cand --at 'Deliver no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)'
            cand --batch-size 'Rows per INSERT statement in bulk mode'
            cand --log-format 'Log line format'
            cand --json 'Print JSON on stdout instead of a table'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;relay'= {
            cand --database-url 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql'
            cand --schema 'Schema holding the outbox tables (created by `migrate` if missing)'
            cand --connect-timeout 'Give up connecting after this long (e.g. 5s)'
            cand --sink 'Where to publish: stdout, null, file:PATH, http(s)://URL'
            cand --mode 'How claims are settled. `lease`: claim commits a lease, publish runs outside any transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and mark in one short transaction (fast local sinks; fewer writes per event). `auto`: tx for stdout, file and null, lease otherwise'
            cand --batch-size 'Rows claimed per batch'
            cand --concurrency 'Publishes in flight at once within a batch'
            cand --lease 'How long a claim is held before another relay may take the row'
            cand --publish-timeout 'Timeout of one publish; must be shorter than --lease [default: half the lease]'
            cand --max-attempts 'Attempts before a row is dead-lettered'
            cand --backoff-base 'Backoff after the first failure; doubles per attempt, with jitter'
            cand --backoff-max 'Upper bound of the backoff'
            cand --poll-interval 'Daemon: look for work at least this often even without a notification'
            cand --shutdown-timeout 'On SIGTERM/SIGINT, wait this long for in-flight publishes before giving up on them'
            cand --max-events 'With --once: stop after about this many events'
            cand --max-duration 'With --once: stop claiming after this long'
            cand --http-header 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header ''Upstash-Deduplication-Id: {idempotency_key}'''
            cand --signing-secret-env 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line'
            cand --async-commit 'Let the relay''s own session commit asynchronously (synchronous_commit=off). A mark lost in a server crash only causes a re-publish with the same dedup id'
            cand --log-format 'Log line format'
            cand --once 'Drain what is ready now, print a summary, exit'
            cand --json 'Print JSON on stdout instead of a table'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;stats'= {
            cand --database-url 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql'
            cand --schema 'Schema holding the outbox tables (created by `migrate` if missing)'
            cand --connect-timeout 'Give up connecting after this long (e.g. 5s)'
            cand --by 'Break the figures down by a column'
            cand --log-format 'Log line format'
            cand --json 'Print JSON on stdout instead of a table'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;completions'= {
            cand --log-format 'Log line format'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;demo'= {
            cand --database-url 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql'
            cand --schema 'Schema holding the outbox tables (created by `migrate` if missing)'
            cand --connect-timeout 'Give up connecting after this long (e.g. 5s)'
            cand --log-format 'Log line format'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;bench'= {
            cand --database-url 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql'
            cand --schema 'Schema holding the outbox tables (created by `migrate` if missing)'
            cand --connect-timeout 'Give up connecting after this long (e.g. 5s)'
            cand --events 'Events in the backlog for publish and drain'
            cand --batch-size 'Rows per claim'
            cand --relays 'Relay processes draining at once (and connections for the SQL ceiling)'
            cand --concurrency 'Publishes in flight per relay'
            cand --mode 'Relay mode to measure (auto means tx here: the null sink is local)'
            cand --rate 'Offered rate for the latency test, events/s'
            cand --latency-duration 'How long the latency test offers load'
            cand --delayed-events 'Delayed events for the lateness test'
            cand --prune-rows 'Published rows for the prune test (0 skips it)'
            cand --log-format 'Log line format'
            cand --keep-schema 'Keep the scratch schema afterwards (for EXPLAIN and poking around)'
            cand --json 'Print JSON on stdout instead of a table'
            cand -v 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand --verbose 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
            cand -q 'Only errors'
            cand --quiet 'Only errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'outboxctl;help'= {
            cand migrate 'Create or upgrade the outbox schema (safe when several replicas run it at once)'
            cand publish 'Insert events: one from flags, or many from a JSON-lines file'
            cand relay 'Relay ready events to a sink: `--once` for cron, or as a daemon'
            cand stats 'Backlog, lag, in-flight, dead letters and throughput'
            cand completions 'Print a shell completion script'
            cand demo 'Show the tool end to end in a scratch schema, then drop it'
            cand bench 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'outboxctl;help;migrate'= {
        }
        &'outboxctl;help;publish'= {
        }
        &'outboxctl;help;relay'= {
        }
        &'outboxctl;help;stats'= {
        }
        &'outboxctl;help;completions'= {
        }
        &'outboxctl;help;demo'= {
        }
        &'outboxctl;help;bench'= {
        }
        &'outboxctl;help;help'= {
        }
    ]
    $completions[$command]
}
