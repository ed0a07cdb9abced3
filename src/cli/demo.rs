//! `ckpt demo`: builds a scratch workspace and plays a story through the
//! library, narrating each step. Later issues extend the story (hooks, rollback
//! with a conflict, a crash and recovery, restore-session).

use std::path::{Path, PathBuf};

use ckpt::{CallOptions, CallStatus, CheckpointOptions, OpenOptions, Workspace};

use super::error::{CommandError, ERROR, OK};
use super::render::describe;
use super::{Ctx, Ui};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Keep the scratch workspace instead of deleting it at the end
    #[arg(long)]
    keep: bool,
    /// Build the scratch workspace here (must not exist yet)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

fn fail(what: &str, e: impl std::fmt::Display) -> CommandError {
    CommandError::new(ERROR, format!("demo failed while {what}: {e}"))
}

pub fn run(ui: &mut Ui, ctx: &Ctx, args: &Args) -> Result<i32, CommandError> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("ckpt-demo-{}", ckpt::fs_util::temp_name(""))),
    };
    std::fs::create_dir(&dir).map_err(|e| fail(&format!("creating `{}`", dir.display()), e))?;
    let result = story(ui, ctx, &dir);
    if args.keep || result.is_err() {
        ui.line(&format!(
            "\nthe scratch workspace is kept at `{}`",
            dir.display()
        ))?;
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn story(ui: &mut Ui, ctx: &Ctx, dir: &Path) -> Result<i32, CommandError> {
    let mut narrate = Narrator {
        json: ui.json,
        steps: Vec::new(),
    };
    let say = |ui: &mut Ui, n: &mut Narrator, s: &str| -> Result<(), CommandError> {
        if n.json {
            n.steps.push(s.to_string());
        } else {
            ui.line(s)?;
        }
        Ok(())
    };
    say(
        ui,
        &mut narrate,
        &format!("ckpt demo: a scratch workspace in `{}`\n", dir.display()),
    )?;

    // 1. The user's project, before any agent runs.
    std::fs::create_dir_all(dir.join("src")).map_err(|e| fail("writing the project", e))?;
    std::fs::write(
        dir.join("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .map_err(|e| fail("writing the project", e))?;
    std::fs::write(dir.join("README.md"), "# demo\n\nA tiny project.\n")
        .map_err(|e| fail("writing the project", e))?;
    std::fs::write(dir.join("notes.txt"), "scratch notes\n")
        .map_err(|e| fail("writing the project", e))?;
    say(
        ui,
        &mut narrate,
        "1. The user's project: src/main.rs, README.md, notes.txt",
    )?;

    let (ws, _) = Workspace::init(dir, OpenOptions { clock: ctx.clock() })
        .map_err(|e| fail("initialising", e))?;
    say(
        ui,
        &mut narrate,
        "   $ ckpt init                      → .agent-runtime/ created (mode 0700, ignored by git)",
    )?;
    let c0 = ws
        .checkpoint(CheckpointOptions {
            label: Some("before the agent".into()),
            session: Some("demo".into()),
            ..Default::default()
        })
        .map_err(|e| fail("checkpointing", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   $ ckpt checkpoint -m 'before the agent'  → {}",
            c0.checkpoint
        ),
    )?;

    // 2. The agent's first call: a new file and an edit, written through ckpt.
    let greet = ws.rel_path(b"src/greet.rs", None)?;
    let main_rs = ws.rel_path(b"src/main.rs", None)?;
    let notes = ws.rel_path(b"notes.txt", None)?;
    let mut call = ws
        .begin_call(CallOptions {
            session: Some("demo".into()),
            tool: "MultiEdit".into(),
            paths: vec![greet.clone(), main_rs.clone()],
            ..Default::default()
        })
        .map_err(|e| fail("starting a call", e))?;
    call.write_file(
        &greet,
        b"pub fn greet(name: &str) -> String {\n    format!(\"hello, {name}\")\n}\n",
    )
    .map_err(|e| fail("writing through ckpt", e))?;
    call.write_file(
        &main_rs,
        b"mod greet;\n\nfn main() {\n    println!(\"{}\", greet::greet(\"world\"));\n}\n",
    )
    .map_err(|e| fail("writing through ckpt", e))?;
    let s1 = call
        .finish(CallStatus::Succeeded, None)
        .map_err(|e| fail("finishing a call", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n2. The agent's call {} creates src/greet.rs and edits src/main.rs:\n   before and after contents stored by sha256, {} patches recorded",
            s1.call,
            s1.patches.len()
        ),
    )?;
    let c1 = ws
        .checkpoint(CheckpointOptions {
            label: Some("greet added".into()),
            session: Some("demo".into()),
            ..Default::default()
        })
        .map_err(|e| fail("checkpointing", e))?;
    say(
        ui,
        &mut narrate,
        &format!("   $ ckpt checkpoint -m 'greet added'  → {}", c1.checkpoint),
    )?;

    // 3. The agent's second call deletes a file.
    let mut call = ws
        .begin_call(CallOptions {
            session: Some("demo".into()),
            tool: "Bash".into(),
            ..Default::default()
        })
        .map_err(|e| fail("starting a call", e))?;
    call.delete_file(&notes)
        .map_err(|e| fail("deleting through ckpt", e))?;
    let s2 = call
        .finish(CallStatus::Succeeded, None)
        .map_err(|e| fail("finishing a call", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n3. The agent's call {} deletes notes.txt; its content stays in the blob store",
            s2.call
        ),
    )?;

    // 4. The timeline.
    say(ui, &mut narrate, "\n4. $ ckpt log")?;
    let read = ws
        .read_ledger()
        .map_err(|e| fail("reading the ledger", e))?;
    for r in &read.records {
        let (kind, text) = describe(r);
        say(
            ui,
            &mut narrate,
            &format!("   {:>3}  {kind:<10}  {text}", r.seq),
        )?;
    }
    if let Some(p) = s1.patches.iter().find(|p| p.path == main_rs) {
        let diff = ckpt::call::read_patch_artifact(&ws, &p.patch)
            .map_err(|e| fail("reading a patch", e))?;
        say(
            ui,
            &mut narrate,
            &format!(
                "\n   $ ckpt show {}   (a git-apply-compatible patch)",
                p.patch
            ),
        )?;
        for l in String::from_utf8_lossy(&diff).lines() {
            say(ui, &mut narrate, &format!("   {l}"))?;
        }
    }

    // 5. Verify, then show that tampering is caught.
    let report = ws.verify().map_err(|e| fail("verifying", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n5. $ ckpt verify  → {}: {} records, {} blobs re-hashed, {} checkpoints anchored",
            if report.ok { "ok" } else { "FAILED" },
            report.records,
            report.blobs_checked,
            report.checkpoints_checked
        ),
    )?;
    let ledger_path = dir.join(".agent-runtime/ledger.jsonl");
    let original = std::fs::read(&ledger_path).map_err(|e| fail("reading the ledger", e))?;
    let mut tampered = original.clone();
    if let Some(i) = find(&tampered, b"greet.rs") {
        tampered[i] = b'G';
    }
    std::fs::write(&ledger_path, &tampered).map_err(|e| fail("tampering", e))?;
    let bad = ws.verify().map_err(|e| fail("verifying", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   someone edits one byte of the ledger by hand … $ ckpt verify → {} (exit 4): {}",
            if bad.ok { "ok?!" } else { "FAILED" },
            bad.problems
                .first()
                .map(|p| p.problem.as_str())
                .unwrap_or("")
        ),
    )?;
    std::fs::write(&ledger_path, &original).map_err(|e| fail("restoring the ledger", e))?;
    say(ui, &mut narrate, "   (byte restored)")?;
    let ok = report.ok && !bad.ok;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n{}",
            if ok {
                "demo finished: every agent change is recorded, content-addressed and chained."
            } else {
                "demo finished with unexpected results"
            }
        ),
    )?;
    if ui.json {
        ui.json(&serde_json::json!({"ok": ok, "workspace": dir.display().to_string(), "steps": narrate.steps}))?;
    }
    Ok(if ok { OK } else { ERROR })
}

struct Narrator {
    json: bool,
    steps: Vec<String>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
