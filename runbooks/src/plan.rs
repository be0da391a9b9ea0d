//! From the raw YAML to a checked [`Runbook`]: every step has exactly one kind, every
//! duration parses, every `${name}` refers to something that will exist when the step
//! runs, every target is in drcheck's config. Each error names the file and line.

use crate::format::{OnFailure, RawHttp, RawManual, RawProbe, RawRunbook, RawShell, RawSql, RawStep, RawVerify};
use crate::scope::Scope;
use drcheck_config::{Config, parse_duration};
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A runbook that passed every check `drcheck drill check` makes.
#[derive(Debug, Clone)]
pub struct Runbook {
    /// The file's stem: the `runbook` label of the drill metrics.
    pub name: String,
    pub path: PathBuf,
    pub title: String,
    pub description: Option<String>,
    pub rto: Option<Duration>,
    pub rpo: Option<Duration>,
    /// `variables`, resolved (`${ENV}` replaced, `--var` overrides applied).
    pub variables: BTreeMap<String, String>,
    pub steady_state: Vec<Step>,
    pub steps: Vec<Step>,
    pub rollbacks: Vec<Step>,
    /// Targets the runbook names that could not be checked because no config was
    /// loaded: `(line, target)`. `drill check` lists them; `drill run` refuses them.
    pub unresolved_targets: Vec<(usize, String)>,
}

#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub line: usize,
    pub action: Action,
    pub timeout: Duration,
    pub on_failure: OnFailure,
    pub recovery: bool,
}

/// What a step does. Texts keep their `${name}`s; they are resolved when the step runs.
#[derive(Debug, Clone)]
pub enum Action {
    Shell(RawShell),
    Sql(RawSql),
    Http(RawHttp),
    Verify(RawVerify),
    Wait(Wait),
    Manual(RawManual),
}

#[derive(Debug, Clone)]
pub enum Wait {
    Pause(Duration),
    Until { probe: Box<Action>, every: Duration },
}

impl Action {
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Shell(_) => "shell",
            Action::Sql(_) => "sql",
            Action::Http(_) => "http",
            Action::Verify(_) => "verify",
            Action::Wait(_) => "wait",
            Action::Manual(_) => "manual",
        }
    }

    /// The variable this step stores its result in, if any.
    pub fn capture(&self) -> Option<&str> {
        match self {
            Action::Shell(s) => s.capture.as_deref(),
            Action::Sql(s) => s.capture.as_deref(),
            Action::Http(h) => h.capture.as_deref(),
            _ => None,
        }
    }

    /// Every text of this action that may hold `${name}`s.
    fn texts(&self) -> Vec<&str> {
        let mut t: Vec<&str> = Vec::new();
        match self {
            Action::Shell(s) => {
                t.push(&s.command);
                t.extend(s.env.values().map(String::as_str));
                t.extend(
                    [&s.workdir, &s.run_as, &s.expect_output, &s.reject_output]
                        .into_iter()
                        .flatten()
                        .map(String::as_str),
                );
            }
            Action::Sql(s) => {
                t.push(&s.query);
                t.extend([&s.dsn, &s.target, &s.expect].into_iter().flatten().map(String::as_str));
            }
            Action::Http(h) => {
                t.push(&h.url);
                t.extend(h.headers.values().map(String::as_str));
                t.extend([&h.method, &h.body, &h.body_contains].into_iter().flatten().map(String::as_str));
            }
            Action::Verify(v) => {
                t.push(&v.target);
                t.extend(v.backup.as_deref());
            }
            Action::Wait(Wait::Until { probe, .. }) => t.extend(probe.texts()),
            Action::Wait(Wait::Pause(_)) => {}
            Action::Manual(m) => t.push(&m.instruction),
        }
        t
    }
}

/// Which part of the drill a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    SteadyState,
    Steps,
    Rollbacks,
}

impl Section {
    fn key(self) -> &'static str {
        match self {
            Section::SteadyState => "steady_state",
            Section::Steps => "steps",
            Section::Rollbacks => "rollbacks",
        }
    }
}

/// A runbook that cannot be run, with every problem found (file:line: message).
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct CheckError {
    pub problems: Vec<String>,
}

/// Reads and checks the runbook at `path`. `overrides` are `--var name=value`;
/// `config` is drcheck's config when one is loaded (needed by `verify` steps and by
/// `sql` steps that name a target).
pub fn load(path: &Path, overrides: &[(String, String)], config: Option<&Config>) -> Result<Runbook, CheckError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CheckError { problems: vec![format!("{}: cannot read the runbook: {e}", path.display())] })?;
    parse(&text, path, overrides, config)
}

pub fn parse(
    text: &str,
    path: &Path,
    overrides: &[(String, String)],
    config: Option<&Config>,
) -> Result<Runbook, CheckError> {
    let file = path.display().to_string();
    let raw: RawRunbook = serde_saphyr::from_str(text).map_err(|e| {
        let message = e.to_string().replace("<input>", &file);
        let message = message.strip_prefix("error: ").unwrap_or(&message).to_string();
        CheckError { problems: vec![format!("{file}: {message}")] }
    })?;
    let mut c = Checker { file, problems: Vec::new(), config, vars: BTreeMap::new(), unresolved: Vec::new() };
    let rb = c.runbook(raw, path, overrides);
    if c.problems.is_empty() { Ok(rb) } else { Err(CheckError { problems: c.problems }) }
}

struct Checker<'a> {
    file: String,
    problems: Vec<String>,
    config: Option<&'a Config>,
    /// The resolved variables, to check targets named through them.
    vars: BTreeMap<String, String>,
    /// Targets named while no config was loaded, with their lines.
    unresolved: Vec<(usize, String)>,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

impl Checker<'_> {
    fn err(&mut self, line: usize, msg: impl std::fmt::Display) {
        self.problems.push(format!("{}:{line}: {msg}", self.file));
    }

    fn duration(&mut self, what: &str, d: &Spanned<String>) -> Option<Duration> {
        match parse_duration(&d.value) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(d.referenced.line() as usize, format!("{what}: {e}"));
                None
            }
        }
    }

    fn runbook(&mut self, raw: RawRunbook, path: &Path, overrides: &[(String, String)]) -> Runbook {
        let rto = raw.objectives.rto.as_ref().and_then(|d| self.duration("objectives.rto", d));
        let rpo = raw.objectives.rpo.as_ref().and_then(|d| self.duration("objectives.rpo", d));
        let variables = self.variables(&raw.variables, overrides);
        self.vars = variables.clone();
        if raw.steps.is_empty() {
            self.problems.push(format!("{}: `steps` is empty: a drill needs at least one step", self.file));
        }
        // Names a step may use: the variables, then what earlier steps capture.
        let mut known: BTreeSet<String> = variables.keys().cloned().collect();
        let steady_state = self.section(Section::SteadyState, &raw.steady_state, &mut known, &[]);
        let steps = self.section(Section::Steps, &raw.steps, &mut known, &steady_state);
        let rollbacks = self.section(Section::Rollbacks, &raw.rollbacks, &mut known, &steady_state);
        if rto.is_some() && !steps.iter().any(|s| s.recovery) {
            let line = raw.objectives.rto.as_ref().map(|d| d.referenced.line() as usize).unwrap_or(1);
            self.err(
                line,
                "objectives.rto is set but no step has `recovery: true`: the RTO clock would measure nothing",
            );
        }
        Runbook {
            name: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "runbook".into()),
            path: path.to_path_buf(),
            title: raw.title,
            description: raw.description,
            rto,
            rpo,
            variables,
            steady_state,
            steps,
            rollbacks,
            unresolved_targets: std::mem::take(&mut self.unresolved),
        }
    }

    /// Resolves the variables: `--var` overrides are taken literally; other values may
    /// refer to other variables and to the environment (`${NAME}`), in any order.
    fn variables(
        &mut self,
        raw: &BTreeMap<String, Spanned<String>>,
        overrides: &[(String, String)],
    ) -> BTreeMap<String, String> {
        for (name, _) in overrides {
            if !raw.contains_key(name) {
                let known: Vec<&str> = raw.keys().map(String::as_str).collect();
                self.problems.push(format!(
                    "--var {name}: {} has no variable `{name}` (it has: {})",
                    self.file,
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ));
            }
        }
        let fixed: BTreeMap<&str, &str> = overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut out = BTreeMap::new();
        for (name, v) in raw {
            let line = v.referenced.line() as usize;
            if !valid_name(name) {
                self.err(line, format!("variables.{name}: a variable name is letters, digits and `_`"));
            }
            let value = match fixed.get(name.as_str()) {
                Some(v) => Ok(v.to_string()),
                None => resolve_variable(name, raw, &fixed, &mut Vec::new()),
            };
            match value {
                Ok(value) => {
                    out.insert(name.clone(), value);
                }
                Err(e) => {
                    self.err(line, format!("variables.{name}: {e}"));
                    // Known but empty, so steps using it do not repeat the error.
                    out.insert(name.clone(), String::new());
                }
            }
        }
        out
    }

    fn section(
        &mut self,
        section: Section,
        raw: &[Spanned<RawStep>],
        known: &mut BTreeSet<String>,
        steady_state: &[Step],
    ) -> Vec<Step> {
        let mut out: Vec<Step> = Vec::new();
        for s in raw {
            let line = s.referenced.line() as usize;
            let Some(step) = self.step(section, &s.value, line, &out, steady_state) else { continue };
            if out.iter().any(|o| o.name == step.name) {
                self.err(line, format!("{}: two steps are named {:?}; names must be unique", section.key(), step.name));
            }
            self.check_texts(&step, known);
            if let Some(c) = step.action.capture() {
                if valid_name(c) {
                    known.insert(c.to_string());
                } else {
                    self.err(line, format!("step {:?}: capture: {c:?} is not a variable name", step.name));
                }
            }
            out.push(step);
        }
        out
    }

    fn check_texts(&mut self, step: &Step, known: &BTreeSet<String>) {
        let scope = Scope::new(known.iter().map(|k| (k.clone(), String::new())).collect());
        for t in step.action.texts() {
            if let Err(e) = scope.resolve(t) {
                self.err(step.line, format!("step {:?}: {e}", step.name));
            }
        }
        let regexes = match &step.action {
            Action::Shell(s) => vec![&s.expect_output, &s.reject_output],
            _ => vec![],
        };
        for r in regexes.into_iter().flatten() {
            if !r.contains("${")
                && let Err(e) = output_regex(r)
            {
                self.err(step.line, format!("step {:?}: not a valid regular expression: {e}", step.name));
            }
        }
    }

    fn step(
        &mut self,
        section: Section,
        raw: &RawStep,
        line: usize,
        earlier: &[Step],
        steady_state: &[Step],
    ) -> Option<Step> {
        let name = raw.name.trim().to_string();
        if name.is_empty() {
            self.err(line, format!("{}: a step needs a non-empty `name`", section.key()));
        }
        let mut kinds: Vec<(&str, Action)> = Vec::new();
        if let Some(s) = &raw.shell {
            kinds.push(("shell", Action::Shell(s.clone())));
        }
        if let Some(s) = &raw.sql {
            kinds.push(("sql", Action::Sql(s.clone())));
        }
        if let Some(h) = &raw.http {
            kinds.push(("http", Action::Http(h.clone())));
        }
        if let Some(v) = &raw.verify {
            kinds.push(("verify", Action::Verify(v.clone())));
        }
        if let Some(m) = &raw.manual {
            kinds.push(("manual", Action::Manual(m.clone())));
        }
        let mut wait_timeout = None;
        if let Some(w) = &raw.wait {
            let (wait, t) = self.wait(&name, w, line, earlier, steady_state)?;
            wait_timeout = t;
            kinds.push(("wait", Action::Wait(wait)));
        }
        let action = match kinds.len() {
            1 => kinds.pop().map(|(_, a)| a)?,
            0 => {
                self.err(line, format!("step {name:?}: expected one of shell, sql, http, verify, wait, manual"));
                return None;
            }
            _ => {
                let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
                self.err(line, format!("step {name:?}: has {}; a step does exactly one thing", names.join(" and ")));
                return None;
            }
        };
        self.action(&name, &action, line);
        let timeout = match &raw.timeout {
            Some(t) => self.duration(&format!("step {name:?}: timeout"), t).unwrap_or(DEFAULT_TIMEOUT),
            None => wait_timeout.unwrap_or(match action {
                Action::Verify(_) => Duration::from_secs(6 * 3600),
                Action::Manual(_) => Duration::from_secs(3600),
                _ => DEFAULT_TIMEOUT,
            }),
        };
        let on_failure = match (section, raw.on_failure) {
            (Section::SteadyState, Some(_)) => {
                self.err(line, format!("step {name:?}: on_failure has no meaning in steady_state (a failed check means the hypothesis does not hold)"));
                OnFailure::Continue
            }
            (Section::Rollbacks, Some(OnFailure::Rollback)) => {
                self.err(line, format!("step {name:?}: on_failure: rollback inside rollbacks; use abort or continue"));
                OnFailure::Continue
            }
            (_, Some(f)) => f,
            (Section::Steps, None) => OnFailure::Rollback,
            (_, None) => OnFailure::Continue,
        };
        if raw.recovery && section != Section::Steps {
            self.err(
                line,
                format!("step {name:?}: recovery: true only counts in `steps` (the RTO clock measures the method)"),
            );
        }
        Some(Step { name, line, action, timeout, on_failure, recovery: raw.recovery })
    }

    fn wait(
        &mut self,
        name: &str,
        w: &crate::format::RawWait,
        line: usize,
        earlier: &[Step],
        steady_state: &[Step],
    ) -> Option<(Wait, Option<Duration>)> {
        let every = match &w.every {
            Some(e) => self.duration(&format!("step {name:?}: wait.every"), e)?,
            None => Duration::from_secs(1),
        };
        let set = [w.pause.is_some(), w.until.is_some(), w.until_step.is_some()].iter().filter(|b| **b).count();
        if set != 1 {
            self.err(line, format!("step {name:?}: wait needs exactly one of `for`, `until`, `until_step`"));
            return None;
        }
        if let Some(p) = &w.pause {
            let d = self.duration(&format!("step {name:?}: wait.for"), p)?;
            return Some((Wait::Pause(d), Some(d + Duration::from_secs(10))));
        }
        if let Some(probe) = &w.until {
            let probe = self.probe(name, probe, line)?;
            return Some((Wait::Until { probe: Box::new(probe), every }, None));
        }
        let target = w.until_step.as_ref()?;
        let found = earlier.iter().chain(steady_state).find(|s| s.name == target.value);
        match found.map(|s| &s.action) {
            Some(a @ (Action::Shell(_) | Action::Sql(_) | Action::Http(_))) => {
                Some((Wait::Until { probe: Box::new(a.clone()), every }, None))
            }
            Some(other) => {
                self.err(
                    target.referenced.line() as usize,
                    format!(
                        "step {name:?}: until_step {:?} is a {} step; only shell, sql and http checks can be polled",
                        target.value,
                        other.kind()
                    ),
                );
                None
            }
            None => {
                self.err(
                    target.referenced.line() as usize,
                    format!(
                        "step {name:?}: until_step {:?}: no steady-state check or earlier step has that name",
                        target.value
                    ),
                );
                None
            }
        }
    }

    fn probe(&mut self, name: &str, p: &RawProbe, line: usize) -> Option<Action> {
        let mut kinds = Vec::new();
        if let Some(s) = &p.shell {
            kinds.push(Action::Shell(s.clone()));
        }
        if let Some(s) = &p.sql {
            kinds.push(Action::Sql(s.clone()));
        }
        if let Some(h) = &p.http {
            kinds.push(Action::Http(h.clone()));
        }
        if kinds.len() != 1 {
            self.err(line, format!("step {name:?}: wait.until needs exactly one of shell, sql, http"));
            return None;
        }
        let a = kinds.pop()?;
        self.action(name, &a, line);
        Some(a)
    }

    /// Checks that need the kind: targets in the config, DSN or target, HTTP method.
    fn action(&mut self, name: &str, a: &Action, line: usize) {
        match a {
            Action::Sql(s) => match (&s.dsn, &s.target) {
                (Some(_), Some(_)) | (None, None) => {
                    self.err(line, format!("step {name:?}: sql needs exactly one of `dsn` and `target`"))
                }
                (None, Some(t)) => {
                    if let Some(msg) = self.target_problem(t, true, line) {
                        self.err(line, format!("step {name:?}: sql.target: {msg}"));
                    }
                }
                _ => {}
            },
            Action::Verify(v) => {
                if let Some(msg) = self.target_problem(&v.target, false, line) {
                    self.err(line, format!("step {name:?}: verify.target: {msg}"));
                }
            }
            Action::Http(h) => {
                if let Some(m) = &h.method
                    && reqwest::Method::from_bytes(m.as_bytes()).is_err()
                {
                    self.err(line, format!("step {name:?}: http.method: {m:?} is not an HTTP method"));
                }
            }
            Action::Wait(Wait::Until { probe, .. }) => self.action(name, probe, line),
            _ => {}
        }
    }

    fn target_problem(&mut self, target: &str, needs_primary: bool, line: usize) -> Option<String> {
        // A target named through a captured value is only known at run time.
        let target = Scope::new(self.vars.clone()).resolve(target).ok()?;
        let target = target.as_str();
        let Some(config) = self.config else {
            // Checked once a config is loaded: `drill check` lists it, `drill run` needs it.
            self.unresolved.push((line, target.to_string()));
            return None;
        };
        match config.target(target) {
            None => {
                let names: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
                Some(format!("no target {target:?} in {} (targets: {})", config.path.display(), names.join(", ")))
            }
            Some(t) if needs_primary && t.primary.is_none() => {
                Some(format!("target {target:?} has no `primary` in {}", config.path.display()))
            }
            Some(_) => None,
        }
    }
}

/// The value of variable `name`: its text with `${other}` replaced by other variables
/// (overridden or resolved in turn) or the environment; a cycle is an error.
fn resolve_variable(
    name: &str,
    raw: &BTreeMap<String, Spanned<String>>,
    fixed: &BTreeMap<&str, &str>,
    stack: &mut Vec<String>,
) -> Result<String, VariableError> {
    if stack.iter().any(|s| s == name) {
        stack.push(name.to_string());
        return Err(VariableError::Cycle(stack.clone()));
    }
    stack.push(name.to_string());
    let text = &raw[name].value;
    let inner_error = std::cell::RefCell::new(None);
    let result = drcheck_config::interpolate_with(
        text,
        &|n| {
            if let Some(v) = fixed.get(n) {
                return Some(v.to_string());
            }
            if raw.contains_key(n) {
                let mut st = stack.clone();
                return match resolve_variable(n, raw, fixed, &mut st) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        inner_error.borrow_mut().get_or_insert(e);
                        Some(String::new())
                    }
                };
            }
            std::env::var(n).ok()
        },
        &|n| format!("{n} is neither a variable nor set in the environment"),
    );
    stack.pop();
    match (result, inner_error.into_inner()) {
        (_, Some(e)) => Err(e),
        (r, None) => Ok(r?),
    }
}

/// Why a runbook's variable has no value.
#[derive(Debug, thiserror::Error)]
enum VariableError {
    /// The names that refer to each other, the first repeated last.
    #[error("variables refer to each other in a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error(transparent)]
    Text(#[from] drcheck_config::InterpolateError),
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Output patterns are line-oriented, like grep: `^` and `$` match at every line.
pub fn output_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern).multi_line(true).build()
}

#[cfg(test)]
mod tests;
