//! Confirmation before destructive changes: ask on a terminal, demand `--yes` elsewhere.
//!
//! The decision is a pure function ([`decide`]) so it can be tested without a terminal.

use std::io::{BufRead, IsTerminal, Write};

use crate::exit::CodedError;

/// What to do before a destructive change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// --yes was given.
    Proceed,
    /// stdin and stderr are a terminal: ask.
    Ask,
    /// No --yes and no one to ask (cron, scripts, CI, piped stdin): refuse.
    Refuse,
}

pub fn decide(yes: bool, stdin_tty: bool, stderr_tty: bool) -> Decision {
    match (yes, stdin_tty && stderr_tty) {
        (true, _) => Decision::Proceed,
        (false, true) => Decision::Ask,
        (false, false) => Decision::Refuse,
    }
}

/// Asks `question` (e.g. "discard 3 dead events?") unless --yes. Ok(true): go ahead; Ok(false):
/// the user said no; Err: refused for lack of --yes (exit code 2), nothing changed.
pub fn confirm(yes: bool, question: &str) -> Result<bool, CodedError> {
    match decide(
        yes,
        std::io::stdin().is_terminal(),
        std::io::stderr().is_terminal(),
    ) {
        Decision::Proceed => Ok(true),
        Decision::Refuse => Err(CodedError::usage(format!(
            "refusing to {question_trimmed} without --yes: stdin is not a terminal, so there is \
             no one to ask; add --yes (or --dry-run to see what would change); nothing was changed",
            question_trimmed = question.trim_end_matches('?')
        ))),
        Decision::Ask => {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{question} [y/N] ");
            let _ = err.flush();
            let mut answer = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut answer)
                .map_err(|e| CodedError::usage(format!("cannot read the answer: {e}")))?;
            Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_wins_terminal_asks_otherwise_refuse() {
        assert_eq!(decide(true, false, false), Decision::Proceed);
        assert_eq!(decide(true, true, true), Decision::Proceed);
        assert_eq!(decide(false, true, true), Decision::Ask);
        assert_eq!(decide(false, true, false), Decision::Refuse);
        assert_eq!(decide(false, false, true), Decision::Refuse);
        assert_eq!(decide(false, false, false), Decision::Refuse);
    }
}
