//! Codex's `apply_patch` format: parsing the patch text and predicting an updated file.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: <path>          then lines starting with `+`
//! *** Delete File: <path>
//! *** Update File: <path>
//! *** Move to: <path>           optional, right after Update File
//! @@ <context line>             or a bare `@@`; the first chunk may omit it
//!  context / -removed / +added  lines; `*** End of File` anchors a chunk at the end
//! *** End Patch
//! ```
//!
//! The rules follow Codex's own parser (`codex-rs/apply-patch`): markers may carry surrounding
//! whitespace, the whole patch may be wrapped in a `<<'EOF'` … `EOF` heredoc, and update chunks
//! are located with exact, then trailing-whitespace-blind, then whitespace-blind, then
//! punctuation-normalised line matching.

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hunk {
    /// `*** Add File:` with its full contents (each `+` line plus a newline).
    Add { path: String, contents: String },
    /// `*** Delete File:`.
    Delete { path: String },
    /// `*** Update File:`, optionally renamed by `*** Move to:`.
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<PatchChunk>,
    },
}

/// One `@@` chunk of an `*** Update File:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchChunk {
    /// The `@@ <line>` text that narrows where the chunk applies, if any.
    pub context: Option<String>,
    /// The lines the chunk replaces (context and `-` lines, without the marker).
    pub old: Vec<String>,
    /// The lines it puts in their place (context and `+` lines, without the marker).
    pub new: Vec<String>,
    /// `*** End of File` followed: `old` sits at the end of the file.
    pub end_of_file: bool,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE_TO: &str = "*** Move to: ";
const EOF_MARKER: &str = "*** End of File";

/// Parses patch text into its file operations; the error says what is malformed.
pub(crate) fn parse_patch(text: &str) -> Result<Vec<Hunk>, String> {
    let lines = split_lines(text.trim());
    let body = body_lines(&lines)?;
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let first = body[i].trim();
        i += 1;
        if let Some(path) = first.strip_prefix(ADD) {
            let added = body[i..].iter().take_while(|l| l.starts_with('+'));
            let mut contents = String::with_capacity(added.map(|l| l.len()).sum());
            while let Some(line) = body.get(i).and_then(|l| l.strip_prefix('+')) {
                contents.push_str(line);
                contents.push('\n');
                i += 1;
            }
            hunks.push(Hunk::Add {
                path: path.to_string(),
                contents,
            });
        } else if let Some(path) = first.strip_prefix(DELETE) {
            hunks.push(Hunk::Delete {
                path: path.to_string(),
            });
        } else if let Some(path) = first.strip_prefix(UPDATE) {
            let move_to = body
                .get(i)
                .and_then(|l| l.strip_prefix(MOVE_TO))
                .map(str::to_string);
            if move_to.is_some() {
                i += 1;
            }
            let mut chunks = Vec::new();
            while let Some(line) = body.get(i) {
                if line.trim().is_empty() {
                    i += 1;
                    continue;
                }
                if line.starts_with('*') {
                    break;
                }
                let (chunk, used) = parse_chunk(&body[i..], chunks.is_empty())?;
                chunks.push(chunk);
                i += used;
            }
            if chunks.is_empty() {
                return Err(format!("update of `{path}` has no chunks"));
            }
            hunks.push(Hunk::Update {
                path: path.to_string(),
                move_to,
                chunks,
            });
        } else {
            return Err(format!("`{first}` is not a hunk header"));
        }
    }
    Ok(hunks)
}

/// Splits like `str::lines` (at `\n`, dropping a `\r` before it) with a plain byte scan, which
/// is several times faster on patches of many short lines.
fn split_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(text.bytes().filter(|b| *b == b'\n').count() + 1);
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            // `\n` is ASCII, so both ends are character boundaries.
            let line = text.get(start..i).unwrap_or_default();
            out.push(line.strip_suffix('\r').unwrap_or(line));
            start = i + 1;
        }
    }
    if start < text.len() {
        out.push(text.get(start..).unwrap_or_default());
    }
    out
}

/// Checks the begin and end markers (also inside a heredoc) and returns the lines between.
fn body_lines<'a>(lines: &'a [&'a str]) -> Result<&'a [&'a str], String> {
    fn strict<'a>(lines: &'a [&'a str]) -> Result<&'a [&'a str], String> {
        match lines {
            [first, body @ .., last] if first.trim() == BEGIN && last.trim() == END => Ok(body),
            [first, ..] if first.trim() == BEGIN => Err(format!("the last line is not `{END}`")),
            _ => Err(format!("the first line is not `{BEGIN}`")),
        }
    }
    match strict(lines) {
        Ok(body) => Ok(body),
        Err(e) => match lines {
            [first, inner @ .., last]
                if matches!(*first, "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
                    && last.ends_with("EOF")
                    && inner.len() >= 2 =>
            {
                strict(inner)
            }
            _ => Err(e),
        },
    }
}

/// Parses one chunk at the start of `lines`; returns it and the number of lines used.
fn parse_chunk(lines: &[&str], allow_missing_context: bool) -> Result<(PatchChunk, usize), String> {
    let (context, start) = match lines.first() {
        Some(&"@@") => (None, 1),
        Some(line) if line.starts_with("@@ ") => (Some(line[3..].to_string()), 1),
        Some(line) if !allow_missing_context => {
            return Err(format!("expected `@@` before `{line}`"));
        }
        _ => (None, 0),
    };
    let mut chunk = PatchChunk {
        context,
        old: Vec::new(),
        new: Vec::new(),
        end_of_file: false,
    };
    let mut used = 0;
    for line in lines.iter().skip(start) {
        if *line == EOF_MARKER {
            if used == 0 {
                return Err("a chunk has no lines".to_string());
            }
            chunk.end_of_file = true;
            used += 1;
            break;
        }
        let mut chars = line.chars();
        match chars.next() {
            None => {
                chunk.old.push(String::new());
                chunk.new.push(String::new());
            }
            Some(' ') => {
                chunk.old.push(chars.as_str().to_string());
                chunk.new.push(chars.as_str().to_string());
            }
            Some('+') => chunk.new.push(chars.as_str().to_string()),
            Some('-') => chunk.old.push(chars.as_str().to_string()),
            Some(_) if used == 0 => {
                return Err(format!("`{line}` does not start with ` `, `+` or `-`"));
            }
            Some(_) => break,
        }
        used += 1;
    }
    if used == 0 {
        return Err("a chunk has no lines".to_string());
    }
    Ok((chunk, start + used))
}

/// Returns `before` with `chunks` applied the way Codex applies them, or `None` if a chunk's
/// context or old lines cannot be found.
///
/// Like Codex, the result always ends with a newline, and lines are split on `\n` only (a CRLF
/// file's `\r` stays on the lines that are kept; replaced lines get the patch's text).
pub(crate) fn apply_chunks(before: &str, chunks: &[PatchChunk]) -> Option<String> {
    let mut lines: Vec<String> = before.split('\n').map(str::to_string).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, &[String])> = Vec::new();
    let mut from = 0;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            from = seek(&lines, std::slice::from_ref(context), from, false)? + 1;
        }
        if chunk.old.is_empty() {
            // Pure addition: at the end, before a final empty line if there is one.
            let at = if lines.last().is_some_and(String::is_empty) {
                lines.len() - 1
            } else {
                lines.len()
            };
            replacements.push((at, 0, &chunk.new));
            continue;
        }
        let mut old: &[String] = &chunk.old;
        let mut new: &[String] = &chunk.new;
        let mut found = seek(&lines, old, from, chunk.end_of_file);
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            // The trailing empty line stands for the file's final newline: retry without it.
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, from, chunk.end_of_file);
        }
        let at = found?;
        replacements.push((at, old.len(), new));
        from = at + old.len();
    }
    replacements.sort_by_key(|r| r.0);
    for (at, len, new) in replacements.into_iter().rev() {
        let at = at.min(lines.len());
        let end = (at + len).min(lines.len());
        lines.splice(at..end, new.iter().cloned());
    }
    if !lines.last().is_some_and(String::is_empty) {
        lines.push(String::new());
    }
    Some(lines.join("\n"))
}

/// Finds `pattern` in `lines` at or after `from` (at the end first when `eof`), trying exact,
/// then trailing-whitespace-blind, then whitespace-blind, then punctuation-normalised matches.
fn seek(lines: &[String], pattern: &[String], from: usize, eof: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(from);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pattern.len();
    let start = if eof { last } else { from };
    if start > last {
        return None;
    }
    let same = |eq: &dyn Fn(&str, &str) -> bool| {
        (start..=last).find(|&i| pattern.iter().zip(&lines[i..]).all(|(p, l)| eq(l, p)))
    };
    same(&|a, b| a == b)
        .or_else(|| same(&|a, b| a.trim_end() == b.trim_end()))
        .or_else(|| same(&|a, b| a.trim() == b.trim()))
        .or_else(|| same(&|a, b| normalise(a) == normalise(b)))
}

/// Trims and maps typographic dashes, quotes and spaces to ASCII.
fn normalise(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks_of(patch: &str) -> Vec<PatchChunk> {
        match parse_patch(patch).expect("test patch parses").remove(0) {
            Hunk::Update { chunks, .. } => chunks,
            other => panic!("expected an update, got {other:?}"),
        }
    }

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_add_delete_update_and_move() {
        let hunks = parse_patch(
            "*** Begin Patch\n*** Add File: a/new.txt\n+one\n+\n+two\n*** Delete File: gone.txt\n\
             *** Update File: old.rs\n*** Move to: new.rs\n@@ fn f() {\n-    1\n+    2\n }\n\
             *** End Patch\n",
        )
        .expect("patch parses");
        assert_eq!(
            hunks,
            vec![
                Hunk::Add {
                    path: "a/new.txt".into(),
                    contents: "one\n\ntwo\n".into()
                },
                Hunk::Delete {
                    path: "gone.txt".into()
                },
                Hunk::Update {
                    path: "old.rs".into(),
                    move_to: Some("new.rs".into()),
                    chunks: vec![PatchChunk {
                        context: Some("fn f() {".into()),
                        old: lines(&["    1", "}"]),
                        new: lines(&["    2", "}"]),
                        end_of_file: false,
                    }],
                },
            ]
        );
    }

    #[test]
    fn tolerates_padding_heredoc_and_crlf() {
        let padded = "  *** Begin Patch \n *** Delete File: x.txt \n*** End Patch  ";
        assert_eq!(
            parse_patch(padded),
            Ok(vec![Hunk::Delete {
                path: "x.txt".into()
            }])
        );
        let heredoc = "<<'EOF'\n*** Begin Patch\n*** Delete File: x.txt\n*** End Patch\nEOF\n";
        assert_eq!(
            parse_patch(heredoc),
            Ok(vec![Hunk::Delete {
                path: "x.txt".into()
            }])
        );
        let crlf = "*** Begin Patch\r\n*** Add File: x.txt\r\n+hi\r\n*** End Patch\r\n";
        assert_eq!(
            parse_patch(crlf),
            Ok(vec![Hunk::Add {
                path: "x.txt".into(),
                contents: "hi\n".into()
            }])
        );
    }

    #[test]
    fn splits_lines_like_str_lines() {
        for text in [
            "",
            "a",
            "a\n",
            "a\r\nb",
            "a\n\nb\n",
            "\r\n",
            "a\rb\r",
            "ü\nß\r\n",
        ] {
            assert_eq!(
                split_lines(text),
                text.lines().collect::<Vec<_>>(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn first_chunk_may_omit_the_context_marker() {
        let chunks =
            chunks_of("*** Begin Patch\n*** Update File: f.py\n import os\n+x = 1\n*** End Patch");
        assert_eq!(chunks[0].context, None);
        assert_eq!(chunks[0].old, lines(&["import os"]));
        assert_eq!(chunks[0].new, lines(&["import os", "x = 1"]));
    }

    #[test]
    fn rejects_malformed_patches() {
        for bad in [
            "",
            "hello",
            "*** Begin Patch\n*** Add File: x\n+x",
            "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch",
            "*** Begin Patch\n*** Update File: x\n*** End Patch",
            "*** Begin Patch\n*** Update File: x\n@@\n*** End Patch",
            "*** Begin Patch\n*** Update File: x\n@@\n+a\n@@\n*** End Patch",
            "*** Begin Patch\n*** Update File: x\n@@\n*** End of File\n*** End Patch",
            "*** Begin Patch\n*** Update File: x\n+a\nbogus\n*** End Patch",
            "*** Begin Patch\n*** Update File: x\n@@\n+a\n-b\nno marker\n*** End Patch",
        ] {
            // The last one is valid in Codex too: "no marker" starts the next hunk, which fails.
            assert!(parse_patch(bad).is_err(), "{bad:?} must not parse");
        }
        let empty = "*** Begin Patch\n*** End Patch";
        assert_eq!(
            parse_patch(empty),
            Ok(Vec::new()),
            "an empty patch is valid and changes nothing"
        );
    }

    #[test]
    fn applies_chunks_like_codex() {
        let chunks =
            chunks_of("*** Begin Patch\n*** Update File: f\n@@\n foo\n-bar\n+baz\n*** End Patch");
        assert_eq!(
            apply_chunks("foo\nbar\n", &chunks).as_deref(),
            Some("foo\nbaz\n")
        );
        // No final newline before: Codex adds one.
        assert_eq!(
            apply_chunks("foo\nbar", &chunks).as_deref(),
            Some("foo\nbaz\n")
        );

        let two = chunks_of(
            "*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n@@\n c\n d\n-e\n+E\n@@\n f\n+g\n\
             *** End of File\n*** End Patch",
        );
        assert_eq!(
            apply_chunks("a\nb\nc\nd\ne\nf\n", &two).as_deref(),
            Some("a\nB\nc\nd\nE\nf\ng\n")
        );

        let append = chunks_of(
            "*** Begin Patch\n*** Update File: f\n@@\n+quux\n*** End of File\n*** End Patch",
        );
        assert_eq!(
            apply_chunks("foo\nbar\n", &append).as_deref(),
            Some("foo\nbar\nquux\n")
        );
    }

    #[test]
    fn context_narrows_where_a_chunk_applies() {
        let chunks = chunks_of(
            "*** Begin Patch\n*** Update File: f\n@@ fn two() {\n-    x\n+    y\n*** End Patch",
        );
        let before = "fn one() {\n    x\n}\nfn two() {\n    x\n}\n";
        assert_eq!(
            apply_chunks(before, &chunks).as_deref(),
            Some("fn one() {\n    x\n}\nfn two() {\n    y\n}\n")
        );
    }

    #[test]
    fn fuzzy_matching_finds_whitespace_and_unicode_variants() {
        let chunks =
            chunks_of("*** Begin Patch\n*** Update File: f\n@@\n-a - b\n+c\n*** End Patch");
        assert_eq!(
            apply_chunks("  a \u{2013} b\t\n", &chunks).as_deref(),
            Some("c\n")
        );
    }

    #[test]
    fn missing_context_or_lines_predict_nothing() {
        let ctx =
            chunks_of("*** Begin Patch\n*** Update File: f\n@@ nowhere\n-bar\n+baz\n*** End Patch");
        assert_eq!(apply_chunks("foo\nbar\n", &ctx), None);
        let old =
            chunks_of("*** Begin Patch\n*** Update File: f\n@@\n-nothing\n+baz\n*** End Patch");
        assert_eq!(apply_chunks("foo\nbar\n", &old), None);
        let long =
            chunks_of("*** Begin Patch\n*** Update File: f\n@@\n-a\n-b\n-c\n+d\n*** End Patch");
        assert_eq!(apply_chunks("a\n", &long), None);
        assert_eq!(apply_chunks("", &old), None);
    }
}
