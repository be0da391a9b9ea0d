//! The `drcheck` binary: parses arguments and hands over to the library.

fn main() -> std::process::ExitCode {
    drcheck::cli::main()
}
