//! Confirmation before destructive changes: ask on a terminal, demand `--yes` elsewhere.
//!
//! The decision is a pure function ([`decide`]) so it can be tested without a terminal.

use std::io::{BufRead, IsTerminal, Write};

/// Why a destructive change was not confirmed (nothing was changed). Which exit code it means is
/// decided in one place, [`crate::exit`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `--yes`, and no terminal to ask on.
    #[error(
        "refusing to {action} without --yes: stdin is not a terminal, so there is no one to ask; add --yes (or --dry-run to see what would change); nothing was changed"
    )]
    NoOneToAsk {
        /// The question without its `?` ("discard 3 dead events").
        action: String,
    },
    /// The answer could not be read from the terminal.
    #[error("cannot read the answer: {0}")]
    Unreadable(std::io::Error),
}

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
/// the user said no; Err: refused for lack of --yes ([`Error::NoOneToAsk`]), nothing changed.
pub fn confirm(yes: bool, question: &str) -> Result<bool, Error> {
    match decide(
        yes,
        std::io::stdin().is_terminal(),
        std::io::stderr().is_terminal(),
    ) {
        Decision::Proceed => Ok(true),
        Decision::Refuse => Err(Error::NoOneToAsk {
            action: question.trim_end_matches('?').to_owned(),
        }),
        Decision::Ask => {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{question} [y/N] ");
            let _ = err.flush();
            let mut answer = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut answer)
                .map_err(Error::Unreadable)?;
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
