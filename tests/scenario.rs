//! `ckpt scenario run` and `ckpt scenario record` (issue 22): the project's
//! own scenarios pass (and their JUnit report reads back through a JUnit
//! library), every kind of wrong expectation fails with what was expected
//! and what happened, bad files are usage errors naming file, line and key,
//! `--crash-each-write` walks every write point of `testdata/scenarios/`
//! with no violation and does catch a lost version, and a recorded session
//! replays green.

use std::path::{Path, PathBuf};

use crate::common::{Run, TestEnv};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/scenarios")
}

fn scenario_run(env: &TestEnv, args: &[&str]) -> Run {
    let mut all = vec!["scenario", "run", "--scratch"];
    let scratch = env.dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let scratch = scratch.to_str().unwrap().to_string();
    all.push(&scratch);
    all.extend_from_slice(args);
    env.ckpt(&all)
}

fn write(env: &TestEnv, name: &str, text: &str) -> String {
    let p = env.dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn junit(path: &Path) -> junit_parser::TestSuites {
    let f = std::fs::File::open(path).unwrap();
    junit_parser::from_reader(std::io::BufReader::new(f)).expect("JUnit XML a JUnit reader accepts")
}

#[test]
fn the_projects_scenarios_pass_and_their_junit_report_reads_back() {
    let env = TestEnv::new();
    let files: Vec<_> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "toml"))
        .collect();
    assert!(
        files.len() >= 25,
        "at least 25 scenarios, found {}",
        files.len()
    );
    let report = env.dir.path().join("report.xml");
    let r = scenario_run(
        &env,
        &[
            "-j",
            "2",
            "--junit",
            report.to_str().unwrap(),
            scenarios_dir().to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.lines().filter(|l| l.starts_with("pass  ")).count(),
        files.len(),
        "{}",
        r.stdout
    );
    let suites = junit(&report);
    let cases: Vec<_> = suites.suites.iter().flat_map(|s| &s.cases).collect();
    assert_eq!(cases.len(), files.len());
    assert!(cases.iter().all(|c| c.status.is_success()));
    assert!(
        cases.iter().any(|c| c.original_name
            == "a rollback after an earlier rollback takes out all of the agent's work"),
        "names come from the scenarios"
    );
}

/// One scenario per kind of expectation, each wrong: every one must fail,
/// naming the expectation, what it expected and what happened.
#[test]
fn every_kind_of_wrong_expectation_fails_with_expected_and_actual() {
    let env = TestEnv::new();
    let base = "[files]\n\"a.txt\" = \"alpha\\n\\nomega\\n\"\n";
    let edit = "[[step]]\ntool = \"Edit\"\ncall = \"e1\"\ninput = { file_path = \"a.txt\", old_string = \"alpha\", new_string = \"ALPHA\" }\n";
    // (file name, scenario body after the base, fragments the FAIL line must hold)
    let cases: &[(&str, String, &[&str])] = &[
        (
            "run-exit",
            format!("{edit}[[step]]\nrun = \"ckpt rollback --call e1\"\nexpect = {{ exit = 3 }}\n"),
            &["step 2", "exit: expected 3, actual exit 0"],
        ),
        (
            "run-json",
            format!(
                "{edit}[[step]]\nrun = \"ckpt rollback --call e1\"\nexpect = {{ json = {{ files = [{{ path = \"a.txt\", result = \"merged\" }}] }} }}\n"
            ),
            &[
                "json.files[0].result",
                "expected \"merged\"",
                "actual \"restored\"",
            ],
        ),
        (
            "run-json-missing-key",
            format!(
                "{edit}[[step]]\nrun = \"ckpt status\"\nexpect = {{ json = {{ nope = 1 }} }}\n"
            ),
            &["json.nope", "no such key"],
        ),
        (
            "run-stdout",
            format!(
                "{edit}[[step]]\nrun = \"ckpt status\"\nexpect = {{ stdout_contains = \"no such text\" }}\n"
            ),
            &["stdout_contains", "\"no such text\""],
        ),
        (
            "run-stderr",
            format!(
                "{edit}[[step]]\nrun = \"ckpt rollback --call nope\"\nexpect = {{ stderr_contains = \"no such text\" }}\n"
            ),
            &["stderr_contains", "\"no such text\""],
        ),
        (
            "file-content",
            format!("{edit}[expect]\nfiles.\"a.txt\" = {{ content = \"alpha\\n\\nomega\\n\" }}\n"),
            &[
                "files.\"a.txt\".content",
                "expected \"alpha\\n\\nomega\\n\"",
                "actual \"ALPHA\\n\\nomega\\n\"",
            ],
        ),
        (
            "file-sha256",
            format!(
                "{edit}[expect]\nfiles.\"a.txt\" = {{ sha256 = \"{}\" }}\n",
                "0".repeat(64)
            ),
            &["files.\"a.txt\".sha256", "expected 0000"],
        ),
        (
            "file-contains",
            format!("{edit}[expect]\nfiles.\"a.txt\" = {{ contains = \"beta\" }}\n"),
            &["files.\"a.txt\".contains", "expected \"beta\""],
        ),
        (
            "file-absent",
            format!("{edit}[expect]\nfiles.\"a.txt\" = {{ absent = true }}\n"),
            &["files.\"a.txt\".absent", "expected no file, actual a file"],
        ),
        (
            "file-missing",
            format!("{edit}[expect]\nfiles.\"b.txt\" = {{ content = \"x\" }}\n"),
            &["files.\"b.txt\".exists", "expected a file"],
        ),
        (
            "file-mode",
            format!("{edit}[expect]\nfiles.\"a.txt\" = {{ mode = \"755\" }}\n"),
            &["files.\"a.txt\".mode", "expected 755, actual 644"],
        ),
        (
            "conflicts",
            format!("{edit}[expect]\nconflicts = 1\n"),
            &["conflicts: expected 1, actual 0"],
        ),
        (
            "verify",
            format!(
                "{edit}[[step]]\ntamper = \".agent-runtime/ledger.jsonl\"\nreplace = [\"\\\"seq\\\":1,\", \"\\\"seq\\\":1,\\\"x\\\":0,\"]\n"
            ),
            &["verify: expected ckpt verify to pass, actual exit 4"],
        ),
        (
            "pre-hook",
            "[[step]]\ntool = \"Write\"\ninput = { file_path = \"a.txt\", content = \"x\" }\nexpect = { exit = 2 }\n".to_string(),
            &["hook pre exit: expected 2, actual exit 0"],
        ),
        (
            "tool-cannot-apply",
            "[[step]]\ntool = \"Edit\"\ninput = { file_path = \"a.txt\", old_string = \"zeta\", new_string = \"x\" }\n".to_string(),
            &[
                "the Edit call",
                "expected to apply",
                "old_string \"zeta\" is not in",
            ],
        ),
        (
            "user-replace",
            "[[step]]\nuser = \"a.txt\"\nreplace = [\"zeta\", \"x\"]\n".to_string(),
            &["user edit of a.txt: replace", "not found"],
        ),
        (
            "unknown-name",
            "[[step]]\nrun = \"ckpt rollback --to @nowhere\"\n".to_string(),
            &["@nowhere", "a checkpoint step of that name"],
        ),
        (
            "crash-not-reached",
            "[[step]]\nrun = \"ckpt status\"\ncrash = \"rollback.after_file\"\n".to_string(),
            &["crash = \"rollback.after_file\"", "it never got there"],
        ),
    ];
    let mut paths = Vec::new();
    for (name, body, _) in cases {
        paths.push(write(
            &env,
            &format!("{name}.toml"),
            &format!("{base}{body}"),
        ));
    }
    let report = env.dir.path().join("failures.xml");
    let mut args: Vec<&str> = vec!["--junit", report.to_str().unwrap()];
    args.extend(paths.iter().map(String::as_str));
    let r = scenario_run(&env, &args);
    assert_eq!(r.code, 4, "{}\n{}", r.stdout, r.stderr);
    for (name, _, fragments) in cases {
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains(&format!("{name}.toml")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{}", r.stdout));
        assert!(line.starts_with("FAIL  "), "{name} must fail: {line}");
        for f in *fragments {
            assert!(line.contains(f), "{name}: `{f}` not in: {line}");
        }
    }
    assert!(
        r.stdout.contains(&format!(
            "{} scenarios: 0 passed, {} failed",
            cases.len(),
            cases.len()
        )),
        "{}",
        r.stdout
    );
    // The JUnit report has each failure with its message.
    let suites = junit(&report);
    let failed: Vec<_> = suites
        .suites
        .iter()
        .flat_map(|s| &s.cases)
        .filter(|c| c.status.is_failure())
        .collect();
    assert_eq!(failed.len(), cases.len());
    let mode = failed
        .iter()
        .find(|c| c.original_name == "file-mode")
        .unwrap();
    assert!(
        mode.status
            .failure_as_ref()
            .message
            .contains("expected 755, actual 644"),
        "{:?}",
        mode.status
    );
    // And the JSON document gives the failure's parts.
    let r = scenario_run(&env, &["--json", &paths[0]]);
    assert_eq!(r.code, 4);
    let doc = r.json();
    assert_eq!(doc["failed"], 1);
    let f = &doc["scenarios"][0]["failure"];
    assert_eq!(f["what"], "exit");
    assert_eq!(f["expected"], "3");
    assert_eq!(f["step"], 2);
}

#[test]
fn a_bad_scenario_file_is_a_usage_error_naming_file_line_and_key() {
    let env = TestEnv::new();
    let bad = [
        (
            "[[step]]\ntool = \"Edit\"\ncrash = \"now!\"\n",
            ":3: step[1].crash: ",
        ),
        ("[files]\n\"../out\" = \"x\"\n", ":2: files.\"../out\": "),
        ("[[step]]\nrun = \"git status\"\n", ":2: step[1].run: "),
        ("\n\n[expect]\nconflicts = -1\n", ":4: expect.conflicts: "),
        (
            "[[step]]\nuser = \"a\"\nfrobnicate = 1\n",
            ":3: step[1].frobnicate: unknown key",
        ),
        ("name = [\n", ":1: -: not valid TOML"),
    ];
    for (text, want) in bad {
        let p = write(&env, "bad.toml", text);
        // A good file beside it: nothing runs when one file is bad.
        let good = write(&env, "good.toml", "[[step]]\ncheckpoint = \"a\"\n");
        let r = scenario_run(&env, &[&good, &p]);
        assert_eq!(r.code, 2, "{text}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.is_empty(), "nothing ran: {}", r.stdout);
        let line = r.stderr.trim();
        assert_eq!(line.lines().count(), 1, "one line: {line}");
        assert!(
            line.contains(&format!("{p}{want}")),
            "`{want}` not in: {line}"
        );
    }
    let r = scenario_run(&env, &["/no/such/dir"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

/// RELIABILITY T1 as a product feature: every write point of every ckpt
/// process of every scenario, killed there, recovered and checked.
#[test]
fn crash_each_write_over_the_projects_scenarios_finds_no_violation() {
    let env = TestEnv::new();
    let t = std::time::Instant::now();
    let r = scenario_run(
        &env,
        &[
            "--json",
            "-j",
            "2",
            "--crash-each-write",
            scenarios_dir().to_str().unwrap(),
        ],
    );
    let doc = r.json();
    assert_eq!(r.code, 0, "{doc:#}");
    let points = doc["crash_points"].as_u64().unwrap();
    assert_eq!(doc["violations"], 0, "{doc:#}");
    assert!(points >= 1000, "crash points tried: {points}");
    for s in doc["scenarios"].as_array().unwrap() {
        assert!(s["crash_points"].as_u64().unwrap() > 0, "{s}");
    }
    eprintln!(
        "crash-each-write: {} scenarios, {points} crash points, 0 violations, {:.1} s",
        doc["scenarios"].as_array().unwrap().len(),
        t.elapsed().as_secs_f64()
    );
}

/// The crash checks can fail: with files above `max_blob_bytes` not stored
/// (and no git to hold them), a shell call that overwrites one loses its
/// version, and `--crash-each-write` must say so.
#[test]
fn crash_each_write_reports_a_lost_version() {
    let env = TestEnv::new();
    let p = write(
        &env,
        "loss.toml",
        "git = false\n[config]\nmax_blob_bytes = 4\non_record_failure = \"warn\"\n[files]\n\"big.txt\" = \"more than four bytes\\n\"\n[[step]]\ntool = \"Bash\"\ninput = { command = \"printf 'replaced' > big.txt\" }\n",
    );
    let r = scenario_run(&env, &["--crash-each-write", "--json", &p]);
    assert_eq!(r.code, 4, "{}", r.stdout);
    let doc = r.json();
    let v = doc["scenarios"][0]["violations"].as_array().unwrap();
    assert!(!v.is_empty());
    assert!(
        v[0].as_str()
            .unwrap()
            .contains("a version of big.txt (21 bytes"),
        "{v:?}"
    );
}

/// A real session (the demo's: agent calls through Claude Code payloads, a
/// user edit, a shell call, a rollback) recorded as a scenario replays green
/// in a fresh workspace, and so does its crash pass.
#[test]
fn a_recorded_session_replays_green() {
    let env = TestEnv::new();
    let demo = env.dir.path().join("demo");
    let r = env.ckpt(&["demo", "--keep", "--dir", demo.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = env.dir.path().join("recorded.toml");
    let mut c = env.command(&["scenario", "record", "-o", out.to_str().unwrap()]);
    c.env("CKPT_WORKSPACE", &demo);
    let r = crate::common::run(c.output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&out).unwrap();
    for want in [
        "[[step]]",
        "call = \"toolu_demo_bash\"",
        "user = \"src/greet.rs\"",
        "run = \"ckpt rollback --to @cp1\"",
        "[expect]",
    ] {
        assert!(text.contains(want), "`{want}` not in:\n{text}");
    }
    let r = scenario_run(&env, &[out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}\n{text}", r.stdout);
    let r = scenario_run(&env, &["--crash-each-write", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    // From a checkpoint on: the story's start is a checkpoint step, and the
    // demo's rollback to an older checkpoint becomes one to that start.
    let mut c = env.command(&["--json", "log"]);
    c.env("CKPT_WORKSPACE", &demo);
    let log = crate::common::run(c.output().unwrap()).json();
    let third = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "checkpoint")
        .nth(2)
        .and_then(|r| r["checkpoint"].as_str())
        .unwrap()
        .to_string();
    let since = env.dir.path().join("since.toml");
    let mut c = env.command(&[
        "scenario",
        "record",
        "--since",
        &third,
        "-o",
        since.to_str().unwrap(),
    ]);
    c.env("CKPT_WORKSPACE", &demo);
    let r = crate::common::run(c.output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&since).unwrap();
    assert!(
        text.contains("run = \"ckpt rollback --to @start\""),
        "{text}"
    );
    assert!(text.contains("checkpoint = \"start\""), "{text}");
    assert!(
        !text.contains("# before the agent"),
        "older checkpoints are not in it: {text}"
    );
    let r = scenario_run(&env, &[since.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}\n{text}", r.stdout);
}
