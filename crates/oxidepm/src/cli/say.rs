//! Printing that never panics: a closed stdout (`oxidepm startup | head
//! -1`) ends the text quietly, a closed stderr loses a notice, never the
//! command. For text printed outside the `Printer`.

/// Prints to stderr, ignoring a closed stderr.
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// Prints to stdout, ignoring a closed stdout.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
