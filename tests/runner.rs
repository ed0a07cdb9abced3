//! One test binary for every integration test (links once). Each area is a
//! module; `every_test_file_is_listed` fails if a file in `tests/` is forgotten.
//! The rollback model test (`tests/rollback_model.rs`) is a target of its
//! own: it sets a process-wide panic hook while its histories run.

mod common;

mod blob_integrity;
mod cli_basic;
mod compensate;
mod doctor;
mod fuzz_corpus;
mod hooks;
mod hostile;
mod interrupted;
mod ledger_concurrency;
mod ledger_tamper;
mod ledger_torn;
mod merge_vs_git;
mod path_corpus;
mod power_loss;
mod recover;
mod repair;
mod rollback;
mod rollback_compose;
mod rollback_props;
mod scenario;
mod secrets;
mod session;
mod shell;
mod storage;

#[test]
fn every_test_file_is_listed() {
    let listed = include_str!("runner.rs");
    // A test that sets its own panic hook runs as a target of its own.
    let targets = include_str!("../Cargo.toml");
    for e in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(m) = name.strip_suffix(".rs")
            && m != "runner"
        {
            assert!(
                listed.contains(&format!("mod {m};"))
                    || targets.contains(&format!("path = \"tests/{name}\"")),
                "tests/{name} is not listed in tests/runner.rs (or as a [[test]] in Cargo.toml)"
            );
        }
    }
}
