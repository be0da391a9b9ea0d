//! The `drcheck` binary: parses arguments and hands over to the library.

fn main() -> std::process::ExitCode {
    // When started as the containment helper, this process confines itself and
    // executes a PostgreSQL tool; it never reaches the CLI.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    drcheck_restore::contain::helper_main(&args);
    drcheck::cli::main()
}
