//! What the command line writes to stdout. A reader that has gone (`muster sim | head`) ends the
//! command quietly; any other write error is reported on stderr and ends it with status 1. Never
//! a panic, which `print!` gives on a closed pipe.

use std::io::{ErrorKind, Write};

/// Writes `args` to stdout and flushes, or ends the process as above.
pub fn write(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}

/// `print!` that never panics (see the module).
macro_rules! out {
    ($($t:tt)*) => { $crate::stdout::write(format_args!($($t)*)) };
}

/// `println!` that never panics (see the module).
macro_rules! outln {
    () => { $crate::stdout::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdout::write(format_args!("{}\n", format_args!($($t)*))) };
}
