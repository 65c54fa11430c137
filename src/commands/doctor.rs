//! `runner doctor M`: what a night's drain needs, checked before it starts. The repositories are
//! reachable, the worker's and gates' programs are on `PATH`, each tracker can be read (and,
//! with its `check`, written back: its client logged in to the host, the labels there), how items' processes will be
//! contained, the ledger can be written, the disk has room, and — with `worker.probe` — each
//! model of the chain answers its probe question. Touches no repository and starts no run.

use super::shared::load;
use crate::cli::DoctorArgs;
use crate::engine::config::{command_argv, effective};
use crate::manifest::{CommandSpec, LoadedManifest};
use crate::plan::{RepoStatus, repos};
use crate::session::failure::Ended;
use crate::ui::term::Ui;
use crate::vocab::ProbeVerdict;
use crate::vocab::{EXIT_FAILURES, EXIT_OK, EXIT_REFUSED};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Free space under which the disk check fails, and under which it warns.
const DISK_FAIL: u64 = 1 << 30;
const DISK_WARN: u64 = 5 << 30;

/// The verdicts, printed as they come.
#[derive(Default)]
struct Verdicts {
    failed: usize,
    warned: usize,
    refused: bool,
}

impl Verdicts {
    fn ok(&mut self, what: &str, msg: impl std::fmt::Display) {
        outln!("  ok    {what}: {msg}");
    }
    fn warn(&mut self, what: &str, msg: impl std::fmt::Display) {
        self.warned += 1;
        outln!("  warn  {what}: {msg}");
    }
    fn fail(&mut self, what: &str, msg: impl std::fmt::Display) {
        self.failed += 1;
        outln!("  FAIL  {what}: {msg}");
    }
}

pub fn run(ui: &Ui, args: &DoctorArgs) -> Ended {
    let loaded = load(&args.manifest)?;
    let plan = crate::session::prepare::planned_whole(ui, &loaded)?;
    outln!(
        "runner doctor: manifest `{}` ({})",
        loaded.manifest.name,
        args.manifest.display()
    );
    let mut v = Verdicts::default();
    repositories(&mut v, &loaded, &plan);
    programs(&mut v, &loaded, &plan);
    trackers(&mut v, &loaded);
    containment(&mut v, &loaded);
    sandbox(&mut v, &loaded, &args.state, &args.manifest);
    ledger(
        &mut v,
        &super::shared::state_path(&args.state, Some(&args.manifest)),
    );
    disk(&mut v, &repos::workspace_dir(&loaded), "the workspace");
    disk(
        &mut v,
        &crate::session::workspace::reports_dir(&loaded, None),
        "the reports",
    );
    if args.no_probe {
        outln!("  -     probe: skipped (--no-probe)");
    } else {
        probe(&mut v, &loaded, &plan);
    }
    let code = if v.refused {
        EXIT_REFUSED
    } else if v.failed > 0 {
        EXIT_FAILURES
    } else {
        EXIT_OK
    };
    outln!(
        "runner doctor: {}",
        match (v.failed, v.warned) {
            (0, 0) => "every check passed".to_string(),
            (0, w) => format!("every check passed, {w} warning{}", plural(w)),
            (f, _) => format!("{f} check{} failed — exit {code}", plural(f)),
        }
    );
    Ok(code)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Each repository is a git checkout on disk, or a remote `git ls-remote` reaches.
fn repositories(v: &mut Verdicts, loaded: &LoadedManifest, plan: &crate::plan::Plan) {
    let mut ok = 0;
    for r in &plan.repositories {
        let what = format!("repository `{}`", r.name);
        match r.status {
            RepoStatus::Found => ok += 1,
            RepoStatus::NotFound => v.fail(
                &what,
                format_args!("`{}` is missing or not a git checkout", r.path.display()),
            ),
            RepoStatus::ToClone => {
                // A bundle file is read as one; anything else is asked as a remote.
                let local = loaded.resolve(&r.location);
                let args: &[&str] = if local.is_file() {
                    &["30", "git", "bundle", "list-heads"]
                } else {
                    &["30", "git", "ls-remote", "--heads", "-q"]
                };
                let out = std::process::Command::new("timeout")
                    .args(args)
                    .arg(&r.location)
                    .env("GIT_TERMINAL_PROMPT", "0")
                    .current_dir(loaded.resolve("."))
                    .stdin(std::process::Stdio::null())
                    .output();
                match out {
                    Ok(o) if o.status.success() => ok += 1,
                    Ok(o) => {
                        let err = String::from_utf8_lossy(&o.stderr);
                        let line = err
                            .lines()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("")
                            .trim_start_matches("fatal: ");
                        v.fail(
                            &what,
                            format_args!("`{}` cannot be reached: {}", r.location, line.trim()),
                        );
                    }
                    Err(e) => v.fail(&what, format_args!("cannot run git: {e}")),
                }
            }
        }
    }
    if plan.repositories.is_empty() {
        v.warn(
            "repositories",
            "the manifest names none (or its globs match none)",
        );
    } else if ok == plan.repositories.len() {
        v.ok("repositories", format_args!("{ok} reachable"));
    }
}

/// The program each worker and gate command starts is on `PATH` (or is the file it names).
fn programs(v: &mut Verdicts, loaded: &LoadedManifest, plan: &crate::plan::Plan) {
    let mut entries: Vec<usize> = plan.repositories.iter().map(|r| r.entry).collect();
    entries.dedup();
    if entries.is_empty() {
        entries.push(usize::MAX);
    }
    let mut checked: Vec<String> = Vec::new();
    let mut missing = 0;
    for entry in entries {
        let (worker, gates, pass) = if entry == usize::MAX {
            (
                loaded.manifest.worker.run.clone(),
                loaded.manifest.gates.clone(),
                Vec::new(),
            )
        } else {
            let eff = effective(loaded, entry);
            (eff.worker.run, eff.gates, eff.env_pass)
        };
        // The PATH the commands get: runner's own when `env.pass` passes it (the default).
        let path = (pass.is_empty() || pass.iter().any(|p| p == "PATH"))
            .then(|| std::env::var("PATH").ok())
            .flatten()
            .unwrap_or_default();
        let commands = std::iter::once(("the worker".to_string(), worker)).chain(
            gates
                .into_iter()
                .map(|g| (format!("gate `{}`", g.name), g.run)),
        );
        for (whose, cmd) in commands {
            let Some(program) = program_of(loaded, &cmd) else {
                continue;
            };
            if checked.contains(&program) {
                continue;
            }
            checked.push(program.clone());
            if !found(&program, &path) {
                missing += 1;
                v.fail(
                    &format!("program `{program}`"),
                    format_args!("{whose} runs it, and it is not on PATH"),
                );
            }
        }
    }
    if missing == 0 {
        v.ok("programs", format_args!("on PATH: {}", checked.join(", ")));
    }
}

/// Each tracker can be read, and — with its `check` — written back (the client present and
/// authenticated for the host, the labels there).
fn trackers(v: &mut Verdicts, loaded: &LoadedManifest) {
    let reads = crate::session::sources::read_all(loaded, None);
    for (spec, read) in loaded.manifest.sources.iter().zip(&reads) {
        let what = format!("source `{}`", spec.name);
        match &read.items {
            Ok(items) => v.ok(
                &what,
                format_args!("read, {} item{}", items.len(), plural(items.len())),
            ),
            Err(why) => v.fail(&what, format_args!("cannot be read: {why}")),
        }
        match crate::session::sources::check(loaded, spec) {
            Some(Ok(said)) => v.ok(&format!("{what} check"), said),
            Some(Err(why)) => v.fail(&format!("{what} check"), why),
            None if spec.writeback.is_some() => v.warn(
                &format!("{what} check"),
                "it writes back but has no `check`: whether its labels exist is not known until a write-back fails",
            ),
            None => {}
        }
    }
}

/// The program a command starts: an argv's first word; a shell command's first word when it
/// is a plain command name (not a keyword, an assignment or a builtin).
fn program_of(loaded: &LoadedManifest, cmd: &CommandSpec) -> Option<String> {
    match cmd {
        CommandSpec::Argv(_) => command_argv(loaded, cmd, |_| Some(String::new()))
            .ok()?
            .into_iter()
            .next(),
        CommandSpec::Shell(s) => {
            let word = s.split_whitespace().next()?;
            let plain = word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./+".contains(c));
            let builtin = [
                "if", "for", "while", "case", "until", "cd", "echo", "printf", "test", "[", "exit",
                "set", "export", "true", "false", ":", ".", "exec", "env", "{", "(",
            ];
            (plain && !builtin.contains(&word)).then(|| {
                if word.contains('/') && !word.starts_with('/') {
                    loaded.resolve(word).to_string_lossy().into_owned()
                } else {
                    word.to_string()
                }
            })
        }
    }
}

fn found(program: &str, path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return runnable(Path::new(program));
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .any(|d| runnable(&Path::new(d).join(program)))
}

/// How each item's processes will be kept together.
fn containment(v: &mut Verdicts, loaded: &LoadedManifest) {
    let id = format!("doctor-{}", std::process::id());
    match crate::session::bounds::containment(loaded, &id) {
        Ok(c) => {
            let said = c.describe();
            c.remove();
            if said.starts_with("cgroup") {
                v.ok("containment", said);
            } else {
                v.warn(
                    "containment",
                    format_args!(
                        "{said}: a process that leaves its group outlives its item until runner's sweep finds it"
                    ),
                );
            }
        }
        Err(e) => v.fail(
            "containment",
            format_args!("{e}: apply would refuse to start"),
        ),
    }
}

/// How items will be confined: what the manifest asks against what the kernel gives.
fn sandbox(
    v: &mut Verdicts,
    loaded: &LoadedManifest,
    state: &crate::cli::StateArgs,
    manifest: &Path,
) {
    let state = super::shared::state_path(state, Some(manifest));
    let planned =
        crate::engine::confine::plan(loaded, &state, &repos::workspace_dir(loaded), Vec::new());
    match planned {
        Ok(p) if !p.active() => v.warn(
            "sandbox",
            "off: workers and gates may write and read anything the user can",
        ),
        Ok(p) if p.missing.is_empty() => v.ok("sandbox", p.summary),
        Ok(p) => v.warn(
            "sandbox",
            format_args!(
                "{} (best-effort; missing: {})",
                p.summary,
                p.missing.join("; ")
            ),
        ),
        Err(e) => v.fail("sandbox", format_args!("{e}: apply would refuse to start")),
    }
}

/// The ledger (or, before the first run, its folder) can be written.
fn ledger(v: &mut Verdicts, path: &Path) {
    if crate::ledger::store::is_shared(path) {
        match crate::ledger::store::open(path) {
            Ok(_) => v.ok("ledger", "the PostgreSQL ledger answers"),
            Err(e) => v.fail("ledger", e),
        }
        return;
    }
    let writable = if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(|_| ())
    } else {
        nearest_dir(path).map_or_else(
            || Err(std::io::Error::other("no folder of it exists")),
            |d| tempfile::tempfile_in(d).map(|_| ()),
        )
    };
    match writable {
        Ok(()) => v.ok(
            "ledger",
            format_args!("`{}` can be written", path.display()),
        ),
        Err(e) => v.fail(
            "ledger",
            format_args!("`{}` cannot be written: {e}", path.display()),
        ),
    }
}

/// The deepest folder of `path` (or its parents) that exists.
fn nearest_dir(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .map(Path::to_path_buf)
        .or_else(|| Some(PathBuf::from(".")))
}

/// Free space where `dir` is (or will be).
fn disk(v: &mut Verdicts, dir: &Path, what: &str) {
    let at = if dir.is_dir() {
        Some(dir.to_path_buf())
    } else {
        nearest_dir(dir)
    };
    let Some(at) = at else { return };
    let check = format!("disk ({what})");
    match nix::sys::statvfs::statvfs(&at) {
        Ok(s) => {
            let free = s.blocks_available().saturating_mul(s.fragment_size());
            let said = format!(
                "{:.1} GiB free at `{}`",
                free as f64 / (1u64 << 30) as f64,
                at.display()
            );
            if free < DISK_FAIL {
                v.fail(&check, said);
            } else if free < DISK_WARN {
                v.warn(&check, said);
            } else {
                v.ok(&check, said);
            }
        }
        Err(e) => v.warn(&check, format_args!("cannot read `{}`: {e}", at.display())),
    }
}

/// Each model of the chains asked its probe question, as `apply` would before the queue.
fn probe(v: &mut Verdicts, loaded: &LoadedManifest, plan: &crate::plan::Plan) {
    let mut entries: Vec<usize> = plan.repositories.iter().map(|r| r.entry).collect();
    entries.dedup();
    if !crate::engine::preflight::wanted(loaded, &entries) {
        outln!("  -     probe: none (the manifest has no `worker.probe`, or no model chain)");
        return;
    }
    let redactor = Arc::new(crate::session::adapter::redactor(loaded));
    let token = uuid::Uuid::new_v4().simple().to_string();
    let logs = tempfile::Builder::new().prefix("runner-doctor.").tempdir();
    let Ok(logs) = logs else {
        v.fail("probe", "cannot make a folder for its logs");
        return;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            v.fail("probe", format_args!("cannot start the runtime: {e}"));
            return;
        }
    };
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(crate::process::Stop::Run);
    let probes = crate::support::blocking::as_event_loop(|| {
        runtime.block_on(crate::engine::preflight::probe_models(
            loaded,
            &entries,
            crate::engine::preflight::ProbeRun {
                redactor,
                token: &token,
                run_id: "doctor",
                logs: logs.path(),
                scratch_in: logs.path(),
            },
            stop_rx,
        ))
    });
    for p in probes {
        let what = format!("probe of model `{}`", p.model);
        let took = format!("{:.1}s", p.duration.as_secs_f64());
        let said = p.message.as_deref().unwrap_or("no message");
        match p.verdict {
            ProbeVerdict::Ok => v.ok(&what, format_args!("answered ({took})")),
            ProbeVerdict::Refused => {
                v.refused = true;
                // The adapter's words name the refusal; other words get it said.
                if said.contains("refused") {
                    v.fail(&what, said);
                } else {
                    v.fail(&what, format_args!("the provider refused the key: {said}"));
                }
            }
            ProbeVerdict::Unavailable => v.warn(
                &what,
                format_args!("no answer for the provider's reasons ({said}); apply would go on"),
            ),
            ProbeVerdict::Failed => v.fail(&what, format_args!("the worker failed: {said}")),
        }
    }
}
