//! The `ckpt` binary: parse the command line, call the library once, render the
//! result, pick the exit code. All behaviour lives in the library.

mod cli;

fn main() {
    // Still one thread: the only moment the umask can be read safely.
    ckpt::fs_util::learn_umask();
    std::process::exit(cli::main());
}
