//! Three-way merges of file contents, and ckpt's undo of one agent patch.
//!
//! This module owns the merge *algorithm*: it takes three byte buffers and returns either the
//! merged bytes, the same with conflict markers, or the verdict that the contents are binary.
//! It does no I/O and knows nothing about the ledger, blobs or paths; reading the versions,
//! writing the result and raising conflict records are left to `rollback`.
//!
//! Undoing an agent patch `before → after` while the file now holds `current` is the merge
//! `git merge-file current after before` (RELIABILITY rule 9): ancestor = the agent's result,
//! ours = the file now, theirs = the file before the agent's edit. [`undo_patch`] is that
//! mapping, with the labels `current`, `agent` and `before`.
//!
//! The merge engine is libgit2's xdiff (via `git2::merge_file`), the same code as
//! `git merge-file`, so a clean merge is byte-identical to git's (checked against the git CLI
//! by `tests/merge_vs_git.rs`, RELIABILITY T12). Three things are added on top:
//!
//! - Binary contents (a NUL in the first 8000 bytes, git's heuristic) are never text-merged:
//!   libgit2 would return an empty "conflict" for them (DEPENDENCIES gotcha 2).
//! - Conflict markers are made longer than any run of `<`, `|`, `=`, `>` that starts a line
//!   in the inputs (at least 7), so a marker line in the output can never be mistaken for a
//!   line of the file, and conflict hunks can be counted and parsed unambiguously.
//! - libgit2 leaves a marker's label out when that side is empty (git does not); the labels
//!   are put back so the output matches `git merge-file -L … -L … -L …` byte for byte.
//!
//! Besides `git.rs`, this is the only module that names git2: libgit2's merge is the engine
//! DEPENDENCIES.md chose, and nothing else here touches a repository.
//!
//! Line endings are bytes like any other: a line is everything up to and including `\n`, so
//! `\r\n`, a bare `\r` and a missing final newline all survive a merge unchanged. Marker lines
//! end in `\r\n` when the surrounding lines do (xdiff's rule).
//!
//! # Limitations
//!
//! - A line starting with 65 535 or more marker characters leaves no room for an unambiguous
//!   marker; such inputs are refused with [`MergeError::MarkerTooLong`].
//! - Inputs above xdiff's size limit (just under 1 GiB) are refused with
//!   [`MergeError::TooLarge`]; callers are expected to skip text merges far below that.

use crate::patch::lines;
use std::sync::Once;

/// Number of leading bytes git inspects when deciding whether contents are binary.
const BINARY_SNIFF_LEN: usize = 8000;

/// The smallest conflict marker, and git's default.
const MIN_MARKER_SIZE: usize = 7;

/// Largest input xdiff accepts (`GIT_XDIFF_MAX_SIZE` in libgit2); libgit2 treats anything
/// larger as binary and returns an empty result.
const MAX_INPUT_LEN: usize = 1024 * 1024 * 1023;

/// The three versions of a file that take part in a merge.
#[derive(Debug, Clone, Copy)]
pub struct MergeInput<'a> {
    /// The common ancestor (`orig-file` for `git merge-file`).
    pub ancestor: &'a [u8],
    /// Our version; the merge applies their changes to it.
    pub ours: &'a [u8],
    /// Their version.
    pub theirs: &'a [u8],
}

/// The names written after conflict markers (`<<<<<<< ours`, `||||||| ancestor`, `>>>>>>> theirs`).
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a> {
    /// Label of the `<<<<<<<` marker.
    pub ours: &'a str,
    /// Label of the `|||||||` marker.
    pub ancestor: &'a str,
    /// Label of the `>>>>>>>` marker.
    pub theirs: &'a str,
}

impl Labels<'static> {
    /// The labels of [`undo_patch`]: the file now, the agent's result, the file before the agent.
    pub const UNDO: Labels<'static> = Labels {
        ours: "current",
        ancestor: "agent",
        theirs: "before",
    };
}

/// What a merge produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// Both sides' changes were combined without overlap.
    Clean(Vec<u8>),
    /// Some changes overlapped; the result holds diff3-style conflict markers.
    Conflict {
        /// The merged contents, with each overlap written as a marked conflict hunk.
        merged_with_markers: Vec<u8>,
        /// Number of conflict hunks in `merged_with_markers`.
        hunks: usize,
    },
    /// At least one version is binary, so no text merge was attempted.
    Binary,
}

/// Why a merge could not be attempted or did not complete.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A label contains a NUL byte or a line break, which cannot go after a marker.
    #[error("merge label {0:?} contains a NUL byte or a line break")]
    InvalidLabel(String),
    /// An input line starts with so many marker characters that no marker size is longer.
    #[error("a line starts with {run} conflict-marker characters, too many to mark conflicts")]
    MarkerTooLong {
        /// Length of the longest run of `<`, `|`, `=`, `>` at the start of a line.
        run: usize,
    },
    /// An input is larger than the merge engine accepts.
    #[error("cannot merge {len} bytes: the limit is {MAX_INPUT_LEN} bytes")]
    TooLarge {
        /// Length of the largest input.
        len: usize,
    },
    /// libgit2 failed.
    #[error("libgit2 could not merge the three versions")]
    Engine(#[source] git2::Error),
    /// libgit2 reported a conflict but its output holds no conflict marker.
    #[error("libgit2 reported a conflict without writing conflict markers")]
    MissingMarkers,
}

/// Returns whether `bytes` look binary to git: a NUL byte within the first 8000 bytes.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(BINARY_SNIFF_LEN).any(|&b| b == 0)
}

/// Returns the conflict-marker length [`merge3`] uses for `input`.
///
/// It is one more than the longest run of `<`, `|`, `=`, `>` at the start of any line of the
/// three versions, and at least 7. Pass it to `git merge-file --marker-size` to reproduce
/// [`merge3`]'s output with git.
pub fn marker_size(input: &MergeInput) -> usize {
    let MergeInput {
        ancestor,
        ours,
        theirs,
    } = *input;
    let longest = [ancestor, ours, theirs]
        .into_iter()
        .map(longest_marker_run)
        .max()
        .unwrap_or(0);
    (longest + 1).max(MIN_MARKER_SIZE)
}

/// Merges `input.theirs`'s changes (relative to `input.ancestor`) into `input.ours`.
///
/// Conflicts are written in diff3 style (ours, ancestor, theirs) with `labels`; the result is
/// the same as `git merge-file -p --diff3 --marker-size N -L ours -L ancestor -L theirs` with
/// N = [`marker_size`]. If any version is binary, the result is [`MergeOutcome::Binary`].
pub fn merge3(input: &MergeInput, labels: &Labels) -> Result<MergeOutcome, MergeError> {
    let MergeInput {
        ancestor,
        ours,
        theirs,
    } = *input;
    for label in [labels.ours, labels.ancestor, labels.theirs] {
        if label.contains(['\0', '\n', '\r']) {
            return Err(MergeError::InvalidLabel(label.to_owned()));
        }
    }
    let len = ancestor.len().max(ours.len()).max(theirs.len());
    if len > MAX_INPUT_LEN {
        return Err(MergeError::TooLarge { len });
    }
    if is_binary(ancestor) || is_binary(ours) || is_binary(theirs) {
        return Ok(MergeOutcome::Binary);
    }
    // These are the cases where xdiff copies one side without merging. Answering them here
    // gives the same bytes and avoids an empty result with a NULL pointer, which
    // `MergeFileResult::content` would turn into a slice (git2 PR #1282).
    if ours == ancestor {
        return Ok(MergeOutcome::Clean(theirs.to_vec()));
    }
    if theirs == ancestor {
        return Ok(MergeOutcome::Clean(ours.to_vec()));
    }
    let size = marker_size(input);
    let marker_len =
        u16::try_from(size).map_err(|_| MergeError::MarkerTooLong { run: size - 1 })?;

    init_libgit2();
    let mut opts = git2::MergeFileOptions::new();
    opts.style_diff3(true)
        .marker_size(marker_len)
        .our_label(labels.ours)
        .ancestor_label(labels.ancestor)
        .their_label(labels.theirs);
    let [mut anc_in, mut ours_in, mut theirs_in] = [(); 3].map(|()| git2::MergeFileInput::new());
    anc_in.content(ancestor);
    ours_in.content(ours);
    theirs_in.content(theirs);
    let result = git2::merge_file(&anc_in, &ours_in, &theirs_in, Some(&mut opts))
        .map_err(MergeError::Engine)?;

    if result.is_automergeable() {
        return Ok(MergeOutcome::Clean(result.content().to_vec()));
    }
    let mut merged = result.content().to_vec();
    if ancestor.is_empty() || ours.is_empty() || theirs.is_empty() {
        merged = restore_labels(&merged, size, labels);
    }
    let hunks = lines(&merged)
        .filter(|line| starts_with_run(line, b'<', size))
        .count();
    if hunks == 0 {
        return Err(MergeError::MissingMarkers);
    }
    Ok(MergeOutcome::Conflict {
        merged_with_markers: merged,
        hunks,
    })
}

/// Undoes the agent patch `before → after` in a file that now holds `current`.
///
/// This is [`merge3`] with ancestor = `after`, ours = `current`, theirs = `before` and
/// [`Labels::UNDO`], i.e. `git merge-file current after before`. User edits that do not
/// touch the agent's hunks are kept; overlapping ones give a conflict. Two cases are answered
/// without merging, binary or not: if the file is still exactly as the agent left it, the
/// result is `before`; if the patch changed nothing, the result is `current`.
pub fn undo_patch(before: &[u8], after: &[u8], current: &[u8]) -> Result<MergeOutcome, MergeError> {
    if current == after {
        return Ok(MergeOutcome::Clean(before.to_vec()));
    }
    if before == after {
        return Ok(MergeOutcome::Clean(current.to_vec()));
    }
    merge3(
        &MergeInput {
            ancestor: after,
            ours: current,
            theirs: before,
        },
        &Labels::UNDO,
    )
}

/// Undoes the agent patch `before → after` in `current`, taking the agent's
/// `before` side wherever the user's edits overlap (`git merge-file --theirs`):
/// what `ckpt resolve --apply-agent` writes for a text conflict. User edits
/// outside the overlapping hunks are kept. `None` when a version is binary.
pub fn undo_patch_preferring_before(
    before: &[u8],
    after: &[u8],
    current: &[u8],
) -> Result<Option<Vec<u8>>, MergeError> {
    match undo_patch(before, after, current)? {
        MergeOutcome::Clean(out) => return Ok(Some(out)),
        MergeOutcome::Binary => return Ok(None),
        MergeOutcome::Conflict { .. } => {}
    }
    if before.is_empty() {
        // The agent's change is then the whole file, so every user edit
        // overlaps it; answering here also keeps an empty result from coming
        // back as a NULL buffer (see `merge3`).
        return Ok(Some(Vec::new()));
    }
    init_libgit2();
    let mut opts = git2::MergeFileOptions::new();
    opts.favor(git2::FileFavor::Theirs);
    let [mut anc_in, mut ours_in, mut theirs_in] = [(); 3].map(|()| git2::MergeFileInput::new());
    anc_in.content(after);
    ours_in.content(current);
    theirs_in.content(before);
    let result = git2::merge_file(&anc_in, &ours_in, &theirs_in, Some(&mut opts))
        .map_err(MergeError::Engine)?;
    Ok(Some(result.content().to_vec()))
}

/// Initialises libgit2 once per process.
///
/// `git2::merge_file` (git2 0.21) does not call `git_libgit2_init` itself, and until that
/// runs libgit2's allocator fails on purpose: the merge returns `Err(-1, "no error")`
/// (DEPENDENCIES gotcha 1). `Config::new` is a cheap git2 call that does initialise.
fn init_libgit2() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // The config object is only a vehicle for git2's initialisation; an error creating
        // it would surface again as `MergeError::Engine` from the merge itself.
        let _ = git2::Config::new();
    });
}

/// Returns the longest run of marker characters that starts a line of `bytes`.
fn longest_marker_run(bytes: &[u8]) -> usize {
    lines(bytes)
        .map(|line| {
            line.iter()
                .take_while(|b| matches!(b, b'<' | b'|' | b'=' | b'>'))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Returns whether `line` starts with `size` copies of `marker`.
fn starts_with_run(line: &[u8], marker: u8, size: usize) -> bool {
    line.len() >= size && line[..size].iter().all(|&b| b == marker)
}

/// Adds the label to every marker line that libgit2 wrote without one.
///
/// libgit2 passes no label for a side whose content is empty, so its marker is bare
/// (`<<<<<<<\n`); `git merge-file` labels it. With markers longer than any marker-like run
/// in the inputs, a line made only of `size` copies of `<`, `|` or `>` is always a marker.
fn restore_labels(merged: &[u8], size: usize, labels: &Labels) -> Vec<u8> {
    let mut out = Vec::with_capacity(merged.len() + 64);
    for line in lines(merged) {
        let body_len = line.strip_suffix(b"\n").map_or(line.len(), <[u8]>::len);
        let body_len = line[..body_len]
            .strip_suffix(b"\r")
            .map_or(body_len, <[u8]>::len);
        let label = match line.first() {
            Some(b'<') => labels.ours,
            Some(b'|') => labels.ancestor,
            Some(b'>') => labels.theirs,
            _ => "",
        };
        if body_len == size && !label.is_empty() && starts_with_run(line, line[0], size) {
            out.extend_from_slice(&line[..size]);
            out.push(b' ');
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(&line[size..]);
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// Whether the changes from `base` to `a` and from `base` to `b` touch the
/// same lines of `base` (overlapping or adjacent ranges, or insertions at
/// the same place), identical changes included: what a three-way merge
/// takes in silence when both sides made the same edit. Lines split at
/// `\n`, as everywhere.
pub fn changes_overlap(base: &[u8], a: &[u8], b: &[u8]) -> bool {
    let ranges = |other: &[u8]| -> Vec<(usize, usize)> {
        let old: Vec<&[u8]> = crate::patch::lines(base).collect();
        let new: Vec<&[u8]> = crate::patch::lines(other).collect();
        similar::capture_diff_slices(similar::Algorithm::Myers, &old, &new)
            .into_iter()
            .filter(|op| !matches!(op, similar::DiffOp::Equal { .. }))
            .map(|op| {
                let r = op.old_range();
                (r.start, r.end)
            })
            .collect()
    };
    let (ra, rb) = (ranges(a), ranges(b));
    // [s, e) ranges of base lines; an insertion is the empty range at its
    // place. Touching counts: a merge cannot keep the two apart either.
    ra.iter()
        .any(|&(s1, e1)| rb.iter().any(|&(s2, e2)| s1 <= e2 && s2 <= e1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(outcome: MergeOutcome) -> Vec<u8> {
        match outcome {
            MergeOutcome::Clean(bytes) => bytes,
            other => panic!("expected a clean merge, got {other:?}"),
        }
    }

    fn conflict(outcome: MergeOutcome) -> (String, usize) {
        match outcome {
            MergeOutcome::Conflict {
                merged_with_markers,
                hunks,
            } => (
                String::from_utf8(merged_with_markers).expect("test inputs are UTF-8"),
                hunks,
            ),
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn overlapping_changes_are_told_even_when_identical() {
        let base = b"a\nb\nc\nd\ne\nf\ng\n";
        // The same deletion on both sides: clean for a merge, an overlap here.
        assert!(changes_overlap(
            base,
            b"a\nb\nd\ne\nf\ng\n",
            b"a\nb\nd\ne\nf\nG\n"
        ));
        // Far apart: no overlap.
        assert!(!changes_overlap(
            base,
            b"A\nb\nc\nd\ne\nf\ng\n",
            b"a\nb\nc\nd\ne\nf\nG\n"
        ));
        // Insertions at the same place.
        assert!(changes_overlap(
            base,
            b"a\nx\nb\nc\nd\ne\nf\ng\n",
            b"a\ny\nb\nc\nd\ne\nf\ng\n"
        ));
        assert!(!changes_overlap(base, base, b"A\nb\nc\nd\ne\nf\ng\n"));
    }

    #[test]
    fn undo_without_user_edits_returns_before_byte_for_byte() {
        let before = b"one\r\ntwo\nthree";
        let after = b"one\r\nTWO\nthree\nfour\n";
        assert_eq!(clean(undo_patch(before, after, after).unwrap()), before);
    }

    #[test]
    fn undo_takes_the_merge_path_when_the_file_differs_from_after() {
        // Same as above but with a user edit far away, so libgit2 really runs.
        let before = b"a\nb\nc\nd\ne\nf\n";
        let after = b"a\nB\nc\nd\ne\nf\n";
        let current = b"a\nB\nc\nd\ne\nF\n";
        assert_eq!(
            clean(undo_patch(before, after, current).unwrap()),
            b"a\nb\nc\nd\ne\nF\n"
        );
    }

    #[test]
    fn user_edit_far_from_the_agent_hunk_survives() {
        let before = b"fn a() {}\n\nfn b() {}\n\nfn c() {}\n";
        let after = b"fn a() { agent(); }\n\nfn b() {}\n\nfn c() {}\n";
        let current = b"fn a() { agent(); }\n\nfn b() {}\n\nfn c() { user(); }\n";
        let merged = clean(undo_patch(before, after, current).unwrap());
        assert_eq!(merged, b"fn a() {}\n\nfn b() {}\n\nfn c() { user(); }\n");
    }

    #[test]
    fn overlapping_edit_gives_diff3_markers() {
        let before = b"a\nb\nc\n";
        let after = b"a\nagent\nc\n";
        let current = b"a\nuser\nc\n";
        let (merged, hunks) = conflict(undo_patch(before, after, current).unwrap());
        assert_eq!(hunks, 1);
        assert_eq!(
            merged,
            "a\n<<<<<<< current\nuser\n||||||| agent\nagent\n=======\nb\n>>>>>>> before\nc\n"
        );
    }

    #[test]
    fn markers_outgrow_marker_like_lines_in_the_file() {
        let before = b"x\n=======\n<<<<<<<<< nine\ny\n";
        let after = b"x\n=======\n<<<<<<<<< nine\nagent\n";
        let current = b"x\n=======\n<<<<<<<<< nine\nuser\n";
        let input = MergeInput {
            ancestor: after,
            ours: current,
            theirs: before,
        };
        assert_eq!(marker_size(&input), 10);
        let (merged, hunks) = conflict(undo_patch(before, after, current).unwrap());
        assert_eq!(hunks, 1);
        assert!(
            merged.contains("\n<<<<<<<<<< current\nuser\n||||||||||"),
            "{merged}"
        );
    }

    #[test]
    fn crlf_bytes_are_preserved() {
        let before = b"a\r\nb\r\nc\r\nd\r\ne\r\n";
        let after = b"a\r\nB\r\nc\r\nd\r\ne\r\n";
        let current = b"a\r\nB\r\nc\r\nd\r\nE\r\n";
        assert_eq!(
            clean(undo_patch(before, after, current).unwrap()),
            b"a\r\nb\r\nc\r\nd\r\nE\r\n"
        );

        let (merged, _) =
            conflict(undo_patch(b"a\r\nb\r\n", b"a\r\nx\r\n", b"a\r\ny\r\n").unwrap());
        assert_eq!(
            merged,
            "a\r\n<<<<<<< current\r\ny\r\n||||||| agent\r\nx\r\n=======\r\nb\r\n>>>>>>> before\r\n"
        );
    }

    #[test]
    fn missing_final_newline_is_preserved() {
        let before = b"a\nb\nc\nd\ne";
        let after = b"a\nB\nc\nd\ne";
        let current = b"a\nB\nc\nd\nE";
        assert_eq!(
            clean(undo_patch(before, after, current).unwrap()),
            b"a\nb\nc\nd\nE"
        );

        // The agent added the final newline; the user edited elsewhere.
        let after = b"a\nb\nc\nd\ne\n";
        let current = b"A\nb\nc\nd\ne\n";
        assert_eq!(
            clean(undo_patch(before, after, current).unwrap()),
            b"A\nb\nc\nd\ne"
        );
    }

    #[test]
    fn empty_file_versus_content() {
        // The agent filled an empty file; nobody touched it since.
        assert_eq!(clean(undo_patch(b"", b"new\n", b"new\n").unwrap()), b"");
        // The agent emptied a file; the user then wrote into it: both sides start from empty.
        let (merged, hunks) = conflict(undo_patch(b"old\n", b"", b"user\n").unwrap());
        assert_eq!(hunks, 1);
        assert_eq!(
            merged,
            "<<<<<<< current\nuser\n||||||| agent\n=======\nold\n>>>>>>> before\n"
        );
        // The user emptied the file the agent edited: the empty side keeps its label.
        let (merged, _) = conflict(undo_patch(b"old\n", b"new\n", b"").unwrap());
        assert_eq!(
            merged,
            "<<<<<<< current\n||||||| agent\nnew\n=======\nold\n>>>>>>> before\n"
        );
        // The agent filled an empty file; the user added a line after the agent's.
        let (merged, _) = conflict(undo_patch(b"", b"a\n", b"a\nuser\n").unwrap());
        assert_eq!(
            merged,
            "<<<<<<< current\na\nuser\n||||||| agent\na\n=======\n>>>>>>> before\n"
        );
        // The agent filled an empty file; the user then emptied it: both sides agree.
        assert_eq!(clean(undo_patch(b"", b"agent\n", b"").unwrap()), b"");
    }

    #[test]
    fn binary_contents_are_not_merged() {
        assert!(is_binary(b"a\0b"));
        assert!(!is_binary(b"text\n"));
        let mut late_nul = vec![b'a'; BINARY_SNIFF_LEN];
        late_nul.push(0);
        assert!(
            !is_binary(&late_nul),
            "git only looks at the first 8000 bytes"
        );

        let outcome = undo_patch(b"a\0\n", b"b\0\n", b"c\0\n").unwrap();
        assert_eq!(outcome, MergeOutcome::Binary);
        let input = MergeInput {
            ancestor: b"text\n",
            ours: b"bin\0",
            theirs: b"text\n",
        };
        assert_eq!(merge3(&input, &Labels::UNDO).unwrap(), MergeOutcome::Binary);
        // An untouched binary file is still restored exactly (RELIABILITY F41).
        assert_eq!(clean(undo_patch(b"a\0", b"b\0", b"b\0").unwrap()), b"a\0");
    }

    #[test]
    fn identical_changes_on_both_sides_merge_to_that_change() {
        let base = b"a\nb\nc\n";
        for x in [&b"a\nB\nc\n"[..], b"", b"a\nb\nc", b"a\r\nb\nc\n", b"z\n"] {
            let input = MergeInput {
                ancestor: base,
                ours: x,
                theirs: x,
            };
            assert_eq!(clean(merge3(&input, &Labels::UNDO).unwrap()), x);
        }
    }

    #[test]
    fn labels_with_line_breaks_are_refused() {
        let labels = Labels {
            ours: "a\nb",
            ..Labels::UNDO
        };
        let input = MergeInput {
            ancestor: b"a\n",
            ours: b"b\n",
            theirs: b"c\n",
        };
        assert!(matches!(
            merge3(&input, &labels),
            Err(MergeError::InvalidLabel(_))
        ));
    }
}
