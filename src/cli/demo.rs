//! `ckpt demo`: builds a scratch workspace and plays a story through the
//! library, narrating each step: agent calls fed as Claude Code hook payloads,
//! a user edit, a shell command, verify and tamper detection, a rollback that
//! keeps a user edit and raises a conflict, a crash mid-call and `recover`,
//! and a restore-session that keeps the abandoned branch.

use std::path::{Path, PathBuf};

use ckpt::{CheckpointOptions, Workspace};

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

    let (ws, _) = Workspace::init(dir, ctx.open_options()).map_err(|e| fail("initialising", e))?;
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

    // 2. A Claude Code session, fed through the same hook payloads Claude Code
    //    sends (`ckpt hook …` reads them on stdin; here they go straight to the
    //    same library call).
    let ws_path = dir.display().to_string();
    let cfg =
        ckpt::config::Config::load(ws.runtime_dir()).map_err(|e| fail("reading config", e))?;
    use ckpt::capture::Phase;
    // One hook event: the fields every Claude Code payload carries, plus `extra`.
    let feed = |phase: Phase,
                event: &str,
                extra: serde_json::Value|
     -> Result<ckpt::hook::HookStats, CommandError> {
        let mut payload = serde_json::json!({"session_id": "demo-session", "cwd": ws_path,
            "hook_event_name": event,
            "transcript_path": "/home/you/.claude/projects/demo/demo-session.jsonl"});
        if let (Some(b), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let ev = ckpt::capture::parse(payload.to_string().as_bytes(), phase, None)
            .map_err(|e| fail("parsing a hook payload", e))?;
        ckpt::hook::run(&ws, &cfg, &ev).map_err(|e| fail("recording a hook", e))
    };
    say(
        ui,
        &mut narrate,
        "\n2. A Claude Code session starts; its hooks feed ckpt (ckpt init --hooks claude installs them)",
    )?;
    let s = feed(
        Phase::SessionStart,
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    )?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   SessionStart      → checkpoint {}",
            s.checkpoint.unwrap_or_default()
        ),
    )?;
    let s = feed(
        Phase::Prompt,
        "UserPromptSubmit",
        serde_json::json!({"prompt": "Add a greeting module and use it in main"}),
    )?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   UserPromptSubmit  → checkpoint {} \"Add a greeting module and use it in main\"",
            s.checkpoint.unwrap_or_default()
        ),
    )?;

    let greet_body = "pub fn greet(name: &str) -> String {\n    format!(\"hello, {name}\")\n}\n";
    let write_in =
        serde_json::json!({"file_path": format!("{ws_path}/src/greet.rs"), "content": greet_body});
    feed(
        Phase::Pre,
        "PreToolUse",
        serde_json::json!({"tool_name": "Write", "tool_input": write_in, "tool_use_id": "toolu_demo_write"}),
    )?;
    std::fs::write(dir.join("src/greet.rs"), greet_body).map_err(|e| fail("writing", e))?;
    let s = feed(
        Phase::Post,
        "PostToolUse",
        serde_json::json!({"tool_name": "Write", "tool_input": write_in, "tool_use_id": "toolu_demo_write",
        "tool_response": {"type": "create", "filePath": format!("{ws_path}/src/greet.rs"), "originalFile": null}}),
    )?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   Write src/greet.rs           (toolu_demo_write) → {} patch: before absent, after stored",
            s.patches
        ),
    )?;

    let old_main = "    println!(\"hello\");\n";
    let new_main = "    println!(\"{}\", greet::greet(\"world\"));\n";
    let edit_in = serde_json::json!({"file_path": format!("{ws_path}/src/main.rs"), "old_string": old_main, "new_string": new_main, "replace_all": false});
    feed(
        Phase::Pre,
        "PreToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_input": edit_in, "tool_use_id": "toolu_demo_edit"}),
    )?;
    std::fs::write(
        dir.join("src/main.rs"),
        format!("mod greet;\n\nfn main() {{\n{new_main}}}\n"),
    )
    .map_err(|e| fail("writing", e))?;
    let s = feed(
        Phase::Post,
        "PostToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_input": edit_in, "tool_use_id": "toolu_demo_edit"}),
    )?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   Edit src/main.rs             (toolu_demo_edit)  → {} patch",
            s.patches
        ),
    )?;

    // 3. The user edits the agent's file by hand.
    std::fs::write(
        dir.join("src/greet.rs"),
        format!("// Greets people. (added by the user)\n{greet_body}"),
    )
    .map_err(|e| fail("writing", e))?;
    say(
        ui,
        &mut narrate,
        "\n3. You add a comment to src/greet.rs yourself, between two agent calls",
    )?;

    // 4. A shell command: changes found by comparing the workspace around it.
    let bash_in = serde_json::json!({"command": "rm notes.txt && mv README.md README && chmod +x src/main.rs"});
    let s = feed(
        Phase::Pre,
        "PreToolUse",
        serde_json::json!({"tool_name": "Bash", "tool_input": bash_in, "tool_use_id": "toolu_demo_bash"}),
    )?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   the next PreToolUse notices it → {} user_edit recorded (your bytes are stored too)",
            s.user_edits
        ),
    )?;
    std::fs::remove_file(dir.join("notes.txt")).map_err(|e| fail("running the command", e))?;
    std::fs::rename(dir.join("README.md"), dir.join("README"))
        .map_err(|e| fail("running the command", e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("src/main.rs"),
            std::fs::Permissions::from_mode(0o755),
        )
        .map_err(|e| fail("running the command", e))?;
    }
    let s = feed(
        Phase::Post,
        "PostToolUse",
        serde_json::json!({"tool_name": "Bash", "tool_input": bash_in, "tool_use_id": "toolu_demo_bash",
        "tool_response": {"stdout": "", "stderr": "", "interrupted": false}}),
    )?;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n4. Bash `rm notes.txt && mv README.md README && chmod +x src/main.rs` (toolu_demo_bash)\n   no file named in the payload: ckpt compares the workspace before and after → {} patches (delete, rename, mode)",
            s.patches
        ),
    )?;
    let s1_main = ws.rel_path(b"src/main.rs", None)?;

    // 4. The timeline.
    say(ui, &mut narrate, "\n5. $ ckpt log")?;
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
    let main_patch = read.records.iter().find_map(|r| match &r.body {
        ckpt::record::Body::FilePatch(p)
            if p.path == s1_main && p.op == ckpt::record::PatchOp::Modify =>
        {
            Some(p.clone())
        }
        _ => None,
    });
    if let Some(p) = main_patch {
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

    // 6. Verify, then show that tampering is caught.
    let report = ws.verify().map_err(|e| fail("verifying", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n6. $ ckpt verify  → {}: {} records, {} blobs re-hashed, {} checkpoints anchored",
            if report.ok { "ok" } else { "FAILED" },
            report.records,
            report.blobs_checked,
            report.checkpoints_checked
        ),
    )?;
    let ledger_path = dir.join(".agent-runtime/ledger.jsonl");
    let original = std::fs::read(&ledger_path).map_err(|e| fail("reading the ledger", e))?;
    let mut tampered = original.clone();
    if let Some(i) = find(&tampered, b"src/main.rs") {
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
    let refused = ckpt::hook::run(
        &ws,
        &ckpt::config::Config::default(),
        &ckpt::capture::HookEvent::empty(
            ckpt::capture::Format::Claude,
            ckpt::capture::Phase::Prompt,
        ),
    )
    .is_err();
    say(
        ui,
        &mut narrate,
        &format!(
            "   until it is repaired, ckpt adds nothing to that history: the next hook {}",
            if refused {
                "is refused (a pre hook blocks the agent's call, naming `ckpt repair`)"
            } else {
                "went through?!"
            }
        ),
    )?;
    std::fs::write(&ledger_path, &original).map_err(|e| fail("restoring the ledger", e))?;
    let again = ws.verify().map_err(|e| fail("verifying", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   (byte put back by hand) $ ckpt verify → {}: ckpt records again",
            if again.ok { "ok" } else { "FAILED" }
        ),
    )?;

    // 7. The user keeps working, then takes the agent's work back.
    let main_now =
        std::fs::read_to_string(dir.join("src/main.rs")).map_err(|e| fail("reading", e))?;
    let user_line = "\n// TODO(you): say hello in French too\n";
    std::fs::write(dir.join("src/main.rs"), format!("{main_now}{user_line}"))
        .map_err(|e| fail("writing", e))?;
    say(
        ui,
        &mut narrate,
        "\n7. You add a TODO at the end of src/main.rs, then decide the agent's approach was wrong:",
    )?;
    say(
        ui,
        &mut narrate,
        &format!("   $ ckpt rollback --to {}", c0.checkpoint),
    )?;
    let rep = ckpt::rollback::rollback(
        &ws,
        &cfg,
        &ckpt::rollback::RollbackOptions {
            selector: ckpt::rollback::Selector::To(c0.checkpoint.clone()),
            paths: Vec::new(),
            dry_run: false,
        },
    )
    .map_err(|e| fail("rolling back", e))?;
    for f in &rep.files {
        say(
            ui,
            &mut narrate,
            format!(
                "     {:<10} {:<14} {}",
                f.result.as_str(),
                f.path.display(),
                f.note.as_deref().unwrap_or("")
            )
            .trim_end(),
        )?;
    }
    let main_after =
        std::fs::read_to_string(dir.join("src/main.rs")).map_err(|e| fail("reading", e))?;
    let kept_todo = main_after == format!("fn main() {{\n{old_main}}}\n{user_line}");
    let mode_back = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(dir.join("src/main.rs"))
            .map(|m| m.permissions().mode() & 0o111 == 0)
            .unwrap_or(false)
    };
    let others_back = dir.join("README.md").exists()
        && !dir.join("README").exists()
        && std::fs::read(dir.join("notes.txt")).ok().as_deref() == Some(&b"scratch notes\n"[..]);
    say(
        ui,
        &mut narrate,
        &format!(
            "   src/main.rs is the original again with your TODO kept ({}), its exec bit gone ({}); README.md and notes.txt are back ({})",
            if kept_todo { "yes" } else { "NO" },
            if mode_back { "yes" } else { "NO" },
            if others_back { "yes" } else { "NO" }
        ),
    )?;
    let greet_kept = std::fs::read_to_string(dir.join("src/greet.rs"))
        .map(|t| t.starts_with("// Greets people."))
        .unwrap_or(false);
    let conflict_ok = rep.conflicts.len() == 1 && greet_kept;
    if let Some(c) = rep.conflicts.first() {
        say(
            ui,
            &mut narrate,
            &format!(
                "\n8. src/greet.rs: the agent created it and you edited it since, so ckpt does not delete it:\n   conflict {} ({}); your file is untouched ({}), exit code 3",
                c.conflict,
                ckpt::rollback::conflict_reason_text(c.reason.as_deref().unwrap_or("")),
                if greet_kept { "yes" } else { "NO" }
            ),
        )?;
        say(
            ui,
            &mut narrate,
            &format!(
                "   $ ckpt show {0}   → base / agent / yours, and the merge with diff3 markers\n   $ ckpt resolve {0} --keep-user | --apply-agent | --manual\n   $ ckpt rollback --action {1}   → puts the agent's work back (a rollback is undoable)",
                c.conflict, rep.action
            ),
        )?;
    }
    // 9. A crash in the middle of tool calls, then `ckpt recover`.
    let fix_in = serde_json::json!({"file_path": format!("{ws_path}/src/main.rs"),
        "old_string": "println!(\"hello\");", "new_string": "println!(\"hello, world\");", "replace_all": false});
    feed(
        Phase::Pre,
        "PreToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_input": fix_in, "tool_use_id": "toolu_demo_crash"}),
    )?;
    let main_now =
        std::fs::read_to_string(dir.join("src/main.rs")).map_err(|e| fail("reading", e))?;
    std::fs::write(
        dir.join("src/main.rs"),
        main_now.replace("println!(\"hello\");", "println!(\"hello, world\");"),
    )
    .map_err(|e| fail("writing", e))?;
    feed(
        Phase::Pre,
        "PreToolUse",
        serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "cargo publish"}, "tool_use_id": "toolu_demo_publish"}),
    )?;
    say(
        ui,
        &mut narrate,
        "\n9. The agent edits src/main.rs (the edit reaches the disk) and starts `cargo publish`;\n   the agent process is killed before either PostToolUse arrives.",
    )?;
    let rec = ckpt::recover::recover(&ws).map_err(|e| fail("recovering", e))?;
    say(
        ui,
        &mut narrate,
        &format!(
            "   $ ckpt recover   → exit {}",
            if rec.needs_person {
                "5: a person is needed"
            } else {
                "0"
            }
        ),
    )?;
    for c in rec.calls.iter().filter(|c| c.status == "uncertain") {
        say(
            ui,
            &mut narrate,
            &format!(
                "     {} {:<18} {:<12} replay: {}",
                c.tool,
                c.call,
                c.evidence.unwrap_or("effects unknown"),
                c.replay
            ),
        )?;
    }
    say(
        ui,
        &mut narrate,
        "   .agent-runtime/RECOVERY.md, to hand the model:",
    )?;
    for l in rec.note_text.lines().filter(|l| {
        l.contains("toolu_demo_crash") || l.contains("toolu_demo_publish") || l.starts_with("## ")
    }) {
        say(ui, &mut narrate, &format!("     {l}"))?;
    }
    let applied = rec
        .calls
        .iter()
        .any(|c| c.call == "toolu_demo_crash" && c.evidence == Some("applied"));
    let publish_flagged = rec.needs_person
        && rec
            .calls
            .iter()
            .any(|c| c.call == "toolu_demo_publish" && c.status == "uncertain");

    // 10. The conversation goes back to a checkpoint; nothing is deleted.
    use ckpt::record::EntryType;
    use ckpt::session;
    let sid = "demo-conversation";
    let msg = |role: &str, text: &str| serde_json::json!({"role": role, "text": text});
    let fail_s = |e: ckpt::WorkspaceError| fail("recording the session", e);
    let append = |entries: &[(EntryType, serde_json::Value)]| {
        entries.iter().try_for_each(|(t, payload)| {
            session::append(&ws, sid, *t, payload.clone(), None)
                .map(|_| ())
                .map_err(fail_s)
        })
    };
    append(&[
        (EntryType::Message, msg("user", "Add a greeting module")),
        (
            EntryType::AppState,
            serde_json::json!({"mode": "edit", "model": "demo"}),
        ),
        (EntryType::Message, msg("assistant", "Added src/greet.rs")),
    ])?;
    let records = ws.read_ledger().map_err(fail_s)?.records;
    let cp = ws
        .checkpoint(CheckpointOptions {
            label: Some("greeting done".into()),
            session: Some(sid.into()),
            session_leaf: session::leaf(&records, sid),
            ..Default::default()
        })
        .map_err(fail_s)?;
    append(&[
        (EntryType::Message, msg("user", "Now publish it")),
        (
            EntryType::Message,
            msg("assistant", "Running cargo publish…"),
        ),
    ])?;
    let rs = session::restore_session(
        &ws,
        &cfg,
        &session::RestoreOptions {
            session: sid.into(),
            to: cp.checkpoint.clone(),
            with_files: false,
            claude: false,
        },
    )
    .map_err(|e| fail("restoring the session", e))?;
    let records = ws.read_ledger().map_err(fail_s)?.records;
    let view = session::show(&records, sid);
    let leaves = session::branches(&records, sid);
    let texts: Vec<String> = view
        .entries
        .iter()
        .filter_map(|e| {
            e.payload
                .get("text")
                .and_then(|t| t.as_str())
                .map(str::to_string)
        })
        .collect();
    say(
        ui,
        &mut narrate,
        &format!(
            "\n10. $ ckpt restore-session --session {sid} --to {}\n    → branch entry {}; the conversation now reads: {}\n    the abandoned branch (\"Now publish it\") is still there: {} leaves ($ ckpt session branches)",
            cp.checkpoint,
            rs.branch_entry.as_deref().unwrap_or("?"),
            texts
                .iter()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(" → "),
            leaves.len()
        ),
    )?;
    let restored = texts == ["Add a greeting module", "Added src/greet.rs"]
        && leaves.len() == 2
        && view.app_state.is_some();

    let after = ws.verify().map_err(|e| fail("verifying", e))?;
    let ok = report.ok
        && !bad.ok
        && kept_todo
        && mode_back
        && others_back
        && conflict_ok
        && applied
        && publish_flagged
        && restored
        && after.ok;
    say(
        ui,
        &mut narrate,
        &format!(
            "\n{}",
            if ok {
                "demo finished: every agent change recorded, chained and taken back — and none of yours."
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
