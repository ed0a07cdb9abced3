//! `ckpt verify`: checks the ledger chain, every blob and patch artifact a record
//! references, and every checkpoint (its file, its checksum, its anchor).

use std::collections::{BTreeMap, HashSet};
use std::os::fd::AsFd;

use serde::Serialize;

use crate::checkpoint;
use crate::fs_util;
use crate::hash::ContentHash;
use crate::ledger::NEEDS_VERIFY_FILE;
use crate::record::Body;
use crate::workspace::{Workspace, WorkspaceError};

/// One thing `verify` found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The ledger position concerned, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The file concerned (relative to `.agent-runtime/`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What is wrong, in one line.
    pub problem: String,
}

/// What `verify` found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// True when nothing is wrong.
    pub ok: bool,
    /// Valid records read.
    pub records: u64,
    /// Failures.
    pub problems: Vec<Problem>,
    /// Things worth knowing that are not failures.
    pub warnings: Vec<Problem>,
    /// Distinct blobs re-hashed.
    pub blobs_checked: usize,
    /// Patch artifacts found.
    pub patches_checked: usize,
    /// Checkpoint files checked.
    pub checkpoints_checked: usize,
    /// Blobs and patch artifacts that records name and `ckpt gc` removed by
    /// design (only records at or before its horizon name them, and nothing
    /// open needs them): not problems.
    pub collected: usize,
    /// The records before this seq were taken out of the ledger by `ckpt
    /// gc` (by design: `ledger.base` records the cut and the first record
    /// left links to it); `None` for a whole ledger.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_starts_at: Option<u64>,
}

fn valid_artifact_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Workspace {
    /// Refuses to act (`acting`: "ckpt runs no compensation", …) on a
    /// history `verify` would reject at its anchors: a damaged record, a
    /// head anchor the ledger does not reach or agree with, and the newest
    /// checkpoint file's anchor (a record rewritten before it, and every
    /// later hash recomputed, changes the hash it names) and `also`'s.
    /// `head` is `ledger.head` read before `read` was (it may lag the
    /// ledger, never lead).
    pub fn refuse_damaged(
        &self,
        read: &crate::LedgerRead,
        head: crate::ledger::HeadState,
        acting: &str,
        also: Option<&str>,
    ) -> Result<(), WorkspaceError> {
        let refuse = |why: String| {
            // Writers stop too, until `ckpt repair`.
            crate::ledger::mark_damaged(self.runtime_dir().as_fd(), &why);
            WorkspaceError::Damaged(format!(
                "{why}; run `ckpt verify`, then `ckpt repair` — {acting} from a damaged history"
            ))
        };
        if let Some(c) = &read.corruption {
            return Err(refuse(format!(
                "the ledger is damaged at seq {} ({})",
                c.seq, c.problem
            )));
        }
        // A whole read that started after a cut: gc planned it.
        if let Some(cut) = &read.cut
            && !read
                .records
                .iter()
                .any(|r| crate::ledger::plans_cut(r, cut))
        {
            return Err(refuse(crate::ledger::unplanned_cut(cut)));
        }
        let rt = self.runtime_dir();
        if head == crate::ledger::HeadState::Absent && read.tail.seq > 0 {
            return Err(refuse("`ledger.head` is missing".into()));
        }
        // `read` may hold only the records after a position (recover's
        // cached cut): a seq before its first is not checked here (`ckpt
        // verify` checks the whole chain). `None`: not in `read`.
        let first = read.records.first().map_or(read.tail.seq + 1, |r| r.seq);
        let hash_at = |seq: u64| -> Option<Option<&str>> {
            if seq < first {
                return None;
            }
            let i = usize::try_from(seq - first).ok()?;
            Some(
                read.records
                    .get(i)
                    .filter(|r| r.seq == seq)
                    .map(|r| r.hash.as_str()),
            )
        };
        let cut = |seq: u64, what: &str| {
            refuse(format!(
                "ledger_truncated: {what} names seq {seq} but the ledger ends at seq {}",
                read.tail.seq
            ))
        };
        let rewritten = |seq: u64, what: &str| {
            refuse(format!(
                "the record at seq {seq} is not the one {what} anchors (its hash differs)"
            ))
        };
        if let Some(h) = head.head()
            && h.seq > 0
        {
            if h.seq > read.tail.seq {
                return Err(cut(h.seq, "ledger.head"));
            }
            if hash_at(h.seq).is_some_and(|at| h.hash.as_deref() != at) {
                return Err(rewritten(h.seq, "ledger.head"));
            }
        }
        // The newest checkpoint file (ids sort by time) covers the most records.
        let newest = checkpoint::newest(rt);
        for id in newest.iter().map(String::as_str).chain(also) {
            if let Ok(f) = self.checkpoint_file(id)
                && f.upto_seq > 0
            {
                if f.upto_seq > read.tail.seq {
                    return Err(cut(f.upto_seq, &format!("checkpoint {id}")));
                }
                if f.upto_hash.is_some()
                    && hash_at(f.upto_seq).is_some_and(|at| f.upto_hash.as_deref() != at)
                {
                    return Err(rewritten(f.upto_seq, &format!("checkpoint {id}")));
                }
            }
        }
        Ok(())
    }

    /// Checks everything `verify` checks. Damage is reported, never repaired.
    pub fn verify(&self) -> Result<VerifyReport, WorkspaceError> {
        let mut problems = Vec::new();
        let mut warnings = Vec::new();
        let read = self.read_ledger()?;
        if let Some(c) = &read.corruption {
            problems.push(Problem {
                seq: Some(c.seq),
                path: Some("ledger.jsonl".into()),
                problem: format!(
                    "ledger damaged at line {} (seq {}): {}",
                    c.line, c.seq, c.problem
                ),
            });
        }
        if let Some(t) = &read.torn {
            problems.push(Problem {
                seq: Some(read.tail.seq + 1),
                path: Some("ledger.jsonl".into()),
                problem: format!(
                    "torn last record: {} bytes after seq {} do not form a valid record (a write cut short by a crash); the next ckpt write backs them up and cuts them off",
                    t.bytes, read.tail.seq
                ),
            });
        }
        let rt = self.runtime_dir();
        if crate::ledger::head_state(rt.as_fd()) == crate::ledger::HeadState::Absent
            && read.tail.seq > 0
        {
            problems.push(Problem {
                seq: None,
                path: Some(crate::ledger::HEAD_FILE.into()),
                problem: "`ledger.head`, the anchor of the last record written, is missing (ckpt creates it with the ledger and never removes it): a cut-off end of the ledger could not be seen".into(),
            });
        }
        if let Some(head) = crate::ledger::read_head(rt.as_fd()) {
            if read.corruption.is_none() && head.seq > read.tail.seq {
                problems.push(Problem {
                    seq: Some(head.seq),
                    path: Some("ledger.jsonl".into()),
                    problem: format!(
                        "ledger_truncated: seq {} was written but the ledger now ends at seq {}",
                        head.seq, read.tail.seq
                    ),
                });
            } else if head.seq == read.tail.seq && head.hash != read.tail.hash {
                problems.push(Problem {
                    seq: Some(head.seq),
                    path: Some("ledger.jsonl".into()),
                    problem: format!("the record at seq {} is not the one that was written (its hash differs from ledger.head)", head.seq),
                });
            }
        }
        if fs_util::entry_at(rt.as_fd(), NEEDS_VERIFY_FILE.as_ref())
            .map(|e| e != fs_util::EntryKind::Absent)
            .unwrap_or(false)
        {
            warnings.push(Problem {
                seq: None,
                path: Some(NEEDS_VERIFY_FILE.into()),
                problem: "an fdatasync of the ledger failed earlier; the records read back are checked above (flag cleared)".into(),
            });
            let _ = rustix::fs::unlinkat(&**rt, NEEDS_VERIFY_FILE, rustix::fs::AtFlags::empty());
        }

        // The oldest records `ckpt gc` took out: the ledger starts after a
        // cut `ledger.base` records (the reader links it), or starts whole
        // and holds, at each recorded cut it reaches, the record the cut
        // names (a gc cut short before its rename).
        let first = read.records.first().map_or(read.tail.seq + 1, |r| r.seq);
        let ledger_starts_at = (first > 1 && !read.records.is_empty()).then_some(first);
        // The record a cut took out just before the first one left: what a
        // kept checkpoint made right then anchors.
        let mut cut_before: Option<(u64, String)> = None;
        match crate::ledger::read_cuts(rt.as_fd()) {
            Err(why) if first > 1 => problems.push(Problem {
                seq: None,
                path: Some(crate::ledger::BASE_FILE.into()),
                problem: why,
            }),
            Err(why) => warnings.push(Problem {
                seq: None,
                path: Some(crate::ledger::BASE_FILE.into()),
                problem: format!("{why}; the ledger is whole, so nothing depends on it"),
            }),
            Ok(cuts) => {
                // The cut the whole read started after (its first record
                // links to it).
                cut_before = read.cut.as_ref().map(|c| (c.seq, c.hash.clone()));
                // The gc that made it planned it in a record still in the
                // ledger (its plan follows the cut): a base written by hand
                // over records removed by hand has none.
                if let Some(c) = &read.cut
                    && !read.records.iter().any(|r| crate::ledger::plans_cut(r, c))
                {
                    problems.push(Problem {
                        seq: Some(first),
                        path: Some(crate::ledger::BASE_FILE.into()),
                        problem: crate::ledger::unplanned_cut(c),
                    });
                }
                for c in cuts.iter().filter(|c| c.seq >= first) {
                    let at = usize::try_from(c.seq - first)
                        .ok()
                        .and_then(|i| read.records.get(i));
                    if at.is_some_and(|r| r.hash != c.hash) {
                        problems.push(Problem {
                            seq: Some(c.seq),
                            path: Some(crate::ledger::BASE_FILE.into()),
                            problem: format!(
                                "`ckpt gc` ({}) cut the ledger after seq {}, but the record at that seq is not the one it cut after: the ledger was replaced by another",
                                c.action, c.seq
                            ),
                        });
                    }
                }
            }
        }

        // What `ckpt gc` may have removed by design: contents and artifacts
        // that only records at or before its horizon name, and nothing open
        // needs (`crate::gc`'s own rule, without the user versions' grace).
        let horizon = crate::retention::horizon(&read.records);
        let needed =
            (horizon > 0).then(|| crate::retention::needed(&read.records, horizon, u64::MAX));
        let collectable_blob =
            |h: &ContentHash| needed.as_ref().is_some_and(|n| !n.hashes.contains(h));
        let collectable_patch = |seq: u64, id: &str| {
            seq <= horizon && needed.as_ref().is_some_and(|n| !n.patches.contains(id))
        };
        let mut collected = 0usize;
        // Every blob referenced, each checked once.
        let mut blobs: BTreeMap<ContentHash, u64> = BTreeMap::new();
        let mut patches = 0usize;
        let mut by_seq_hash: BTreeMap<u64, &str> = BTreeMap::new();
        if let Some((seq, hash)) = &cut_before {
            by_seq_hash.insert(*seq, hash);
        }
        let mut recorded_checkpoints = HashSet::new();
        let mut checkpoints_checked = 0usize;
        for r in &read.records {
            by_seq_hash.insert(r.seq, &r.hash);
            let mut refs: Vec<ContentHash> = Vec::new();
            match &r.body {
                Body::FilePatch(p) => {
                    refs.extend(p.before_hash);
                    refs.extend(p.after_hash);
                    if let Some(pr) = &p.patch_ref {
                        patches += 1;
                        let expected = format!("artifacts/patches/{}.diff", p.patch);
                        if !valid_artifact_id(&p.patch) || *pr != expected {
                            problems.push(Problem {
                                seq: Some(r.seq),
                                path: None,
                                problem: format!(
                                    "patch_ref `{pr}` is not `artifacts/patches/<patch id>.diff`"
                                ),
                            });
                        } else if !artifact_exists(self, &p.patch) {
                            if collectable_patch(r.seq, &p.patch) {
                                collected += 1;
                            } else {
                                problems.push(Problem {
                                    seq: Some(r.seq),
                                    path: Some(expected),
                                    problem: "patch artifact is missing".into(),
                                });
                            }
                        } else if let Ok(have) = crate::call::read_patch_artifact(self, &p.patch)
                            && let Ok(false) = crate::call::artifact_is_sound(self, p, &have)
                        {
                            // (A blob that cannot be read is reported below.)
                            problems.push(Problem {
                                seq: Some(r.seq),
                                path: Some(expected),
                                problem: "patch artifact does not hold the diff of the patch's recorded before and after contents (it was changed or replaced)".into(),
                            });
                        }
                    }
                }
                Body::UserEdit(u) => {
                    refs.extend(u.before_hash);
                    refs.extend(u.after_hash);
                }
                Body::Conflict(c) => {
                    refs.extend(c.base_ref);
                    refs.extend(c.agent_ref);
                    refs.extend(c.current_ref);
                }
                Body::Checkpoint(c) => {
                    checkpoints_checked += 1;
                    recorded_checkpoints.insert(c.checkpoint.clone());
                    let expected_ref =
                        format!("checkpoints/{}", checkpoint::file_name(&c.checkpoint));
                    if !checkpoint::valid_id(&c.checkpoint) || c.file_ref != expected_ref {
                        problems.push(Problem {
                            seq: Some(r.seq),
                            path: None,
                            problem: format!(
                                "checkpoint ref `{}` is not `{expected_ref}`",
                                c.file_ref
                            ),
                        });
                        continue;
                    }
                    match self.checkpoint_file(&c.checkpoint) {
                        Err(e) => problems.push(Problem {
                            seq: Some(r.seq),
                            path: Some(expected_ref),
                            problem: e.to_string(),
                        }),
                        Ok(f) => {
                            let anchor_ok = f.upto_seq == c.upto_seq
                                && f.upto_seq < r.seq
                                && (f.upto_seq == 0 && f.upto_hash.is_none()
                                    || by_seq_hash.get(&f.upto_seq).copied()
                                        == f.upto_hash.as_deref());
                            if !anchor_ok {
                                problems.push(Problem {
                                    seq: Some(r.seq),
                                    path: Some(expected_ref),
                                    problem: format!(
                                        "checkpoint {} anchors seq {} with a hash the ledger does not have",
                                        c.checkpoint, f.upto_seq
                                    ),
                                });
                            }
                        }
                    }
                }
                _ => {}
            }
            for h in refs {
                blobs.entry(h).or_insert(r.seq);
            }
        }
        const CHECKING: &str = "checking stored contents";
        for (i, (h, seq)) in blobs.iter().enumerate() {
            self.progress_items(CHECKING, i, blobs.len());
            if let Err(e) = self.blobs().check(h) {
                if matches!(e, crate::blob_store::BlobError::Missing(_)) && collectable_blob(h) {
                    collected += 1;
                    continue;
                }
                // A content stored as chunks names the part that failed: a
                // chunk, or its manifest.
                let at = e.hash().unwrap_or(h);
                problems.push(Problem {
                    seq: Some(*seq),
                    path: Some(self.blobs().path_of(at)),
                    problem: e.to_string(),
                });
            }
        }
        self.progress_items(CHECKING, blobs.len(), blobs.len());
        // Checkpoint files whose record is missing: their anchors still tell
        // whether the ledger was cut back (`ledger_truncated`).
        let files = checkpoint::list_files(rt).unwrap_or_default();
        for id in files
            .iter()
            .filter(|id| !recorded_checkpoints.contains(*id))
        {
            let path = format!("checkpoints/{}", checkpoint::file_name(id));
            match self.checkpoint_file(id) {
                Err(e) => warnings.push(Problem {
                    seq: None,
                    path: Some(path),
                    problem: format!("{e}; skipped"),
                }),
                Ok(f) => {
                    checkpoints_checked += 1;
                    if f.upto_seq > read.tail.seq && read.corruption.is_none() {
                        problems.push(Problem {
                            seq: Some(f.upto_seq),
                            path: Some(path),
                            problem: format!(
                                "ledger_truncated: checkpoint {id} covers seq {} but the ledger ends at seq {}",
                                f.upto_seq, read.tail.seq
                            ),
                        });
                    } else if f.upto_seq > 0
                        && by_seq_hash
                            .get(&f.upto_seq)
                            .is_some_and(|h| Some(*h) != f.upto_hash.as_deref())
                    {
                        problems.push(Problem {
                            seq: Some(f.upto_seq),
                            path: Some(path),
                            problem: format!("checkpoint {id} anchors seq {} with a different hash: the ledger was rewritten", f.upto_seq),
                        });
                    } else if ledger_starts_at.is_some_and(|s| f.upto_seq < s) {
                        warnings.push(Problem {
                            seq: None,
                            path: Some(path),
                            problem: format!("checkpoint {id}'s record was taken out of the ledger by `ckpt gc` (a gc cut short before removing this file); it is ignored, and the next `ckpt gc` removes it"),
                        });
                    } else {
                        warnings.push(Problem {
                            seq: None,
                            path: Some(path),
                            problem: format!("checkpoint file {id} has no ledger record (a crash between writing the file and the record); it is ignored"),
                        });
                    }
                }
            }
        }
        // The mark that stops writers (ledger.damaged) follows what was found:
        // left for damage in the ledger or its anchors, taken away once the
        // ledger reads whole again (repaired, or a byte put back by hand).
        let ledger_damage = problems.iter().find(|p| {
            p.path.as_deref().is_some_and(|f| {
                f == "ledger.jsonl"
                    || f == crate::ledger::HEAD_FILE
                    || f.starts_with("checkpoints/")
            }) && !p.problem.starts_with("torn last record")
        });
        match ledger_damage {
            Some(p) => crate::ledger::mark_damaged(rt.as_fd(), &p.problem),
            None => {
                if crate::ledger::damaged_mark(rt.as_fd()).is_some() {
                    let _ = crate::ledger::clear_damaged(rt.as_fd());
                    warnings.push(Problem {
                        seq: None,
                        path: Some(crate::ledger::DAMAGED_FILE.into()),
                        problem: "the ledger was marked damaged and now reads whole: the mark is taken away, and ckpt records again".into(),
                    });
                }
            }
        }
        Ok(VerifyReport {
            ok: problems.is_empty(),
            records: read.records.len() as u64,
            problems,
            warnings,
            blobs_checked: blobs.len(),
            patches_checked: patches,
            checkpoints_checked,
            collected,
            ledger_starts_at,
        })
    }
}

fn artifact_exists(ws: &Workspace, patch: &str) -> bool {
    let rt = ws.runtime_dir();
    let Ok(art) = fs_util::open_dir(rt.as_fd(), "artifacts") else {
        return false;
    };
    let Ok(dir) = fs_util::open_dir(art.as_fd(), "patches") else {
        return false;
    };
    matches!(
        fs_util::entry_at(dir.as_fd(), format!("{patch}.diff").as_ref()),
        Ok(fs_util::EntryKind::File { .. })
    )
}
