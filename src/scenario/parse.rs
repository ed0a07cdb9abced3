//! Reads a scenario file. The toml crate's spanned tables give every key and
//! value its place, so each error names the file, the line and the key
//! (`step[3].crash`), and says what was expected.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value as Json;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{
    Agent, Crash, EndExpect, FileExpect, FileSpec, RunExpect, Scenario, Step, StepKind, ToolStep,
    UserChange, Who,
};

/// A scenario file that cannot be used: exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {key}: {message}", file.display())]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// The line (1-based; 0 when the file could not be read).
    pub line: usize,
    /// The key, as a dotted path (`step[2].input`), or `-` for the file itself.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Reads and checks one scenario file.
pub fn load(file: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(file).map_err(|e| ScenarioError {
        file: file.to_path_buf(),
        line: 0,
        key: "-".into(),
        message: format!("cannot read the file: {e}"),
    })?;
    parse_str(file, &text)
}

/// Reads a scenario from its text (`file` names it in errors and gives the default name).
pub fn parse_str(file: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    let r = Reader { file, text };
    let doc = DeTable::parse(text).map_err(|e| {
        let line = e.span().map_or(1, |s| r.line_of(s.start));
        ScenarioError {
            file: file.to_path_buf(),
            line,
            key: "-".into(),
            message: format!("not valid TOML: {}", e.message().trim()),
        }
    })?;
    let doc = doc.get_ref();
    r.only(
        doc,
        "",
        &[
            "name", "agent", "git", "session", "files", "config", "step", "expect",
        ],
    )?;
    let name = match get(doc, "name") {
        Some(v) => r.string(v, "name")?,
        None => file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into()),
    };
    let agent = match get(doc, "agent") {
        Some(v) => r.agent(v, "agent")?,
        None => Agent::Claude,
    };
    let git = match get(doc, "git") {
        Some(v) => r.bool(v, "git")?,
        None => true,
    };
    let session = match get(doc, "session") {
        Some(v) => r.id(v, "session")?,
        None => "scenario".into(),
    };
    let mut files = Vec::new();
    if let Some(v) = get(doc, "files") {
        let t = r.table(v, "files")?;
        for (k, v) in t {
            let key = format!("files.{}", quote_key(k.get_ref()));
            let path = r.rel_path(k.get_ref(), k, &key)?;
            files.push((path, r.file_spec(v, &key)?));
        }
    }
    let config = match get(doc, "config") {
        Some(v) => match to_toml(r.table_value(v, "config")?) {
            toml::Value::Table(t) => t,
            _ => unreachable!("a table converts to a table"),
        },
        None => toml::Table::new(),
    };
    let mut steps = Vec::new();
    if let Some(v) = get(doc, "step") {
        let Some(items) = v.get_ref().as_array() else {
            return Err(r.err(v, "step", "must be an array of tables (`[[step]]`)"));
        };
        for (i, item) in items.iter().enumerate() {
            steps.push(r.step(item, i + 1, &agent, &session)?);
        }
    }
    let expect = match get(doc, "expect") {
        Some(v) => r.end_expect(v)?,
        None => EndExpect::default(),
    };
    let mut names = Vec::new();
    for s in &steps {
        let (key, mine): (&str, Vec<&String>) = match &s.kind {
            StepKind::Checkpoint { name, .. } => ("checkpoint", vec![name]),
            StepKind::Run { save, .. } => ("save", save.iter().map(|(n, _)| n).collect()),
            _ => continue,
        };
        for name in mine {
            if names.contains(name) {
                return Err(ScenarioError {
                    file: file.to_path_buf(),
                    line: s.line,
                    key: key.into(),
                    message: format!("the name `@{name}` is given twice"),
                });
            }
            names.push(name.clone());
        }
    }
    Ok(Scenario {
        file: file.to_path_buf(),
        name,
        agent,
        git,
        session,
        files,
        config,
        steps,
        expect,
    })
}

type V<'i> = Spanned<DeValue<'i>>;

fn get<'a, 'i>(t: &'a DeTable<'i>, key: &str) -> Option<&'a V<'i>> {
    t.iter().find(|(k, _)| k.get_ref() == key).map(|(_, v)| v)
}

fn quote_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        format!("{k:?}")
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{}", quote_key(key))
    }
}

struct Reader<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Reader<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn err<T>(&self, at: &Spanned<T>, key: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.to_path_buf(),
            line: self.line_of(at.span().start),
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// Refuses keys outside `allowed`, naming the first unknown one.
    fn only(&self, t: &DeTable<'_>, prefix: &str, allowed: &[&str]) -> Result<(), ScenarioError> {
        for (k, _) in t {
            if !allowed.contains(&k.get_ref().as_ref()) {
                return Err(self.err(
                    k,
                    &join(prefix, k.get_ref()),
                    format!("unknown key; expected one of: {}", allowed.join(", ")),
                ));
            }
        }
        Ok(())
    }

    fn string(&self, v: &V<'_>, key: &str) -> Result<String, ScenarioError> {
        v.get_ref()
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.err(v, key, format!("must be a string, not {}", kind(v))))
    }

    fn id(&self, v: &V<'_>, key: &str) -> Result<String, ScenarioError> {
        let s = self.string(v, key)?;
        if s.is_empty() || s.len() > 200 || s.chars().any(char::is_control) {
            return Err(self.err(
                v,
                key,
                "must be 1 to 200 characters with no control characters",
            ));
        }
        Ok(s)
    }

    fn bool(&self, v: &V<'_>, key: &str) -> Result<bool, ScenarioError> {
        v.get_ref()
            .as_bool()
            .ok_or_else(|| self.err(v, key, format!("must be true or false, not {}", kind(v))))
    }

    fn int(&self, v: &V<'_>, key: &str) -> Result<i64, ScenarioError> {
        v.get_ref()
            .as_integer()
            .and_then(|i| i64::from_str_radix(i.as_str(), i.radix()).ok())
            .ok_or_else(|| self.err(v, key, format!("must be an integer, not {}", kind(v))))
    }

    fn table<'a, 'i>(&self, v: &'a V<'i>, key: &str) -> Result<&'a DeTable<'i>, ScenarioError> {
        v.get_ref()
            .as_table()
            .ok_or_else(|| self.err(v, key, format!("must be a table, not {}", kind(v))))
    }

    fn table_value<'a, 'i>(
        &self,
        v: &'a V<'i>,
        key: &str,
    ) -> Result<&'a DeValue<'i>, ScenarioError> {
        self.table(v, key)?;
        Ok(v.get_ref())
    }

    fn agent(&self, v: &V<'_>, key: &str) -> Result<Agent, ScenarioError> {
        let s = self.string(v, key)?;
        s.parse::<Agent>()
            .map_err(|e| self.err(v, key, e.to_string()))
    }

    fn mode(&self, v: &V<'_>, key: &str) -> Result<u32, ScenarioError> {
        let s = self.string(v, key)?;
        u32::from_str_radix(&s, 8)
            .ok()
            .filter(|m| *m <= 0o7777 && !s.is_empty())
            .ok_or_else(|| self.err(v, key, format!("`{s}` is not an octal mode like \"644\"")))
    }

    fn base64(&self, v: &V<'_>, key: &str) -> Result<Vec<u8>, ScenarioError> {
        let s = self.string(v, key)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| self.err(v, key, format!("is not base64: {e}")))
    }

    /// A workspace-relative path: no `..`, not absolute, not into `.git` or `.agent-runtime`.
    fn rel_path<T>(&self, p: &str, at: &Spanned<T>, key: &str) -> Result<String, ScenarioError> {
        let bad = p.is_empty()
            || p.starts_with('/')
            || p.contains('\0')
            || p.split('/').any(|c| c == ".." || c == "." || c.is_empty())
            || matches!(p.split('/').next(), Some(".git" | ".agent-runtime"));
        if bad {
            return Err(self.err(
                at,
                key,
                format!(
                    "`{p}` must be a relative path inside the workspace (no `..`, `.git` or `.agent-runtime`)"
                ),
            ));
        }
        Ok(p.to_string())
    }

    fn file_spec(&self, v: &V<'_>, key: &str) -> Result<FileSpec, ScenarioError> {
        if let Some(s) = v.get_ref().as_str() {
            return Ok(FileSpec {
                bytes: s.as_bytes().to_vec(),
                mode: None,
            });
        }
        let t = self.table(v, key)?;
        self.only(t, key, &["content", "base64", "mode"])?;
        let bytes = match (get(t, "content"), get(t, "base64")) {
            (Some(c), None) => self.string(c, &join(key, "content"))?.into_bytes(),
            (None, Some(b)) => self.base64(b, &join(key, "base64"))?,
            (None, None) => return Err(self.err(v, key, "needs `content` or `base64`")),
            (Some(_), Some(b)) => {
                return Err(self.err(b, key, "has both `content` and `base64`; keep one"));
            }
        };
        let mode = get(t, "mode")
            .map(|m| self.mode(m, &join(key, "mode")))
            .transpose()?;
        Ok(FileSpec { bytes, mode })
    }

    fn who(
        &self,
        t: &DeTable<'_>,
        key: &str,
        agent: &Agent,
        session: &str,
    ) -> Result<Who, ScenarioError> {
        Ok(Who {
            session: get(t, "session")
                .map(|v| self.id(v, &join(key, "session")))
                .transpose()?
                .unwrap_or_else(|| session.to_string()),
            agent: get(t, "agent")
                .map(|v| self.agent(v, &join(key, "agent")))
                .transpose()?
                .unwrap_or(*agent),
        })
    }

    fn step(
        &self,
        v: &V<'_>,
        n: usize,
        agent: &Agent,
        session: &str,
    ) -> Result<Step, ScenarioError> {
        let key = format!("step[{n}]");
        let t = self.table(v, &key)?;
        let kinds = [
            "checkpoint",
            "tool",
            "user",
            "run",
            "prompt",
            "session_start",
            "turn_end",
            "tamper",
        ];
        let present: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| get(t, k).is_some())
            .collect();
        let line = self.line_of(v.span().start);
        let kind = match present.as_slice() {
            [one] => *one,
            [] => {
                return Err(self.err(
                    v,
                    &key,
                    format!("says nothing to do; give one of: {}", kinds.join(", ")),
                ));
            }
            [a, b, ..] => {
                return Err(self.err(
                    v,
                    &key,
                    format!("has both `{a}` and `{b}`; a step does one thing"),
                ));
            }
        };
        let k = |name: &str| join(&key, name);
        let kind = match kind {
            "checkpoint" => {
                self.only(t, &key, &["checkpoint", "session"])?;
                let c = get(t, "checkpoint").expect("present");
                let name = self.id(c, &k("checkpoint"))?;
                if name.contains(char::is_whitespace) || name.contains('@') {
                    return Err(self.err(c, &k("checkpoint"), "must have no spaces and no `@`"));
                }
                StepKind::Checkpoint {
                    name,
                    session: get(t, "session")
                        .map(|v| self.id(v, &k("session")))
                        .transpose()?,
                }
            }
            "tool" => {
                self.only(
                    t,
                    &key,
                    &[
                        "tool", "call", "input", "result", "crash", "session", "agent", "extra",
                        "expect",
                    ],
                )?;
                let tool = self.id(get(t, "tool").expect("present"), &k("tool"))?;
                let call = match get(t, "call") {
                    Some(c) => self.id(c, &k("call"))?,
                    None => format!("c{n}"),
                };
                let input = match get(t, "input") {
                    Some(i) => to_json(self.table_value(i, &k("input"))?),
                    None => Json::Object(Default::default()),
                };
                let failed = match get(t, "result") {
                    None => false,
                    Some(r) => match self.string(r, &k("result"))?.as_str() {
                        "succeeded" => false,
                        "failed" => true,
                        other => {
                            return Err(self.err(
                                r,
                                &k("result"),
                                format!("`{other}` is not a result; expected succeeded or failed"),
                            ));
                        }
                    },
                };
                let crash = match get(t, "crash") {
                    None => None,
                    Some(c) => Some(match self.string(c, &k("crash"))?.as_str() {
                        "before-effect" => Crash::BeforeEffect,
                        "after-effect" => Crash::AfterEffect,
                        fp if !fp.is_empty()
                            && fp
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) =>
                        {
                            Crash::Failpoint(fp.to_string())
                        }
                        other => {
                            return Err(self.err(
                                c,
                                &k("crash"),
                                format!(
                                    "`{other}` is not before-effect, after-effect or a failpoint name"
                                ),
                            ));
                        }
                    }),
                };
                let extra = match get(t, "extra") {
                    Some(e) => match to_json(self.table_value(e, &k("extra"))?) {
                        Json::Object(m) => m,
                        _ => unreachable!("a table converts to an object"),
                    },
                    None => Default::default(),
                };
                let expect = match get(t, "expect") {
                    Some(e) => self.run_expect(e, &k("expect"))?,
                    None => RunExpect::default(),
                };
                StepKind::Tool(Box::new(ToolStep {
                    tool,
                    call,
                    input,
                    failed,
                    crash,
                    who: self.who(t, &key, agent, session)?,
                    extra,
                    expect,
                }))
            }
            "user" | "tamper" => {
                let which = kind;
                self.only(
                    t,
                    &key,
                    &[
                        which, "replace", "content", "base64", "append", "delete", "mode",
                    ],
                )?;
                let u = get(t, which).expect("present");
                let raw = self.string(u, &k(which))?;
                let path = if which == "tamper" {
                    let inner = raw.strip_prefix(".agent-runtime/").unwrap_or("");
                    self.rel_path(inner, u, &k(which)).map_err(|_| {
                        self.err(
                            u,
                            &k(which),
                            format!("`{raw}` must be a path under `.agent-runtime/`"),
                        )
                    })?;
                    raw
                } else {
                    self.rel_path(&raw, u, &k(which))?
                };
                let edits: Vec<&str> = ["replace", "content", "base64", "append", "delete"]
                    .into_iter()
                    .filter(|e| get(t, e).is_some())
                    .collect();
                let mode = get(t, "mode")
                    .map(|m| self.mode(m, &k("mode")))
                    .transpose()?;
                let change = match (edits.as_slice(), mode) {
                    ([], Some(m)) => UserChange::Mode(m),
                    ([], None) => {
                        return Err(self.err(
                            u,
                            &key,
                            "says no edit; give replace, content, base64, append, delete or mode",
                        ));
                    }
                    ([_, b, ..], _) => {
                        return Err(self.err(
                            get(t, b).expect("present"),
                            &k(b),
                            "a user step makes one edit",
                        ));
                    }
                    ([e], _) => {
                        let v = get(t, e).expect("present");
                        match *e {
                            "replace" => {
                                let pair = v
                                    .get_ref()
                                    .as_array()
                                    .filter(|a| a.len() == 2)
                                    .and_then(|a| {
                                        Some((
                                            a[0].get_ref().as_str()?.to_string(),
                                            a[1].get_ref().as_str()?.to_string(),
                                        ))
                                    })
                                    .ok_or_else(|| {
                                        self.err(v, &k("replace"), "must be [\"old\", \"new\"]")
                                    })?;
                                if pair.0.is_empty() {
                                    return Err(self.err(
                                        v,
                                        &k("replace"),
                                        "the text to replace is empty",
                                    ));
                                }
                                UserChange::Replace(pair.0, pair.1)
                            }
                            "content" => {
                                UserChange::Content(self.string(v, &k("content"))?.into_bytes())
                            }
                            "base64" => UserChange::Content(self.base64(v, &k("base64"))?),
                            "append" => {
                                UserChange::Append(self.string(v, &k("append"))?.into_bytes())
                            }
                            _ => {
                                if !self.bool(v, &k("delete"))? {
                                    return Err(self.err(
                                        v,
                                        &k("delete"),
                                        "`delete = false` does nothing; drop it",
                                    ));
                                }
                                UserChange::Delete
                            }
                        }
                    }
                };
                if which == "tamper" {
                    StepKind::Tamper { path, change }
                } else {
                    StepKind::User { path, change }
                }
            }
            "run" => {
                self.only(t, &key, &["run", "crash", "save", "expect"])?;
                let r = get(t, "run").expect("present");
                let line = self.string(r, &k("run"))?;
                let words = split_words(&line).map_err(|m| self.err(r, &k("run"), m))?;
                let args = match words.split_first() {
                    Some((first, rest)) if first == "ckpt" => rest.to_vec(),
                    _ => {
                        return Err(self.err(
                            r,
                            &k("run"),
                            "must be a ckpt command line (`ckpt rollback --to @start`)",
                        ));
                    }
                };
                let expect = match get(t, "expect") {
                    Some(e) => self.run_expect(e, &k("expect"))?,
                    None => RunExpect::default(),
                };
                let crash = get(t, "crash")
                    .map(|c| {
                        let fp = self.string(c, &k("crash"))?;
                        if fp.is_empty()
                            || !fp
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                        {
                            return Err(self.err(c, &k("crash"), "must be a failpoint name"));
                        }
                        Ok(fp)
                    })
                    .transpose()?;
                let mut save = Vec::new();
                if let Some(sv) = get(t, "save") {
                    for (name, path) in self.table(sv, &k("save"))? {
                        let key = join(&k("save"), name.get_ref());
                        let n = name.get_ref().to_string();
                        if n.is_empty()
                            || !n
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                        {
                            return Err(self.err(
                                name,
                                &key,
                                "a name of letters, digits, `_`, `.`, `-`",
                            ));
                        }
                        save.push((n, self.string(path, &key)?));
                    }
                }
                StepKind::Run {
                    args,
                    crash,
                    save,
                    expect,
                }
            }
            "prompt" => {
                self.only(t, &key, &["prompt", "session", "agent"])?;
                StepKind::Prompt {
                    text: self.string(get(t, "prompt").expect("present"), &k("prompt"))?,
                    who: self.who(t, &key, agent, session)?,
                }
            }
            "session_start" => {
                self.only(t, &key, &["session_start", "session", "agent"])?;
                StepKind::SessionStart {
                    source: self.id(
                        get(t, "session_start").expect("present"),
                        &k("session_start"),
                    )?,
                    who: self.who(t, &key, agent, session)?,
                }
            }
            _ => {
                self.only(t, &key, &["turn_end", "session", "agent"])?;
                let v = get(t, "turn_end").expect("present");
                if !self.bool(v, &k("turn_end"))? {
                    return Err(self.err(v, &k("turn_end"), "`turn_end = false` does nothing"));
                }
                StepKind::TurnEnd {
                    who: self.who(t, &key, agent, session)?,
                }
            }
        };
        Ok(Step { line, kind })
    }

    fn run_expect(&self, v: &V<'_>, key: &str) -> Result<RunExpect, ScenarioError> {
        let t = self.table(v, key)?;
        self.only(
            t,
            key,
            &["exit", "json", "stdout_contains", "stderr_contains"],
        )?;
        let texts = |name: &str| -> Result<Vec<String>, ScenarioError> {
            let Some(v) = get(t, name) else {
                return Ok(Vec::new());
            };
            if let Some(s) = v.get_ref().as_str() {
                return Ok(vec![s.to_string()]);
            }
            v.get_ref()
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|i| i.get_ref().as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    self.err(v, &join(key, name), "must be a string or a list of strings")
                })
        };
        Ok(RunExpect {
            exit: get(t, "exit")
                .map(|e| {
                    self.int(e, &join(key, "exit")).and_then(|x| {
                        i32::try_from(x)
                            .ok()
                            .filter(|x| (0..=255).contains(x))
                            .ok_or_else(|| {
                                self.err(e, &join(key, "exit"), "must be between 0 and 255")
                            })
                    })
                })
                .transpose()?,
            json: get(t, "json").map(|j| to_json(j.get_ref())),
            stdout_contains: texts("stdout_contains")?,
            stderr_contains: texts("stderr_contains")?,
        })
    }

    fn end_expect(&self, v: &V<'_>) -> Result<EndExpect, ScenarioError> {
        let t = self.table(v, "expect")?;
        self.only(t, "expect", &["files", "conflicts", "verify"])?;
        let mut out = EndExpect::default();
        if let Some(f) = get(t, "files") {
            for (k, v) in self.table(f, "expect.files")? {
                let key = format!("expect.files.{}", quote_key(k.get_ref()));
                let path = self.rel_path(k.get_ref(), k, &key)?;
                let ft = self.table(v, &key)?;
                self.only(
                    ft,
                    &key,
                    &["content", "base64", "sha256", "contains", "absent", "mode"],
                )?;
                let mut e = FileExpect {
                    content: get(ft, "content")
                        .map(|c| {
                            self.string(c, &join(&key, "content"))
                                .map(String::into_bytes)
                        })
                        .transpose()?,
                    sha256: get(ft, "sha256")
                        .map(|c| {
                            let s = self.string(c, &join(&key, "sha256"))?;
                            let hex = s.strip_prefix("sha256:").unwrap_or(&s).to_ascii_lowercase();
                            if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                                Ok(hex)
                            } else {
                                Err(self.err(c, &join(&key, "sha256"), "must be 64 hex digits"))
                            }
                        })
                        .transpose()?,
                    contains: get(ft, "contains")
                        .map(|c| self.string(c, &join(&key, "contains")))
                        .transpose()?,
                    absent: get(ft, "absent")
                        .map(|c| self.bool(c, &join(&key, "absent")))
                        .transpose()?
                        .unwrap_or(false),
                    mode: get(ft, "mode")
                        .map(|m| self.mode(m, &join(&key, "mode")))
                        .transpose()?,
                };
                if let Some(b) = get(ft, "base64") {
                    if e.content.is_some() {
                        return Err(self.err(b, &key, "has both `content` and `base64`"));
                    }
                    e.content = Some(self.base64(b, &join(&key, "base64"))?);
                }
                let says_something = e.content.is_some()
                    || e.sha256.is_some()
                    || e.contains.is_some()
                    || e.absent
                    || e.mode.is_some();
                if !says_something {
                    return Err(self.err(
                        v,
                        &key,
                        "expects nothing; give content, base64, sha256, contains, absent or mode",
                    ));
                }
                if e.absent && (e.content.is_some() || e.contains.is_some() || e.mode.is_some()) {
                    return Err(self.err(v, &key, "`absent = true` with a content or mode"));
                }
                out.files.push((path, e));
            }
        }
        if let Some(c) = get(t, "conflicts") {
            let n = self.int(c, "expect.conflicts")?;
            out.conflicts = Some(
                u64::try_from(n)
                    .map_err(|_| self.err(c, "expect.conflicts", "must not be negative"))?,
            );
        }
        if let Some(v) = get(t, "verify") {
            out.verify = self.bool(v, "expect.verify")?;
        }
        Ok(out)
    }
}

fn kind(v: &V<'_>) -> &'static str {
    v.get_ref().type_str()
}

/// A TOML value as JSON (datetimes become strings).
pub fn to_json(v: &DeValue<'_>) -> Json {
    match v {
        DeValue::String(s) => Json::String(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .map(Json::from)
            .unwrap_or_else(|_| Json::String(i.as_str().to_string())),
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Json::Null, Json::Number),
        DeValue::Boolean(b) => Json::Bool(*b),
        DeValue::Datetime(d) => Json::String(d.to_string()),
        DeValue::Array(a) => Json::Array(a.iter().map(|i| to_json(i.get_ref())).collect()),
        DeValue::Table(t) => Json::Object(
            t.iter()
                .map(|(k, v)| (k.get_ref().to_string(), to_json(v.get_ref())))
                .collect(),
        ),
    }
}

fn to_toml(v: &DeValue<'_>) -> toml::Value {
    match v {
        DeValue::String(s) => toml::Value::String(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .map(toml::Value::Integer)
            .unwrap_or_else(|_| toml::Value::String(i.as_str().to_string())),
        DeValue::Float(f) => toml::Value::Float(f.as_str().replace('_', "").parse().unwrap_or(0.0)),
        DeValue::Boolean(b) => toml::Value::Boolean(*b),
        DeValue::Datetime(d) => toml::Value::Datetime(*d),
        DeValue::Array(a) => toml::Value::Array(a.iter().map(|i| to_toml(i.get_ref())).collect()),
        DeValue::Table(t) => toml::Value::Table(
            t.iter()
                .map(|(k, v)| (k.get_ref().to_string(), to_toml(v.get_ref())))
                .collect(),
        ),
    }
}

/// Splits a command line into words: blanks separate, `'…'` and `"…"` quote,
/// `\` escapes the next character outside single quotes. No expansions.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("a `'` is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => cur.push(c),
                            None => return Err("a `\"` is not closed".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("a `\"` is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("the line ends in `\\`".into()),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '`' | '$' if !in_word || cur.is_empty() => {
                return Err(format!(
                    "`{c}` is shell syntax; a run step is one ckpt command, not a shell line"
                ));
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        parse_str(Path::new("t.toml"), text)
    }

    #[test]
    fn a_full_scenario_reads() {
        let s = parse(
            r##"
name = "rollback keeps a user edit"
agent = "claude"
[files]
"src/lib.rs" = "fn a() {}\nfn b() {}\n"
"bin/run" = { content = "#!/bin/sh\n", mode = "755" }
"logo.png" = { base64 = "iVBORw0KGgo=" }
[config]
on_record_failure = "warn"
[[step]]
checkpoint = "start"
[[step]]
tool = "Edit"
call = "c1"
input = { file_path = "src/lib.rs", old_string = "fn a() {}", new_string = "fn a() { 1 }" }
[[step]]
user = "src/lib.rs"
replace = ["fn b() {}", "fn b() { 2 }"]
[[step]]
run = "ckpt rollback --to @start"
expect = { exit = 0, json = { files = [{ path = "src/lib.rs", result = "merged" }] } }
[expect]
files."src/lib.rs" = { content = "fn a() {}\nfn b() { 2 }\n" }
conflicts = 0
"##,
        )
        .unwrap();
        assert_eq!(s.name, "rollback keeps a user edit");
        assert_eq!(s.files.len(), 3);
        assert_eq!(s.steps.len(), 4);
        assert_eq!(s.steps[1].line, 12, "the line of its [[step]] header");
        let StepKind::Run { args, expect, .. } = &s.steps[3].kind else {
            panic!("a run step")
        };
        assert_eq!(args, &["rollback", "--to", "@start"]);
        assert_eq!(expect.exit, Some(0));
        assert_eq!(s.expect.conflicts, Some(0));
        assert!(s.expect.verify);
    }

    #[test]
    fn errors_name_line_and_key() {
        let e = parse("[[step]]\ntool = \"Edit\"\ncrash = \"now!\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (3, "step[1].crash"), "{e}");
        let e = parse("\n[[step]]\nuser = \"a\"\nfrobnicate = 1\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (4, "step[1].frobnicate"), "{e}");
        let e = parse("[files]\n\"../x\" = \"a\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (2, "files.\"../x\""), "{e}");
        let e = parse("[[step]]\nrun = \"git status\"\n").unwrap_err();
        assert_eq!(e.key, "step[1].run");
        let e = parse("agent = \"vim\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (1, "agent"));
        let e = parse("[expect]\nfiles.a = { }\n").unwrap_err();
        assert_eq!(e.key, "expect.files.a");
        let e = parse("x = [\n").unwrap_err();
        assert!(e.message.starts_with("not valid TOML"), "{e}");
        let e = parse("[[step]]\ncheckpoint = \"a\"\n[[step]]\ncheckpoint = \"a\"\n").unwrap_err();
        assert_eq!(e.line, 3);
    }

    #[test]
    fn words_split_like_a_shell_without_expansions() {
        assert_eq!(
            split_words(r#"ckpt rollback -m 'a b' "c \"d\"" e\ f"#).unwrap(),
            ["ckpt", "rollback", "-m", "a b", "c \"d\"", "e f"]
        );
        assert!(split_words("ckpt status | cat").is_err());
        assert!(split_words("ckpt 'open").is_err());
    }
}
