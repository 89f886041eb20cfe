//! The shape of a command's `--json` output, declared by the command next to the code that
//! prints it (`json_outputs()`), and gathered into docs/reference/json.md by
//! [`crate::docs::json`]. Below the commands, so they name their outputs without importing the
//! reference generator that imports them.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};

/// One `--json` output (or JSON-lines stream) of a command.
#[derive(Debug, Clone)]
pub struct Output {
    /// The command line that prints it, e.g. `relay --once --json`.
    pub command: &'static str,
    /// When it is printed, beyond the command line; may be empty.
    pub note: &'static str,
    /// JSON lines (one object per line) instead of one document.
    pub lines: bool,
    /// The schema of the document (of each line, for JSON lines), every subschema inlined.
    pub schema: Schema,
}

impl Output {
    pub fn of<T: JsonSchema>(command: &'static str, note: &'static str) -> Self {
        Self {
            command,
            note,
            lines: false,
            schema: schema::<T>(),
        }
    }

    pub fn lines_of<T: JsonSchema>(command: &'static str, note: &'static str) -> Self {
        Self {
            lines: true,
            ..Self::of::<T>(command, note)
        }
    }
}

/// The schema of `T` with every subschema inlined (no `$ref`), so it reads top-down.
pub fn schema<T: JsonSchema>() -> Schema {
    // The serialize contract: an `Option` field without `skip_serializing_if` is always present
    // (as null), so it is required.
    SchemaSettings::draft2020_12()
        .for_serialize()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>()
}

/// Implements `schemars::JsonSchema` for a type whose schema is a fixed one, named `$name` and
/// inlined wherever the type is used: a type the reference pages describe in words.
macro_rules! fixed_schema {
    ($ty:ty, $name:literal, $schema:tt) => {
        impl schemars::JsonSchema for $ty {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}
pub(crate) use fixed_schema;
