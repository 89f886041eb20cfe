//! The man pages under `man/`: one per command and subcommand (`outboxctl.1`,
//! `outboxctl-relay.1`, `outboxctl-dead-list.1`, ...), rendered by clap_mangen from the same
//! `clap::Command` as `--help`.

/// Every man page: its file name and its roff source.
///
/// The version is the package version alone: the commit and build date `--version` adds would
/// make every commit's pages differ.
pub fn pages() -> Vec<(String, Vec<u8>)> {
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) {
        let man = clap_mangen::Man::new(cmd.clone())
            .source(format!("outboxctl {}", env!("CARGO_PKG_VERSION")))
            .manual("outboxctl manual");
        let mut buf = Vec::new();
        man.render(&mut buf).expect("writing to a Vec");
        out.push((man.get_filename(), buf));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out);
        }
    }
    let mut cmd = crate::cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut out);
    out
}
