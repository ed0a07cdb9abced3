//! The `ckpt` binary: parse the command line, call the library once, render the
//! result, pick the exit code. All behaviour lives in the library.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
