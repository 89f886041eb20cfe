//! `outboxctl completions SHELL`: completion scripts from the same clap definition as the parser.

use clap_complete::Shell;

use crate::cli::CompletionsArgs;

/// The completion script for `shell`, as committed under `completions/`.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut cmd = crate::cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "outboxctl", &mut buf);
    buf
}

/// File name under `completions/` for `shell`.
pub fn file_name(shell: Shell) -> &'static str {
    match shell {
        Shell::Bash => "outboxctl.bash",
        Shell::Zsh => "_outboxctl",
        Shell::Fish => "outboxctl.fish",
        Shell::PowerShell => "_outboxctl.ps1",
        Shell::Elvish => "outboxctl.elv",
        _ => "outboxctl.unknown",
    }
}

pub fn run(args: CompletionsArgs) -> anyhow::Result<u8> {
    use std::io::Write;
    std::io::stdout().lock().write_all(&script(args.shell))?;
    Ok(crate::exit::OK)
}
