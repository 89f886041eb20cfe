use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = outboxctl::cli::Cli::parse();
    if let Err(err) = outboxctl::logging::init(&cli.log, cli.is_daemon()) {
        let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("error: {err}\n"));
        return outboxctl::exit::to_exit_code(err.code);
    }
    match outboxctl::run(cli) {
        Ok(code) => outboxctl::exit::to_exit_code(code),
        Err(err) if outboxctl::exit::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            outboxctl::exit::to_exit_code(outboxctl::exit::code_of(&err))
        }
    }
}
