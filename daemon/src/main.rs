//! The `drcheck` binary: parses arguments and hands over to the library.

fn main() -> std::process::ExitCode {
    // When started as the containment helper, this process confines itself and
    // executes a PostgreSQL tool; it never reaches the CLI.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    drcheck_restore::contain::helper_main(&args);
    tune_allocator();
    drcheck::cli::main()
}

/// glibc's allocator raises its mmap threshold each time a large buffer is freed, and
/// then keeps freed download parts in its heaps: a 1 GB download from a fast store
/// peaked at 88–103 MiB. A fixed threshold (large buffers always mapped, returned at
/// once) and two arenas keep it near 50 MiB. Set here, before any thread exists, with
/// `mallopt` — not through `MALLOC_*` variables, which every program drcheck starts
/// (a drill's shell steps, a replacement primary) would inherit. An operator's own
/// `MALLOC_MMAP_THRESHOLD_` / `MALLOC_ARENA_MAX` win: glibc read them at start-up.
fn tune_allocator() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() || std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: mallopt only sets two of glibc's allocator parameters; it is called once,
    // first thing in `main`, while this is the only thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 131_072);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
