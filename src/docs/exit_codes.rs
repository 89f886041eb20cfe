//! docs/reference/exit-codes.md, from the tables of [`crate::exit`].

use std::fmt::Write;

use super::{cell, header};

pub fn page() -> String {
    let mut out = header("Exit codes", "the constants of src/exit.rs");
    out.push_str(
        "The exit status is the contract scripts, cron wrappers and init containers rely on. \
         Each code is a named constant in `src/exit.rs`; this page is generated from them.\n\n\
         A closed stdout (`outboxctl ... | head`) is not a failure: the command exits 0. A \
         command's `--help` states the codes its own flags can cause.\n",
    );
    for t in crate::exit::TABLES {
        let _ = writeln!(out, "\n## {}\n\n{}\n", t.applies_to, cell(t.note));
        out.push_str("| Code | Name | Meaning |\n| ---: | --- | --- |\n");
        for c in t.codes {
            let _ = writeln!(
                out,
                "| {} | `{}::{}` | {} |",
                c.code,
                t.path,
                c.name,
                cell(c.doc)
            );
        }
    }
    out
}
