//! One module per subcommand. Each takes its clap arguments, resolves them into settings, acts,
//! and returns an exit code.

pub mod bench;
pub mod change;
pub mod completions;
pub mod dead;
pub mod demo;
pub mod doctor;
pub mod edit;
pub mod events;
pub mod migrate;
pub mod ordering;
pub mod prune;
pub mod publish;
pub mod relay;
pub mod requeue;
pub mod stats;
pub mod view;

/// The text of a `--payload JSON|@PATH|@-` value: the JSON itself, a file's contents, or stdin
/// (`@-`, as `--file -` reads events from stdin). Read as text; the digits are not touched.
pub(crate) fn payload_arg(raw: &str) -> Result<String, crate::exit::CodedError> {
    use std::io::Read;
    match raw.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map_err(|e| {
                crate::exit::CodedError::usage(format!("cannot read --payload from stdin: {e}"))
            })?;
            Ok(text)
        }
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            crate::exit::CodedError::usage(format!("cannot read --payload file {path}: {e}"))
        }),
        None => Ok(raw.to_owned()),
    }
}
