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
mod gc;
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
mod view;

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

/// The library's modules form a hierarchy: no module reaches, through
/// `crate::` paths, one that reaches back to it (a cycle means two modules
/// that cannot be understood, or changed, one without the other). The binary
/// (`main.rs`, `cli/`), `lib.rs` and test modules are left out.
#[test]
fn the_library_modules_import_no_cycle() {
    use std::collections::{BTreeMap, BTreeSet};
    let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().to_str().unwrap().to_string();
            let Some(rel) = rel.strip_suffix(".rs") else {
                continue;
            };
            let top = rel.split('/').next().unwrap().to_string();
            if ["main", "lib", "cli"].contains(&top.as_str()) || rel.ends_with("tests") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect::<Vec<_>>()
                .join(" ");
            let ident = |s: &str| -> String {
                s.trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                    .collect()
            };
            let mut names = BTreeSet::new();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                match rest.strip_prefix('{') {
                    // `use crate::{a, b::{c, d}};`: the names at depth 0.
                    Some(group) => {
                        let mut depth = 0;
                        let mut start = true;
                        for (k, c) in group.char_indices() {
                            match c {
                                '{' => depth += 1,
                                '}' if depth == 0 => break,
                                '}' => depth -= 1,
                                ',' if depth == 0 => start = true,
                                _ if start && !c.is_whitespace() => {
                                    names.insert(ident(&group[k..]));
                                    start = false;
                                }
                                _ => {}
                            }
                        }
                    }
                    None => {
                        names.insert(ident(rest));
                    }
                }
            }
            names.retain(|n| !n.is_empty() && *n != top);
            deps.entry(top).or_default().extend(names);
        }
    }
    let modules: BTreeSet<String> = deps.keys().cloned().collect();
    assert!(modules.len() > 20, "found only {modules:?}");
    // Depth-first search for a path back to the start.
    fn reaches(
        deps: &BTreeMap<String, BTreeSet<String>>,
        from: &str,
        to: &str,
        seen: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> bool {
        for next in deps.get(from).into_iter().flatten() {
            if !deps.contains_key(next) || !seen.insert(next.clone()) {
                if next == to {
                    return true;
                }
                continue;
            }
            path.push(next.clone());
            if next == to || reaches(deps, next, to, seen, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    for m in &modules {
        let mut path = vec![m.clone()];
        let mut seen = BTreeSet::new();
        if reaches(&deps, m, m, &mut seen, &mut path) {
            panic!("module import cycle: {}", path.join(" -> "));
        }
    }
}
