//! JUnit XML for `ckpt scenario run --junit FILE`: one `testsuite`, one
//! `testcase` per scenario, a `failure` with its message for each that
//! failed (the shape CI systems and JUnit-reading libraries expect).

use std::fmt::Write;

/// One scenario's result as the report shows it.
#[derive(Debug, Clone)]
pub struct Case {
    /// The scenario's name.
    pub name: String,
    /// Its file, as given.
    pub file: String,
    /// Seconds it took.
    pub seconds: f64,
    /// The failure message, if it failed.
    pub failure: Option<String>,
}

/// The report's XML.
pub fn render(suite: &str, cases: &[Case]) -> String {
    let failures = cases.iter().filter(|c| c.failure.is_some()).count();
    let total: f64 = cases.iter().map(|c| c.seconds).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" time=\"{total:.3}\">",
        esc(suite),
        cases.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{total:.3}\">",
        esc(suite),
        cases.len()
    );
    for c in cases {
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" time=\"{:.3}\"",
            esc(&c.name),
            esc(suite),
            esc(&c.file),
            c.seconds
        );
        match &c.failure {
            None => out.push_str("/>\n"),
            Some(m) => {
                let first = m.lines().next().unwrap_or("");
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\" type=\"expectation\">{}</failure>\n    </testcase>",
                    esc(first),
                    esc(m)
                );
            }
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// Escapes text for an XML attribute or element; drops characters XML 1.0 cannot hold.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                out.push('\u{fffd}');
            }
            c => out.push(c),
        }
    }
    out
}
