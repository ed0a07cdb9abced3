//! Secrets redaction (RELIABILITY T24): tokens and keys in free text are
//! replaced by `«redacted:<rule>:<sha8>»` before the text is written anywhere
//! under `.agent-runtime/` other than the content stores, or printed.
//!
//! # What is redacted, where
//!
//! Free text is text that came from outside and that ckpt only keeps to show
//! it again: a checkpoint's label (a prompt's first line, `-m`), a failed
//! call's `error`, a session entry's payload, an action outcome's `error` /
//! `note` / `message`, `errors.jsonl` / `trace.jsonl` fields, a
//! compensation's captured output, `RECOVERY.md`, and everything the CLI
//! prints except file contents. [`record_body`] is the ledger's choke point:
//! `Ledger` calls it on every draft before serialising it, so the line's hash
//! is computed over the redacted bytes and the JSON stays valid (strings are
//! redacted before they are escaped, never in serialised JSON).
//!
//! Never redacted: file contents (blobs, `artifacts/patches/*.diff`,
//! originals, `ckpt diff` output) — they must stay byte-exact to be restored
//! or `git apply`'d; identifiers (session, call, tool, entry, action ids),
//! hashes and paths, which ckpt and its users match on; and a compensation's
//! argv and idempotency key, which are executed from the ledger (only their
//! display is redacted).
//!
//! # Rules
//!
//! A small gitleaks-style set ([`RULES`]), applied one after another, most
//! specific first. The `<sha8>` is the first 8 hex digits of the sha256 of
//! the secret itself: the whole match, or for `bearer-token` the token after
//! `Bearer`, for `env-assignment` the value after `=` (quotes excluded) —
//! enough to tell two redacted secrets apart or to check a known one, not to
//! recover it. A marker never matches a rule, so redacting twice changes
//! nothing.
//!
//! # Cost
//!
//! Strings shorter than [`MIN_LEN`] are returned untouched; longer ones go
//! through one [`RegexSet`] scan (a lazy DFA, linear time); only the rules it
//! reports are run again to replace.

use std::borrow::Cow;
use std::sync::{LazyLock, OnceLock};

use regex::bytes::{Captures, Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use serde_json::Value;

use crate::hash::ContentHash;
use crate::record::{Body, EntryType};

/// Text shorter than this many bytes is never scanned (`TOKEN=x` is 7).
pub const MIN_LEN: usize = 7;

/// The opening of every marker; text holding it is never redacted again.
pub const MARKER_OPEN: &str = "«redacted:";

/// One rule: a name (used in the marker) and a pattern. The secret is the
/// first of the groups `s`, `s2`, `s3` that took part in the match, else the
/// whole match; only the secret is replaced, the rest of the match is kept.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The name written in the marker (`github-pat`, `jwt`, …).
    pub name: &'static str,
    /// The pattern (bytes, ASCII: no Unicode classes).
    pub pattern: &'static str,
    /// Checks a candidate secret; `false` keeps it (a placeholder, a number).
    check: fn(&[u8]) -> bool,
}

fn always(_: &[u8]) -> bool {
    true
}

/// Values of `KEY=value` that are not secrets: empty, a variable or template
/// reference, a short number, a boolean word, or a marker already.
fn env_value(v: &[u8]) -> bool {
    if v.is_empty() || matches!(v[0], b'$' | b'{' | b'<' | b'%') {
        return false;
    }
    if v.len() < 8 && v.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let lower = v.to_ascii_lowercase();
    if matches!(
        lower.as_slice(),
        b"true" | b"false" | b"null" | b"none" | b"yes" | b"no" | b"on" | b"off"
    ) {
        return false;
    }
    memchr::memmem::find(v, MARKER_OPEN.as_bytes()).is_none()
}

/// The rules, in the order they are applied (most specific first).
pub const RULES: &[Rule] = &[
    Rule {
        // A whole PEM block; or, cut short (no END line), the BEGIN line and
        // the base64 lines after it.
        name: "private-key",
        pattern: r"-----BEGIN[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)-----END[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----|-----BEGIN[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=\s\\:,-]*",
        check: always,
    },
    Rule {
        name: "jwt",
        pattern: r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        check: always,
    },
    Rule {
        name: "aws-access-key-id",
        pattern: r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
        check: always,
    },
    Rule {
        name: "github-pat",
        pattern: r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",
        check: always,
    },
    Rule {
        name: "github-fine-grained-pat",
        pattern: r"\bgithub_pat_[A-Za-z0-9_]{50,}\b",
        check: always,
    },
    Rule {
        name: "gitlab-pat",
        pattern: r"\bglpat-[A-Za-z0-9_-]{20,}",
        check: always,
    },
    Rule {
        name: "anthropic-api-key",
        pattern: r"\bsk-ant-[A-Za-z0-9_-]{20,}",
        check: always,
    },
    Rule {
        // Project/service/admin keys (`sk-proj-…`) and the older `sk-<48>`;
        // a run of letters and digits only, so kebab-case words never match.
        name: "openai-api-key",
        pattern: r"\bsk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}|\bsk-[A-Za-z0-9]{32,}\b",
        check: always,
    },
    Rule {
        name: "slack-token",
        pattern: r"\bxox[abeoprs]-[A-Za-z0-9-]{10,}",
        check: always,
    },
    Rule {
        // `Authorization: Bearer <token>` (also JSON-ish `"Authorization": "Bearer …"`);
        // the header and the word `Bearer` are kept.
        name: "bearer-token",
        pattern: r#"(?i)\bauthorization["']?\s*[:=]\s*["']?\s*bearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"#,
        check: always,
    },
    Rule {
        // `KEY=value` where a `_`-separated part of KEY is a secret word:
        // `DB_PASSWORD=…`, `export GITHUB_TOKEN="…"`, `API_KEY = '…'`, and in
        // any case without spaces around `=` (`--password=…`). Only the value
        // is replaced (quotes kept). Left alone: `max_tokens=…`, `TOKENIZER=…`,
        // `password == x`, code such as `let secret_key = f()`, `KEY=$VAR`.
        name: "env-assignment",
        pattern: r#"\b(?:(?:[A-Z0-9]+_)*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_KEY|ACCESS_KEY)(?:_[A-Z0-9]+)*[ \t]*=[ \t]*|(?i:(?:[a-z0-9]+_)*(?:secret|token|password|passwd|api_?key|private_key|access_key)(?:_[a-z0-9]+)*)=)(?:"(?P<s>[^"\r\n]*)"|'(?P<s2>[^'\r\n]*)'|(?P<s3>[^\s"'`=][^\s"'`]*))"#,
        check: env_value,
    },
];

/// The set finds which rules match (one pass); a rule's own regex, needed to
/// replace, is compiled the first time the set reports it.
struct Compiled {
    set: RegexSet,
    each: Vec<OnceLock<Regex>>,
}

impl Compiled {
    fn rule(&self, i: usize) -> &Regex {
        self.each[i].get_or_init(|| {
            // Unicode off, as for the set.
            RegexBuilder::new(RULES[i].pattern)
                .unicode(false)
                .build()
                .expect("the redaction rules compile")
        })
    }
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    // Unicode off: classes and `\b` are ASCII, `.` is any byte, so the rules
    // work on any bytes and every match starts and ends at an ASCII byte
    // (never inside a UTF-8 sequence).
    let set = RegexSetBuilder::new(RULES.iter().map(|r| r.pattern))
        .unicode(false)
        .build()
        .expect("the redaction rules compile");
    Compiled {
        set,
        each: RULES.iter().map(|_| OnceLock::new()).collect(),
    }
});

/// Returns the marker for `secret` found by rule `rule`.
pub fn marker(rule: &str, secret: &[u8]) -> String {
    format!(
        "{MARKER_OPEN}{rule}:{}»",
        &ContentHash::of(secret).hex()[..8]
    )
}

/// True when `text` may hold a secret (cheap; a `true` can still come to
/// nothing after the rules' own checks).
pub fn may_contain_secret(text: &[u8]) -> bool {
    text.len() >= MIN_LEN && PREFILTER.is_match(text) && COMPILED.set.is_match(text)
}

/// Redacts `text`; borrowed when nothing was found.
pub fn redact_bytes(text: &[u8]) -> Cow<'_, [u8]> {
    if text.len() < MIN_LEN || !PREFILTER.is_match(text) {
        return Cow::Borrowed(text);
    }
    let c = &*COMPILED;
    let hits = c.set.matches(text);
    if !hits.matched_any() {
        return Cow::Borrowed(text);
    }
    let mut cur: Cow<'_, [u8]> = Cow::Borrowed(text);
    for i in hits.iter() {
        if let Some(next) = apply(&RULES[i], c.rule(i), &cur) {
            cur = Cow::Owned(next);
        }
    }
    cur
}

/// Literals one of which every rule's match contains (compared ignoring
/// ASCII case, so a superset): text without any of them cannot hold a
/// secret. Building this takes microseconds; compiling the rule set about a
/// millisecond, which commands that print only ids and paths (a rollback's
/// table, every hook) never pay.
const NEEDLES: &[&str] = &[
    "private key",
    "eyj",
    "akia",
    "asia",
    "abia",
    "acca",
    "a3t",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "xox",
    "authorization",
    "secret",
    "token",
    "passw",
    "apikey",
    "api_key",
    "private_key",
    "access_key",
];

/// A non-contiguous NFA: built in ~60 µs here against ~200 µs for the DFA the
/// builder picks by default, and every process that appends a record builds
/// it once; the texts it scans are records and messages, where the DFA's
/// faster search (~1 µs against ~3 µs per 600 bytes) never wins that back.
static PREFILTER: LazyLock<aho_corasick::AhoCorasick> = LazyLock::new(|| {
    aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .kind(Some(aho_corasick::AhoCorasickKind::NoncontiguousNFA))
        .build(NEEDLES)
        .expect("literal needles always build")
});

/// Redacts `text`; borrowed when nothing was found.
pub fn redact_str(text: &str) -> Cow<'_, str> {
    match redact_bytes(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        // Matches start and end at ASCII bytes and markers are UTF-8, so this
        // is valid UTF-8; the lossy path is a guard, never taken.
        Cow::Owned(v) => Cow::Owned(
            String::from_utf8(v)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        ),
    }
}

/// Redacts `text` in place; returns whether anything changed.
pub fn redact_string(text: &mut String) -> bool {
    match redact_str(text) {
        Cow::Borrowed(_) => false,
        Cow::Owned(s) => {
            *text = s;
            true
        }
    }
}

/// One rule over `text`: `None` when it replaced nothing.
fn apply(rule: &Rule, re: &Regex, text: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut last = 0;
    for caps in re.captures_iter(text) {
        let whole = caps.get(0).expect("group 0 always takes part");
        let span = secret_span(&caps).unwrap_or((whole.start(), whole.end()));
        let secret = &text[span.0..span.1];
        if !(rule.check)(secret) {
            continue;
        }
        let o = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
        o.extend_from_slice(&text[last..span.0]);
        o.extend_from_slice(marker(rule.name, secret).as_bytes());
        last = span.1;
    }
    let mut o = out?;
    o.extend_from_slice(&text[last..]);
    Some(o)
}

fn secret_span(caps: &Captures<'_>) -> Option<(usize, usize)> {
    ["s", "s2", "s3"]
        .iter()
        .find_map(|g| caps.name(g))
        .map(|m| (m.start(), m.end()))
}

/// Redacts every string in `v` (object keys are kept); returns whether
/// anything changed.
pub fn redact_json(v: &mut Value) -> bool {
    match v {
        Value::String(s) => redact_string(s),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, x| redact_json(x) | changed),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |changed, x| redact_json(x) | changed),
        _ => false,
    }
}

/// True when a string anywhere in `v` may hold a secret.
pub fn json_may_contain_secret(v: &Value) -> bool {
    match v {
        Value::String(s) => may_contain_secret(s.as_bytes()),
        Value::Array(items) => items.iter().any(json_may_contain_secret),
        Value::Object(map) => map.values().any(json_may_contain_secret),
        _ => false,
    }
}

/// The keys of an action's outcome that hold free text.
const FREE_TEXT_KEYS: &[&str] = &["error", "note", "message"];

/// Whether a value of [`FREE_TEXT_KEYS`] anywhere in `v` may hold a secret
/// (the prefilter alone: paths and results elsewhere in an outcome, say a
/// `src/token.rs`, must not make a rollback compile the rule set).
fn free_text_may_contain_secret(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(free_text_may_contain_secret),
        Value::Object(map) => map.iter().any(|(k, x)| {
            if FREE_TEXT_KEYS.contains(&k.as_str()) {
                json_may_contain_secret(x)
            } else {
                free_text_may_contain_secret(x)
            }
        }),
        _ => false,
    }
}

/// Redacts the values of [`FREE_TEXT_KEYS`] wherever they occur in `v`.
fn redact_free_text_keys(v: &mut Value) -> bool {
    match v {
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, x| redact_free_text_keys(x) | changed),
        Value::Object(map) => map.iter_mut().fold(false, |changed, (k, x)| {
            let c = if FREE_TEXT_KEYS.contains(&k.as_str()) {
                redact_json(x)
            } else {
                redact_free_text_keys(x)
            };
            c | changed
        }),
        _ => false,
    }
}

/// The ledger's choke point: `body` with its free-text fields redacted, or
/// `None` when there was nothing to redact (the common case, without a copy).
///
/// Free text: `tool_call.error`, `checkpoint.label`, a non-branch
/// `session_entry.payload` (every string in it), and the `error` / `note` /
/// `message` values of an `action`'s `outcome`. Everything else in a record is
/// an id, a hash, a path, a number, ckpt's own words, or (compensation argv,
/// action plans and targets) what ckpt must read back exactly.
pub fn record_body(body: &Body) -> Option<Body> {
    match body {
        Body::ToolCall(t) => {
            let Cow::Owned(e) = redact_str(t.error.as_deref()?) else {
                return None;
            };
            let mut t = t.clone();
            t.error = Some(e);
            Some(Body::ToolCall(t))
        }
        Body::Checkpoint(c) => {
            let Cow::Owned(l) = redact_str(c.label.as_deref()?) else {
                return None;
            };
            let mut c = c.clone();
            c.label = Some(l);
            Some(Body::Checkpoint(c))
        }
        // Branch payloads are ckpt's own ids, read back by `restore-session`.
        Body::SessionEntry(e) if e.entry_type != EntryType::Branch => {
            if !json_may_contain_secret(&e.payload) {
                return None;
            }
            let mut e = e.clone();
            redact_json(&mut e.payload).then_some(Body::SessionEntry(e))
        }
        Body::Action(a) => {
            let o = a.outcome.as_ref()?;
            if !free_text_may_contain_secret(o) {
                return None;
            }
            let mut a = a.clone();
            let changed = a.outcome.as_mut().is_some_and(redact_free_text_keys);
            changed.then_some(Body::Action(a))
        }
        _ => None,
    }
}

/// The first `max` characters of `s`, extended to the end of a marker the
/// cut would split (a marker is kept whole, never half-shown); the flag says
/// whether anything was cut off.
pub fn cut_chars(s: &str, max: usize) -> (&str, bool) {
    let Some((at, _)) = s.char_indices().nth(max) else {
        return (s, false);
    };
    let mut end = at;
    if let Some(open) = s[..at].rfind('«')
        && s[open..].starts_with(MARKER_OPEN)
        && let Some(close) = s[open..].find('»')
        && open + close >= at
    {
        end = open + close + '»'.len_utf8();
    }
    (&s[..end], end < s.len())
}

/// Where to cut `bytes` to keep at most `max` of them: `max`, or the end of a
/// marker the cut would split (markers are kept whole).
pub fn cut_bytes(bytes: &[u8], max: usize) -> usize {
    if max >= bytes.len() {
        return bytes.len();
    }
    // Markers are short (under 64 bytes); the opening itself may straddle the cut.
    let open = MARKER_OPEN.as_bytes();
    let lo = max.saturating_sub(64);
    let hi = (max + open.len()).min(bytes.len());
    let start = memchr::memmem::find_iter(&bytes[lo..hi], open)
        .map(|i| lo + i)
        .take_while(|&i| i < max)
        .last();
    if let Some(o) = start
        && let Some(c) = memchr::memmem::find(&bytes[o..], "»".as_bytes())
        && o + c + "»".len() > max
    {
        return o + c + "»".len();
    }
    max
}

/// The largest index `<= i` on a char boundary of `s`.
pub fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_free_text_of_an_outcome_decides_whether_rules_run() {
        let plain = serde_json::json!({"files": [
            {"path": "src/token.rs", "result": "restored"},
            {"path": "secret/passwords.txt", "result": "removed"}
        ], "resumed": false});
        assert!(!free_text_may_contain_secret(&plain));
        let secret = format!("ghp_{}", "a1B2c3D4e5".repeat(4).get(..36).unwrap());
        let in_path = serde_json::json!({"files": [{"path": secret, "result": "restored"}]});
        assert!(json_may_contain_secret(&in_path));
        assert!(
            !free_text_may_contain_secret(&in_path),
            "paths are not free text"
        );
        let noted = serde_json::json!({"files": [
            {"path": "a.rs", "result": "failed", "note": format!("token {secret}")}
        ]});
        assert!(free_text_may_contain_secret(&noted));
    }

    fn sha8(s: &str) -> String {
        ContentHash::of(s.as_bytes()).hex()[..8].to_string()
    }

    fn red(s: &str) -> String {
        redact_str(s).into_owned()
    }

    /// Asserts that `text` has `secret` replaced by rule `rule`, and nothing else changed.
    fn assert_redacted(text: &str, secret: &str, rule: &str) {
        let got = red(text);
        let want = text.replacen(secret, &format!("«redacted:{rule}:{}»", sha8(secret)), 1);
        assert_eq!(got, want, "rule {rule} on {text:?}");
        assert!(!got.contains(secret), "{secret} left in {got}");
        assert_eq!(red(&got), got, "redacting twice changes nothing");
    }

    fn assert_kept(text: &str) {
        assert_eq!(red(text), text, "{text:?} must not be redacted");
    }

    const GHP: &str = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5";

    #[test]
    fn aws_access_key_id() {
        assert_redacted(
            "aws configure set aws_access_key_id AKIAZ7Q2M4K8W3R9T6YP --profile x",
            "AKIAZ7Q2M4K8W3R9T6YP",
            "aws-access-key-id",
        );
        assert_redacted(
            "key=ASIAQWERTYUIOPASDFGH.",
            "ASIAQWERTYUIOPASDFGH",
            "aws-access-key-id",
        );
        // 15 characters, lower case, glued into a longer word.
        assert_kept("AKIAZ7Q2M4K8W3R9T6Y is short");
        assert_kept("akiaz7q2m4k8w3r9t6yp");
        assert_kept("XAKIAZ7Q2M4K8W3R9T6YP and AKIAZ7Q2M4K8W3R9T6YPQ");
    }

    #[test]
    fn github_tokens() {
        for p in ["ghp", "gho", "ghu", "ghs", "ghr"] {
            let t = format!("{p}{}", &GHP[3..]);
            assert_redacted(&format!("token: {t}\n"), &t, "github-pat");
        }
        let fine = format!("github_pat_11ABCDEFG0{}", "x1Y2z3".repeat(12));
        assert_redacted(&format!("GH={fine} ok"), &fine, "github-fine-grained-pat");
        assert_kept("ghp_tooShort123 and ghp_ alone");
        assert_kept("ghx_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5");
        assert_kept("github_pat_short");
    }

    #[test]
    fn gitlab_anthropic_openai_slack() {
        assert_redacted(
            "git clone https://oauth2:glpat-Ab1Cd2Ef3Gh4Ij5Kl6Mn@gitlab.example/x.git",
            "glpat-Ab1Cd2Ef3Gh4Ij5Kl6Mn",
            "gitlab-pat",
        );
        let ant = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8Ba7_-AA";
        assert_redacted(&format!("ANTHROPIC key {ant}"), ant, "anthropic-api-key");
        let proj = "sk-proj-Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5Nm7";
        assert_redacted(&format!("use {proj}"), proj, "openai-api-key");
        let legacy = "sk-Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5Nm7Qw3Er5Ty";
        assert_redacted(&format!("({legacy})"), legacy, "openai-api-key");
        let slack = "xoxb-2048-4096-Ab1Cd2Ef3Gh4Ij5Kl6";
        assert_redacted(&format!("SLACK {slack}"), slack, "slack-token");
        // `sk-` inside ordinary words and kebab-case names.
        assert_kept("task-list disk-usage risk-free desk-lamp sk-learn");
        assert_kept("sk-this-is-a-very-long-kebab-case-identifier-name");
        assert_kept("sk-ant- is the prefix; glpat-short; xoxq-1234567890123");
    }

    #[test]
    fn private_key_blocks() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yQ==\n-----END RSA PRIVATE KEY-----";
        assert_redacted(&format!("here:\n{pem}\nthanks"), pem, "private-key");
        let ec = "-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEEIBkg\\n-----END EC PRIVATE KEY-----";
        assert_redacted(&format!("\"{ec}\""), ec, "private-key");
        let openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----";
        assert_redacted(openssh, openssh, "private-key");
        // Cut short (no END line): the BEGIN line and the base64 after it.
        let cut = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC";
        assert_redacted(cut, cut, "private-key");
        // Public keys and certificates are not secrets.
        assert_kept(
            "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
        );
        assert_kept("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----");
    }

    #[test]
    fn jwt() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_redacted(&format!("cookie: session={jwt}; Path=/"), jwt, "jwt");
        assert_kept("eyJhbGciOiJIUzI1NiJ9 alone, and eyJ.eyJ.x");
        assert_kept("eyJhbGciOiJIUzI1NiJ9.notajwtpart.sig");
    }

    #[test]
    fn bearer_keeps_the_header() {
        let tok = "Zm9vYmFyLWJhei0xMjM0NTY3ODkw.qux~";
        assert_redacted(
            &format!("curl -H 'Authorization: Bearer {tok}' https://api.example"),
            tok,
            "bearer-token",
        );
        assert_redacted(
            &format!("{{\"Authorization\": \"Bearer {tok}\"}}"),
            tok,
            "bearer-token",
        );
        assert_redacted(
            &format!("authorization:bearer   {tok}"),
            tok,
            "bearer-token",
        );
        // A JWT bearer is reported as the more specific rule.
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
        assert_redacted(&format!("Authorization: Bearer {jwt}"), jwt, "jwt");
        assert_kept("Authorization: Basic dXNlcjpwYXNz and a Bearer of news");
        assert_kept("Authorization: Bearer short");
    }

    #[test]
    fn env_assignments_redact_the_value_only() {
        assert_redacted("DB_PASSWORD=hunter2!x\n", "hunter2!x", "env-assignment");
        assert_redacted(
            "export GITHUB_TOKEN=\"s3cr3t value\"",
            "s3cr3t value",
            "env-assignment",
        );
        assert_redacted("API_KEY='abc123def'", "abc123def", "env-assignment");
        assert_redacted(
            "AWS_SECRET_ACCESS_KEY = wJalrXUtnFEMI/K7MDENG",
            "wJalrXUtnFEMI/K7MDENG",
            "env-assignment",
        );
        assert_redacted("mysql --password=p4ssw0rd db", "p4ssw0rd", "env-assignment");
        assert_redacted(
            "STRIPE_SECRET_KEY=rk_live_51Hx",
            "rk_live_51Hx",
            "env-assignment",
        );
        assert_redacted("PASSWORD=12345678", "12345678", "env-assignment");
        // Several on separate lines, each hashed on its own.
        let env = "A=1\nDB_PASSWORD=first\nREDIS_TOKEN=second\n";
        let got = red(env);
        assert_eq!(
            got,
            format!(
                "A=1\nDB_PASSWORD=«redacted:env-assignment:{}»\nREDIS_TOKEN=«redacted:env-assignment:{}»\n",
                sha8("first"),
                sha8("second")
            )
        );
        assert_kept("max_tokens=4096 TOKENIZER=bert-base TOKEN_LIMIT=4096");
        assert_kept("PASSWORD=$DB_PASS SECRET=\"\" API_KEY=${KEY} TOKEN=<token> SECRET=true");
        assert_kept("if password == other_password { }");
        assert_kept("PASSWORD_HINT is here: no assignment");
    }

    #[test]
    fn a_known_secret_inside_an_assignment_keeps_its_own_rule() {
        let t = format!("GITHUB_TOKEN={GHP}");
        assert_eq!(
            red(&t),
            format!("GITHUB_TOKEN=«redacted:github-pat:{}»", sha8(GHP))
        );
    }

    #[test]
    fn ckpt_s_own_values_are_never_redacted() {
        let line = r#"{"v":1,"seq":12,"ts":"2026-11-29T08:00:00.002Z","kind":"file_patch","session":"sess-claude-1","patch":"p_01jz8k2m3n4p5q6r7s8t9v0w1x","call":"toolu_01ABCDEFGHIJKLMNOPQRSTUV","path":"src/secret_token.rs","op":"modify","before_hash":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","after_hash":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","patch_ref":"artifacts/patches/p_01jz8k2m3n4p5q6r7s8t9v0w1x.diff","source":"edit_tool","input_hash":"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae","prev":"sha256:fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9"}"#;
        assert_kept(line);
        assert_kept(
            "ckpt_01jz8k2m3n4p5q6r7s8t9v0w1x call_01jz8k2m3n4p5q6r7s act_01jz8k2m e_01jz8k",
        );
        assert_kept("fn access_token(&self) -> &str { &self.token }");
        assert_kept("let secret_key = load_secret_key(path)?;");
        assert_kept("«redacted:github-pat:0123abcd» stays as it is");
    }

    #[test]
    fn short_and_plain_text_is_borrowed() {
        assert!(matches!(redact_str("hi"), Cow::Borrowed(_)));
        assert!(matches!(
            redact_str("an ordinary sentence about tokens and secrets"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_handled() {
        let mut b = b"\xff\xfe out: ".to_vec();
        b.extend_from_slice(GHP.as_bytes());
        b.extend_from_slice(b" \xc3");
        let got = redact_bytes(&b).into_owned();
        let mut want = b"\xff\xfe out: ".to_vec();
        want.extend_from_slice(marker("github-pat", GHP.as_bytes()).as_bytes());
        want.extend_from_slice(b" \xc3");
        assert_eq!(got, want);
    }

    #[test]
    fn json_strings_are_redacted_keys_and_numbers_kept() {
        let mut v = serde_json::json!({
            "role": "user",
            "content": [{"text": format!("my token {GHP}")}, 42],
            GHP: "the key is kept",
        });
        assert!(redact_json(&mut v));
        let m = marker("github-pat", GHP.as_bytes());
        assert_eq!(v["content"][0]["text"], format!("my token {m}"));
        assert_eq!(v[GHP], "the key is kept");
        assert!(!redact_json(&mut v), "a second pass finds nothing");
    }

    #[test]
    fn record_bodies_redact_free_text_only() {
        use crate::record::{
            ActionRecord, ActionStatus, ActionType, CallStatus, Compensation, ToolCall,
        };
        let argv = vec![
            "curl".to_string(),
            format!("-H Authorization: Bearer {GHP}"),
        ];
        let t = ToolCall {
            compensation: Some(Compensation {
                argv: argv.clone(),
                idempotency_key: None,
            }),
            ..ToolCall::end(
                "toolu_1".into(),
                "Bash".into(),
                CallStatus::Failed,
                Some(format!("exit 1: {GHP}")),
            )
        };
        let Some(Body::ToolCall(r)) = record_body(&Body::ToolCall(t.clone())) else {
            panic!("the error must be redacted");
        };
        assert_eq!(
            r.error,
            Some(format!("exit 1: {}", marker("github-pat", GHP.as_bytes())))
        );
        assert_eq!(r.compensation.unwrap().argv, argv, "argv is executed: kept");
        let clean = ToolCall {
            error: Some("exit status 1".into()),
            ..t
        };
        assert!(record_body(&Body::ToolCall(clean)).is_none());

        let a = ActionRecord {
            action: "act_1".into(),
            action_type: ActionType::Compensate,
            status: ActionStatus::Failed,
            target: serde_json::json!({"call": GHP}),
            plan: None,
            outcome: Some(
                serde_json::json!({"error": format!("cannot start `{GHP}`"), "output_ref": GHP}),
            ),
        };
        let Some(Body::Action(r)) = record_body(&Body::Action(a)) else {
            panic!("the outcome's error must be redacted");
        };
        let o = r.outcome.unwrap();
        assert!(!o["error"].as_str().unwrap().contains(GHP));
        assert_eq!(o["output_ref"], GHP, "not free text: kept");
        assert_eq!(r.target["call"], GHP, "an id: kept");
    }

    #[test]
    fn cuts_never_split_a_marker() {
        let m = marker("private-key", b"x");
        let s = format!("key: {m} and more text");
        assert_eq!(cut_chars(&s, 8), (format!("key: {m}").as_str(), true));
        assert_eq!(cut_chars(&s, 5), ("key: ", true));
        assert_eq!(cut_chars(&s, 1000), (s.as_str(), false));
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(floor_char_boundary("hé", 2), 1);
        let b = s.as_bytes();
        let end = "key: ".len() + m.len();
        for max in 6..end {
            assert_eq!(cut_bytes(b, max), end, "cut at {max}");
        }
        assert_eq!(cut_bytes(b, 5), 5);
        assert_eq!(cut_bytes(b, end + 2), end + 2);
        assert_eq!(cut_bytes(b, 10_000), b.len());
    }
}
