# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_outboxctl_global_optspecs
    string join \n v/verbose q/quiet log-format= h/help V/version
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
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "migrate" -d 'Create or upgrade the outbox schema (safe when several replicas run it at once)'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "publish" -d 'Insert events: one from flags, or many from a JSON-lines file'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "relay" -d 'Relay ready events to a sink: `--once` for cron, or as a daemon'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "stats" -d 'Backlog, lag, in-flight, dead letters and throughput'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "demo" -d 'Show the tool end to end in a scratch schema, then drop it'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "bench" -d 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune'
complete -c outboxctl -n "__fish_outboxctl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l status -l dry-run -d 'List applied and pending migrations; change nothing'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand migrate" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s f -l file -d 'Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type, aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at (RFC 3339) or delay (e.g. "5m")' -r -F
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l event-type -d 'Event type, e.g. order.placed' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l aggregate-type -d 'Aggregate type, e.g. order' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l aggregate-id -d 'Aggregate id, e.g. 42' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l tenant -d 'Tenant uuid [default: 00000000-0000-0000-0000-000000000000, the nil uuid]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l payload -d 'Payload as JSON, or @PATH to read it from a file' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l header -d 'A header to store with the event (repeatable): --header schema-version=1' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l idempotency-key -d 'Idempotency key [default: a fresh random uuid, so every call inserts a new event]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l delay -d 'Deliver no earlier than this long from now (database clock), e.g. 5m' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l at -d 'Deliver no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l batch-size -d 'Rows per INSERT statement in bulk mode' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand publish" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l sink -d 'Where to publish: stdout, null, file:PATH, http(s)://URL' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l mode -d 'How claims are settled. `lease`: claim commits a lease, publish runs outside any transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and mark in one short transaction (fast local sinks; fewer writes per event). `auto`: tx for stdout, file and null, lease otherwise' -r -f -a "auto\t''
lease\t''
tx\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l batch-size -d 'Rows claimed per batch' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l concurrency -d 'Publishes in flight at once within a batch' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l lease -d 'How long a claim is held before another relay may take the row' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l publish-timeout -d 'Timeout of one publish; must be shorter than --lease [default: half the lease]' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l max-attempts -d 'Attempts before a row is dead-lettered' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l backoff-base -d 'Backoff after the first failure; doubles per attempt, with jitter' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l backoff-max -d 'Upper bound of the backoff' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l poll-interval -d 'Daemon: look for work at least this often even without a notification' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l shutdown-timeout -d 'On SIGTERM/SIGINT, wait this long for in-flight publishes before giving up on them' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l max-events -d 'With --once: stop after about this many events' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l max-duration -d 'With --once: stop claiming after this long' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l http-header -d 'Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}. E.g. --http-header \'Upstash-Deduplication-Id: {idempotency_key}\'' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l signing-secret-env -d 'Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable: `whsec_...`, or two separated by a space during rotation. The secret itself never goes on the command line' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l async-commit -d 'Let the relay\'s own session commit asynchronously (synchronous_commit=off). A mark lost in a server crash only causes a re-publish with the same dedup id' -r -f -a "true\t''
false\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l once -d 'Drain what is ready now, print a summary, exit'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand relay" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l by -d 'Break the figures down by a column' -r -f -a "event-type\t''
tenant\t''
aggregate-type\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand stats" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand completions" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand demo" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l database-url -d 'PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l schema -d 'Schema holding the outbox tables (created by `migrate` if missing)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l connect-timeout -d 'Give up connecting after this long (e.g. 5s)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l events -d 'Events in the backlog for publish and drain' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l batch-size -d 'Rows per claim' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l relays -d 'Relay processes draining at once (and connections for the SQL ceiling)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l concurrency -d 'Publishes in flight per relay' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l mode -d 'Relay mode to measure (auto means tx here: the null sink is local)' -r -f -a "auto\t''
lease\t''
tx\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l rate -d 'Offered rate for the latency test, events/s' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l latency-duration -d 'How long the latency test offers load' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l delayed-events -d 'Delayed events for the lateness test' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l prune-rows -d 'Published rows for the prune test (0 skips it)' -r
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l log-format -d 'Log line format' -r -f -a "text\t''
json\t''"
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l keep-schema -d 'Keep the scratch schema afterwards (for EXPLAIN and poking around)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -l json -d 'Print JSON on stdout instead of a table'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s v -l verbose -d 'More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s q -l quiet -d 'Only errors'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand bench" -s V -l version -d 'Print version'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "migrate" -d 'Create or upgrade the outbox schema (safe when several replicas run it at once)'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "publish" -d 'Insert events: one from flags, or many from a JSON-lines file'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "relay" -d 'Relay ready events to a sink: `--once` for cron, or as a daemon'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "stats" -d 'Backlog, lag, in-flight, dead letters and throughput'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "completions" -d 'Print a shell completion script'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "demo" -d 'Show the tool end to end in a scratch schema, then drop it'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "bench" -d 'Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune'
complete -c outboxctl -n "__fish_outboxctl_using_subcommand help; and not __fish_seen_subcommand_from migrate publish relay stats completions demo bench help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
