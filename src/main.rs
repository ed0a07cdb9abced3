//! The `ckpt` binary: parse the command line, call the library once, render the
//! result, pick the exit code. All behaviour lives in the library.

mod cli;

fn main() {
    // Still one thread: the only moment the umask can be read safely.
    ckpt::fs_util::learn_umask();
    tune_allocator();
    ckpt::short_lived_process();
    std::process::exit(cli::main());
}

/// A hook is a short process that builds and drops a few large tables (the
/// snapshot it loads, the walk, the map between them: 64 MiB on a
/// 100,000-file tree). glibc serves each large allocation with its own
/// `mmap` and unmaps it when freed, so every table is written into fresh
/// pages, and on this machine class first touches cost ~0.8 ms per MiB. Kept
/// in the heap and not trimmed, freed pages are reused: a no-change shell
/// pre+post on the 100,000-file tree took ~9 % less (DECISIONS.md). Nothing
/// is returned to the system before exit, which a short process does not
/// need; the library sets nothing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_allocator() {
    // SAFETY: `mallopt` only sets allocator parameters; it is called before
    // any thread exists and before anything large is allocated. (32 MiB is
    // the largest mmap threshold glibc accepts on 64-bit; above it the call
    // fails and changes nothing.)
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_allocator() {}
