//! The `drcheck` binary: parses arguments and hands over to the library.

fn main() -> std::process::ExitCode {
    // When started as the containment helper, this process confines itself and
    // executes a PostgreSQL tool; it never reaches the CLI.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    drcheck_restore::contain::helper_main(&args);
    tune_allocator(&args);
    drcheck::cli::main()
}

/// glibc's allocator raises its mmap threshold each time a large buffer is freed, and
/// then keeps freed download parts in its heaps: a 1 GB download from a fast store
/// peaked at 88–103 MiB. A fixed threshold (large buffers always mapped, returned at
/// once) and two arenas keep it at 59 MiB. They are read only at start-up, so drcheck
/// re-executes itself once with them set (same pid, same arguments), unless they were
/// set already — an operator's own tuning wins.
fn tune_allocator(args: &[std::ffi::OsString]) {
    use std::os::unix::process::CommandExt;
    const MARK: &str = "DRCHECK_MALLOC_TUNED";
    if std::env::var_os(MARK).is_some()
        || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || args.is_empty()
    {
        return;
    }
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(&args[0])
        .args(&args[1..])
        .env(MARK, "1")
        .env("MALLOC_MMAP_THRESHOLD_", "131072")
        .env("MALLOC_ARENA_MAX", "2")
        .exec();
    // Without /proc (or exec refused), carry on with the allocator's defaults.
    eprintln!("drcheck: note: running with the default allocator settings ({err})");
}
