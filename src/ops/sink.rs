//! The sink a command publishes to, built from its flags: `relay` and `replay` flatten the same
//! groups ([`SinkArgs`], [`SinkOptionArgs`], [`FormatArgs`]) and build their sink here, the one
//! way.

use std::sync::Arc;
use std::time::Duration;

use crate::cli::{CloudEventsMode, EventFormat, FormatArgs, SinkArgs, SinkOptionArgs};
use crate::config::DbConfig;
use crate::exit::CodedError;
use crate::sink::{self, Sink, SinkOptions};

/// Builds the sink of `--sink` with its options and the format of `--format`, each publish
/// bounded by `timeout`; `cfg` names the database and schema of CloudEvents' default `source`.
/// `env` is how the signing secret (named by `--signing-secret-env`) and the test-only Kafka
/// fault are read: the process environment in production, a map in tests.
pub async fn build(
    spec: &SinkArgs,
    opts: &SinkOptionArgs,
    format: &FormatArgs,
    cfg: &DbConfig,
    timeout: Duration,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Arc<dyn Sink>> {
    let cloudevents = cloudevents_request(format, cfg)?;
    let signing_secrets = match &opts.signing_secret_env {
        Some(var) => Some(env(var).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
            CodedError::usage(format!(
                "--signing-secret-env names `{var}`, but that variable is not set"
            ))
        })?),
        None => None,
    };
    Ok(sink::from_spec(
        spec.spec(),
        &SinkOptions {
            http_headers: opts.http_headers.clone(),
            signing_secrets,
            timeout,
            kafka_properties: opts.kafka_properties.clone(),
            kafka_test_fatal_error_at: env("OUTBOXCTL_TEST_KAFKA_FATAL_ERROR")
                .and_then(|s| s.trim().parse().ok()),
            cloudevents,
        },
    )
    .await?)
}

/// What `--format` and the `--cloudevents-*` flags ask for: `None` for the document (the
/// CloudEvents flags are refused with it, exit 2: they would be ignored).
fn cloudevents_request(
    args: &FormatArgs,
    cfg: &DbConfig,
) -> Result<Option<sink::cloudevents::Request>, CodedError> {
    if args.format == EventFormat::Document {
        let given = [
            ("--cloudevents-mode", args.cloudevents_mode.is_some()),
            ("--cloudevents-source", args.cloudevents_source.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, given)| *given) {
            return Err(CodedError::usage(format!(
                "{flag} only applies with --format cloudevents (OUTBOXCTL_FORMAT)"
            )));
        }
        return Ok(None);
    }
    let mode = args.cloudevents_mode.map(|m| match m {
        CloudEventsMode::Binary => sink::cloudevents::Mode::Binary,
        CloudEventsMode::Structured => sink::cloudevents::Mode::Structured,
    });
    let source = match &args.cloudevents_source {
        Some(s) => s.trim().to_owned(),
        None => sink::cloudevents::default_source(cfg.database(), cfg.schema.name()),
    };
    Ok(Some(sink::cloudevents::Request { mode, source }))
}
