//! The sink a command publishes to, built from its flags: `relay` and `replay` flatten the same
//! groups ([`SinkArgs`], [`SinkOptionArgs`]) and build their sink here, the one way.

use std::sync::Arc;
use std::time::Duration;

use crate::cli::{SinkArgs, SinkOptionArgs};
use crate::exit::CodedError;
use crate::sink::{self, Sink, SinkOptions};

/// Builds the sink of `--sink` with its options, each publish bounded by `timeout`. `env` is how
/// the signing secret (named by `--signing-secret-env`) and the test-only Kafka fault are read:
/// the process environment in production, a map in tests.
pub async fn build(
    spec: &SinkArgs,
    opts: &SinkOptionArgs,
    timeout: Duration,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Arc<dyn Sink>> {
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
        },
    )
    .await?)
}
