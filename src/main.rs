//! The `ckpt` binary: parse the command line, call the library once, render the
//! result, pick the exit code. All behaviour lives in the library.

mod alloc;
mod cli;

fn main() {
    if std::env::var_os("CKPT_TIMINGS").is_some() {
        ckpt::set_timing_sink(print_timing);
    }
    ckpt::timing("main");
    // Still one thread: the only moment the umask can be read safely.
    ckpt::fs_util::learn_umask();
    alloc::tune();
    survive_file_size_limit();
    let code = cli::main();
    ckpt::timing("exit");
    std::process::exit(code);
}

/// `CKPT_TIMINGS`: one line per phase mark on stderr.
fn print_timing(ms: f64, phase: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "ckpt: timing {ms:8.2} {phase}");
}

/// Under a file-size limit (`ulimit -f`, RLIMIT_FSIZE) a write past it
/// raises SIGXFSZ, which kills the process with no error line. Caught by a
/// handler that does nothing, the write fails with EFBIG instead, which ckpt
/// reports like any I/O error. (A handler, not SIG_IGN: handlers are reset
/// when `ckpt exec` starts a command, ignored signals would be inherited.)
#[allow(unsafe_code)]
fn survive_file_size_limit() {
    // SAFETY: the action does nothing, which is async-signal-safe.
    let _ = unsafe { signal_hook::low_level::register(libc::SIGXFSZ, || {}) };
}
