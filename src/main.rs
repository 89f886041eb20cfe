use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = outboxctl::cli::parse(outboxctl::exit::nagios::UNKNOWN);
    if let Err(err) = outboxctl::logging::init(&cli.log, cli.is_daemon()) {
        outboxctl::output::eprint_line(format_args!("error: {err}"));
        let code = outboxctl::exit::code(outboxctl::exit::Failure::Config(&err));
        return outboxctl::exit::to_exit_code(code);
    }
    let log_format = cli.log.log_format;
    match outboxctl::run(cli) {
        Ok(code) => outboxctl::exit::to_exit_code(code),
        Err(err) if outboxctl::exit::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            outboxctl::logging::print_error(&err, log_format);
            outboxctl::exit::to_exit_code(outboxctl::exit::code_of(&err))
        }
    }
}
