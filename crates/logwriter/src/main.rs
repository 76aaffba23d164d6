//! `oxidepm-logwriter [__logshim] --out <path> --err <path> --max-bytes <n>
//! --keep <n> [--timestamps]`: one app's log writer, started by `oxidepmd`
//! with the app's stdout pipe on fd 0 and its stderr pipe on fd 1 (it
//! writes nothing to stdout).

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(oxidepm_logwriter::main_with_args(&args));
}
