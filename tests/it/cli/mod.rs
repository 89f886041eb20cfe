//! The binary's surface, whatever the command: exit codes and errors, the command line and its
//! environment, what reaches stdout and stderr (logs, closed pipes, control characters, payloads
//! digit for digit), the parsers of untrusted text, and the generated text (help, completions, man
//! pages, reference pages) with the documentation's own promises.

mod args;
mod binary;
mod docs;
mod fuzz;
mod logs;
mod payload_text;
mod pipes;
mod reference;
mod snapshots;
mod terminal_text;
