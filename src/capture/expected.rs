//! Predicting a file's text after a call from its [`Expected`], and undoing edits to recover the
//! text before one (Cursor reports edits only after the fact).

use super::apply_patch::apply_chunks;
use super::{Expected, Occurrences, Replacement};

/// Returns the text `exp` leaves behind when applied to `before`, or `None` if the tool would
/// refuse (an edit's old text missing, or found a different number of times than required, or
/// equal to the new text; a patch chunk that does not match).
///
/// `before` is `""` for a file that does not exist; an edit with an empty old text applies only
/// to such an empty before (that is how `Edit` and `replace` create files). Edits written with
/// `\n` that only match a CRLF file's LF-normalised text are applied to that text and the result
/// turned back to CRLF, since edit tools compare line endings loosely.
pub fn apply_expected(before: &str, exp: &Expected) -> Option<String> {
    match exp {
        Expected::Content(text) => Some(text.clone()),
        Expected::Edits(edits) => with_crlf_fallback(before, edits, apply_edits),
        Expected::Patch(chunks) => apply_chunks(before, chunks),
    }
}

/// Returns the text before `exp` given the text `after` it, undoing edits last to first; each
/// edit's new text must occur exactly once. `None` for whole-content writes and patches, for
/// `replace_all` edits and for edits whose new text is missing, repeated or empty.
pub fn reverse_expected(after: &str, exp: &Expected) -> Option<String> {
    match exp {
        Expected::Edits(edits) => with_crlf_fallback(after, edits, unapply_edits),
        Expected::Content(_) | Expected::Patch(_) => None,
    }
}

/// Runs `f` on `text`; if that fails on a CRLF file and no edit contains `\r`, runs it on the
/// LF-normalised text and converts the result back to CRLF.
fn with_crlf_fallback(
    text: &str,
    edits: &[Replacement],
    f: fn(&str, &[Replacement]) -> Option<String>,
) -> Option<String> {
    if let Some(out) = f(text, edits) {
        return Some(out);
    }
    let crlf = text.matches("\r\n").count();
    let uniform = crlf > 0 && crlf == text.matches('\n').count();
    let clean = edits
        .iter()
        .all(|e| !e.old.contains('\r') && !e.new.contains('\r'));
    if !uniform || !clean {
        return None;
    }
    f(&text.replace("\r\n", "\n"), edits).map(|out| out.replace('\n', "\r\n"))
}

fn apply_edits(before: &str, edits: &[Replacement]) -> Option<String> {
    let mut text = before.to_string();
    for edit in edits {
        text = apply_one(&text, edit)?;
    }
    Some(text)
}

fn apply_one(text: &str, edit: &Replacement) -> Option<String> {
    if edit.old == edit.new {
        return None;
    }
    if edit.old.is_empty() {
        return text.is_empty().then(|| edit.new.clone());
    }
    let found = text.matches(edit.old.as_str()).count();
    let ok = match edit.count {
        Occurrences::All => found > 0,
        Occurrences::Exactly(n) => u32::try_from(found).is_ok_and(|found| found == n),
    };
    ok.then(|| text.replace(edit.old.as_str(), &edit.new))
}

fn unapply_edits(after: &str, edits: &[Replacement]) -> Option<String> {
    let mut text = after.to_string();
    for edit in edits.iter().rev() {
        if edit.count != Occurrences::Exactly(1) || edit.new.is_empty() || edit.old == edit.new {
            return None;
        }
        if text.matches(edit.new.as_str()).count() != 1 {
            return None;
        }
        text = text.replacen(edit.new.as_str(), &edit.old, 1);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn once(old: &str, new: &str) -> Replacement {
        Replacement {
            old: old.into(),
            new: new.into(),
            count: Occurrences::Exactly(1),
        }
    }

    fn edits(v: Vec<Replacement>) -> Expected {
        Expected::Edits(v)
    }

    #[test]
    fn edit_replaces_a_unique_match() {
        let exp = edits(vec![once("b", "B")]);
        assert_eq!(apply_expected("abc", &exp).as_deref(), Some("aBc"));
    }

    #[test]
    fn edit_whose_old_text_is_missing_predicts_nothing() {
        assert_eq!(apply_expected("abc", &edits(vec![once("x", "y")])), None);
    }

    #[test]
    fn edit_found_twice_without_replace_all_predicts_nothing() {
        assert_eq!(apply_expected("b b", &edits(vec![once("b", "B")])), None);
        let all = Replacement {
            old: "b".into(),
            new: "B".into(),
            count: Occurrences::All,
        };
        assert_eq!(
            apply_expected("b b", &edits(vec![all])).as_deref(),
            Some("B B")
        );
    }

    #[test]
    fn replace_all_needs_at_least_one_match() {
        let all = Replacement {
            old: "z".into(),
            new: "Z".into(),
            count: Occurrences::All,
        };
        assert_eq!(apply_expected("b b", &edits(vec![all])), None);
    }

    #[test]
    fn expected_replacements_must_match_exactly() {
        let two = Replacement {
            old: "b".into(),
            new: "B".into(),
            count: Occurrences::Exactly(2),
        };
        assert_eq!(
            apply_expected("b b", &edits(vec![two.clone()])).as_deref(),
            Some("B B")
        );
        assert_eq!(apply_expected("b b b", &edits(vec![two.clone()])), None);
        assert_eq!(apply_expected("b", &edits(vec![two])), None);
    }

    #[test]
    fn edits_apply_in_order_on_the_evolving_text() {
        let exp = edits(vec![once("a", "xy"), once("xy", "z")]);
        assert_eq!(apply_expected("a-", &exp).as_deref(), Some("z-"));
        let failing_second = edits(vec![once("a", "b"), once("a", "c")]);
        assert_eq!(apply_expected("a", &failing_second), None);
    }

    #[test]
    fn matches_do_not_overlap() {
        // "aa" occurs once without overlap in "aaa" (Claude counts with split, not overlapping).
        assert_eq!(
            apply_expected("aaa", &edits(vec![once("aa", "b")])).as_deref(),
            Some("ba")
        );
    }

    #[test]
    fn no_op_edit_predicts_nothing() {
        assert_eq!(apply_expected("abc", &edits(vec![once("b", "b")])), None);
    }

    #[test]
    fn empty_old_text_only_creates_a_file() {
        let create = edits(vec![once("", "hello\n")]);
        assert_eq!(apply_expected("", &create).as_deref(), Some("hello\n"));
        assert_eq!(apply_expected("already\n", &create), None);
    }

    #[test]
    fn empty_file_has_nothing_to_replace() {
        assert_eq!(apply_expected("", &edits(vec![once("a", "b")])), None);
        assert_eq!(
            apply_expected("", &Expected::Content(String::new())).as_deref(),
            Some("")
        );
    }

    #[test]
    fn write_ignores_the_before_text() {
        let exp = Expected::Content("new\r\n".into());
        assert_eq!(apply_expected("old", &exp).as_deref(), Some("new\r\n"));
    }

    #[test]
    fn crlf_file_takes_an_lf_edit_and_stays_crlf() {
        let exp = edits(vec![once("a\nb", "a\nB\nc")]);
        assert_eq!(
            apply_expected("a\r\nb\r\n", &exp).as_deref(),
            Some("a\r\nB\r\nc\r\n")
        );
        // An exact CRLF edit applies as written.
        let exact = edits(vec![once("a\r\nb", "x")]);
        assert_eq!(
            apply_expected("a\r\nb\r\n", &exact).as_deref(),
            Some("x\r\n")
        );
    }

    #[test]
    fn mixed_line_endings_are_not_normalised() {
        let exp = edits(vec![once("a\nb", "x")]);
        assert_eq!(apply_expected("a\r\nb\nc\r\n", &exp), None);
    }

    #[test]
    fn reverse_undoes_edits_last_to_first() {
        let exp = edits(vec![once("one", "1"), once("two", "2")]);
        let after = apply_expected("one two", &exp).expect("edits apply");
        assert_eq!(reverse_expected(&after, &exp).as_deref(), Some("one two"));
    }

    #[test]
    fn reverse_refuses_ambiguous_or_lossy_edits() {
        assert_eq!(
            reverse_expected("1 1", &edits(vec![once("one", "1")])),
            None
        );
        assert_eq!(reverse_expected("abc", &edits(vec![once("x", "")])), None);
        let all = Replacement {
            old: "a".into(),
            new: "b".into(),
            count: Occurrences::All,
        };
        assert_eq!(reverse_expected("b", &edits(vec![all])), None);
        assert_eq!(reverse_expected("x", &Expected::Content("x".into())), None);
    }
}
