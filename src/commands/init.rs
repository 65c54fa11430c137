//! `runner init [DIR]`: a commented starter manifest for the git checkouts in a folder, with a
//! worker for the agent CLI found on `PATH` (its adapter written beside the manifest) and a test
//! gate guessed from each project's files. What it writes validates as written.

use crate::cli::InitArgs;
use crate::session::failure::{Ended, Failure};
use crate::ui::term::Ui;
use crate::vocab::EXIT_OK;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// An agent CLI runner ships an adapter for.
struct Agent {
    /// The program on `PATH`, and the adapter's name.
    cli: &'static str,
    adapter: &'static str,
    primary: &'static str,
    fallback: Option<&'static str>,
    secrets: &'static [&'static str],
    /// What the CLI writes outside the item (`sandbox.writable`), as its adapter says.
    writable: &'static [&'static str],
    /// Its provider's API hosts, for `sandbox.network`.
    hosts: &'static [&'static str],
}

const AGENTS: &[Agent] = &[
    Agent {
        cli: "claude",
        adapter: include_str!("../../manifests/agents/claude.sh"),
        primary: "claude-sonnet-4-5",
        fallback: Some("claude-opus-4-1"),
        secrets: &["ANTHROPIC_API_KEY"],
        hosts: &["api.anthropic.com"],
        writable: &["~/.claude", "~/.claude.json"],
    },
    Agent {
        cli: "codex",
        adapter: include_str!("../../manifests/agents/codex.sh"),
        primary: "gpt-5-codex",
        fallback: Some("gpt-5"),
        secrets: &["OPENAI_API_KEY"],
        hosts: &["api.openai.com"],
        writable: &["~/.codex"],
    },
    Agent {
        cli: "gemini",
        adapter: include_str!("../../manifests/agents/gemini.sh"),
        primary: "gemini-2.5-pro",
        fallback: Some("gemini-2.5-flash"),
        secrets: &["GEMINI_API_KEY"],
        hosts: &["generativelanguage.googleapis.com"],
        writable: &["~/.gemini"],
    },
    Agent {
        cli: "aider",
        adapter: include_str!("../../manifests/agents/aider.sh"),
        primary: "sonnet",
        fallback: None,
        secrets: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
        hosts: &["api.anthropic.com", "api.openai.com"],
        writable: &["~/.aider", "~/.cache"],
    },
    Agent {
        cli: "opencode",
        adapter: include_str!("../../manifests/agents/opencode.sh"),
        primary: "anthropic/claude-sonnet-4-5",
        fallback: None,
        secrets: &["ANTHROPIC_API_KEY"],
        hosts: &["api.anthropic.com"],
        writable: &[
            "~/.config/opencode",
            "~/.local/share/opencode",
            "~/.local/state/opencode",
            "~/.cache/opencode",
        ],
    },
];

/// The manifest's `sandbox` for agent `a`: what its CLI writes outside the item.
fn write_sandbox(m: &mut String, a: &Agent) {
    use std::fmt::Write as _;
    let _ = writeln!(m);
    let _ = writeln!(
        m,
        "# Workers and gates run confined by the kernel to their item: besides it, the agent CLI"
    );
    let _ = writeln!(m, "# writes only these (docs/manifest.md#sandbox).");
    let _ = writeln!(m, "sandbox:");
    let _ = writeln!(m, "  writable: [{}]", a.writable.join(", "));
    let _ = writeln!(
        m,
        "  # Only the provider on the network, through runner's proxy (gates that fetch packages"
    );
    let _ = writeln!(m, "  # need their registry listed too):");
    let _ = writeln!(m, "  # network: [{}]", a.hosts.join(", "));
    let _ = writeln!(m);
}
const COMMON: &str = include_str!("../../manifests/agents/common.sh");

/// The folder adapters are written to, beside the manifest.
const AGENTS_DIR: &str = "runner-agents";

/// A checkout found, with the test command its files suggest.
struct Found {
    path: String,
    name: String,
    test: Option<(&'static str, &'static str)>,
    prep: Prep,
}

/// How a worktree of a recognised project is made ready: its `worktree` section.
#[derive(Default)]
struct Prep {
    setup: Option<&'static str>,
    share: Vec<&'static str>,
    /// What suggested it.
    why: Vec<&'static str>,
}

/// What a worktree of the project at `repo` needs that only its checkout has: dependencies
/// installed there (`node_modules`, a virtualenv), an ignored lock file.
fn worktree_prep(repo: &Path) -> Prep {
    let has = |f: &str| repo.join(f).exists();
    let mut prep = Prep::default();
    // `npm ci` installs from the lock file, so a worktree must hold it: committed, not ignored.
    let lock_committed = has("package-lock.json")
        && crate::git::ignored_of(
            &crate::git::Repos::default(),
            repo,
            &["package-lock.json".to_string()],
        )
        .is_ok_and(|i| i.is_empty());
    if has("package.json") && lock_committed {
        prep.setup = Some("npm ci");
        prep.why.push("package-lock.json");
    }
    let mut candidates: Vec<&'static str> = Vec::new();
    if has("package.json") && prep.setup.is_none() {
        candidates.push("node_modules");
    }
    candidates.extend([".venv", "venv"]);
    if has("Cargo.toml") {
        candidates.push("Cargo.lock");
    }
    let present: Vec<&'static str> = candidates.into_iter().filter(|c| has(c)).collect();
    let asked: Vec<String> = present
        .iter()
        .map(|c| {
            if repo.join(c).is_dir() {
                format!("{c}/")
            } else {
                c.to_string()
            }
        })
        .collect();
    let ignored =
        crate::git::ignored_of(&crate::git::Repos::default(), repo, &asked).unwrap_or_default();
    for c in present {
        if ignored.contains(c) {
            prep.share.push(c);
            prep.why.push(c);
        }
    }
    prep
}

pub fn run(ui: &Ui, args: &InitArgs) -> Ended {
    let dir = match std::fs::canonicalize(&args.dir) {
        Ok(d) if d.is_dir() => d,
        Ok(d) => {
            return Err(Failure::Invalid(format!(
                "`{}` is not a folder",
                d.display()
            )));
        }
        Err(e) => {
            return Err(Failure::Invalid(format!(
                "cannot open `{}`: {e}",
                args.dir.display()
            )));
        }
    };
    let out = dir.join(&args.output);
    if out.exists() && !args.force {
        return Err(Failure::Failed(format!(
            "`{}` exists; nothing was written (`--force` replaces it)",
            out.display()
        )));
    }
    let (found, skipped) = checkouts(&dir);
    for s in &skipped {
        ui.warn(s);
    }
    let agent = AGENTS.iter().find(|a| on_path(a.cli));
    let name = manifest_name(&dir);
    let text = render(&name, &dir, &found, agent);
    // The adapter first: the manifest names it, and validation checks that it exists.
    if let Some(a) = agent {
        let folder = out.parent().unwrap_or(&dir).join(AGENTS_DIR);
        let written = std::fs::create_dir_all(&folder)
            .and_then(|()| write_script(&folder.join(format!("{}.sh", a.cli)), a.adapter, true))
            .and_then(|()| write_script(&folder.join("common.sh"), COMMON, false));
        written.map_err(|e| {
            Failure::Internal(format!(
                "cannot write the adapter into `{}`: {e}",
                folder.display()
            ))
        })?;
    }
    crate::support::fs::write_atomic(&out, text.as_bytes())
        .map_err(|e| Failure::Internal(format!("cannot write `{}`: {e}", out.display())))?;
    // What was written must validate: say so plainly if it does not.
    crate::manifest::load_file(&out).map_err(|e| {
        Failure::Internal(format!(
            "the manifest written to `{}` does not validate (please report this): {e}",
            out.display()
        ))
    })?;
    eprintln!(
        "runner: wrote {}: {} repositor{}{}",
        out.display(),
        found.len(),
        if found.len() == 1 { "y" } else { "ies" },
        match agent {
            Some(a) => format!(
                ", worker `{}` (found on PATH; adapter in {AGENTS_DIR}/)",
                a.cli
            ),
            None => ", no agent CLI found on PATH: set `worker.run`".into(),
        }
    );
    // Task files already there are items the plan will show; with none, that is the next step.
    let tasks: usize = found
        .iter()
        .map(|f| {
            std::fs::read_dir(dir.join(&f.path).join(".runner-tasks"))
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
                        .count()
                })
                .unwrap_or(0)
        })
        .sum();
    if tasks == 0 {
        eprintln!(
            "runner: next, add task files under .runner-tasks/ in a repository and commit them (each item works on a branch made from the last commit, so it sees only committed files), then `runner plan {}`",
            args.output.display()
        );
    } else {
        eprintln!(
            "runner: {tasks} task file{} under .runner-tasks/ already; commit any that are not (each item works on a branch made from the last commit, so it sees only committed files), then `runner plan {}`",
            if tasks == 1 { "" } else { "s" },
            args.output.display()
        );
    }
    Ok(EXIT_OK)
}

fn write_script(path: &Path, text: &str, executable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    crate::support::fs::write_atomic(path, text.as_bytes())?;
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Whether `program` is an executable file on `PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The folder's name as a manifest name (`[A-Za-z0-9._-]`), else `starter`.
fn manifest_name(dir: &Path) -> String {
    let raw = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_start_matches(['.', '-']).to_string();
    if name.is_empty() {
        "starter".into()
    } else {
        name
    }
}

/// The git checkouts directly in `dir` (or `dir` itself when it is one and holds none), and what
/// was skipped, with why.
fn checkouts(dir: &Path) -> (Vec<Found>, Vec<String>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        if !path.is_dir() || !path.join(".git").exists() {
            continue;
        }
        let folder = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !crate::manifest::valid_name(&folder) {
            skipped.push(format!(
                "skipped checkout `{folder}`: a repository's name uses only letters, digits, `.`, `_` and `-`"
            ));
            continue;
        }
        found.push(Found {
            test: test_command(&path),
            prep: worktree_prep(&path),
            path: folder.clone(),
            name: folder,
        });
    }
    if found.is_empty() && dir.join(".git").exists() {
        found.push(Found {
            path: ".".into(),
            name: manifest_name(dir),
            test: test_command(dir),
            prep: worktree_prep(dir),
        });
    }
    (found, skipped)
}

/// The test command a project's files suggest, and what suggested it.
fn test_command(repo: &Path) -> Option<(&'static str, &'static str)> {
    let has = |f: &str| repo.join(f).exists();
    if has("Cargo.toml") {
        return Some(("cargo test", "Cargo.toml"));
    }
    if has("package.json") {
        return Some(("npm test", "package.json"));
    }
    // A Python project: pytest where the project uses it (its configuration or requirements name
    // it, or it has a conftest.py), else the standard library's runner, which needs nothing
    // installed and finds unittest-style tests.
    let configs = [
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "pytest.ini",
        "tox.ini",
    ];
    if let Some(f) = configs.into_iter().find(|f| has(f)) {
        let names_pytest =
            |p: &Path| std::fs::read_to_string(p).is_ok_and(|t| t.contains("pytest"));
        let requirements = std::fs::read_dir(repo.join("requirements"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .chain(
                [
                    "requirements.txt",
                    "requirements-dev.txt",
                    "dev-requirements.txt",
                ]
                .map(|r| repo.join(r)),
            );
        let pytest = has("conftest.py")
            || configs.iter().any(|c| names_pytest(&repo.join(c)))
            || requirements.into_iter().any(|r| names_pytest(&r));
        // A `src/` layout is importable once `src` is on the path (an editable install would
        // do it; a worktree has none).
        let src_layout = std::fs::read_dir(repo.join("src"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path().join("__init__.py").is_file());
        return Some(match (pytest, src_layout) {
            (true, false) => ("python3 -m pytest", f),
            (true, true) => ("PYTHONPATH=src python3 -m pytest", f),
            (false, false) => ("python3 -m unittest", f),
            (false, true) => ("PYTHONPATH=src python3 -m unittest", f),
        });
    }
    // Python tests with no project file: the standard library's runner finds `test_*.py`.
    let python_tests = std::fs::read_dir(repo)
        .into_iter()
        .flatten()
        .flatten()
        .chain(
            std::fs::read_dir(repo.join("tests"))
                .into_iter()
                .flatten()
                .flatten(),
        )
        .any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("test_") && n.ends_with(".py"))
        });
    if python_tests {
        return Some(("python3 -m unittest", "test_*.py files"));
    }
    if has("go.mod") {
        return Some(("go test ./...", "go.mod"));
    }
    let makefile_tests = ["Makefile", "makefile", "GNUmakefile"].iter().any(|m| {
        std::fs::read_to_string(repo.join(m))
            .is_ok_and(|t| t.lines().any(|l| l.starts_with("test:")))
    });
    makefile_tests.then_some(("make test", "Makefile"))
}

/// A YAML double-quoted string.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn render(name: &str, dir: &Path, found: &[Found], agent: Option<&Agent>) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "# A starter manifest written by `runner init` for {}.",
        dir.display()
    );
    let _ = writeln!(
        m,
        "# Each repository below is a checkout found there; each task file under .runner-tasks/ in one"
    );
    let _ = writeln!(
        m,
        "# of them becomes a work item, worked on its own branch in a worktree (your checkouts stay"
    );
    let _ = writeln!(
        m,
        "# untouched) and kept only if the repository's tests pass. `runner plan` shows what would"
    );
    let _ = writeln!(
        m,
        "# happen; `runner apply` does it. `runner schema` prints the schema editors can check it with."
    );
    let _ = writeln!(m, "version: 1");
    let _ = writeln!(m, "name: {name}");
    let _ = writeln!(m);
    let _ = writeln!(m, "capacity:");
    let _ = writeln!(m, "  # Items worked at once (never two in one repository).");
    let _ = writeln!(m, "  workers: 2");
    let _ = writeln!(m);
    let _ = writeln!(m, "repositories:");
    if found.is_empty() {
        let _ = writeln!(
            m,
            "  # No git checkout was found here: name yours (path, url or glob)."
        );
        let _ = writeln!(m, "  - glob: \"*\"");
    }
    for f in found {
        let _ = writeln!(m, "  - path: {}", quoted(&f.path));
        if f.path == "." {
            let _ = writeln!(m, "    name: {}", f.name);
        }
        match f.test {
            Some((cmd, why)) => {
                let _ = writeln!(m, "    gates:");
                let _ = writeln!(m, "      # Guessed from {why}.");
                let _ = writeln!(m, "      - name: test");
                let _ = writeln!(m, "        run: {}", quoted(cmd));
                let _ = writeln!(m, "        timeout: 30m");
            }
            None => {
                let _ = writeln!(
                    m,
                    "    # No test command could be guessed: add `gates:` with the repository's own checks."
                );
            }
        }
        if f.prep.setup.is_some() || !f.prep.share.is_empty() {
            let _ = writeln!(
                m,
                "    # A worktree holds committed files only; guessed from {}:",
                f.prep.why.join(", ")
            );
            let _ = writeln!(m, "    worktree:");
            if let Some(s) = f.prep.setup {
                let _ = writeln!(m, "      setup: {}", quoted(s));
            }
            if !f.prep.share.is_empty() {
                let shared: Vec<String> = f.prep.share.iter().map(|s| quoted(s)).collect();
                let _ = writeln!(m, "      share: [{}]", shared.join(", "));
            }
        }
    }
    let _ = writeln!(m);
    let _ = writeln!(m, "discover:");
    let _ = writeln!(m, "  - glob: \".runner-tasks/*.md\"");
    let _ = writeln!(m, "    id: \"{{match.stem}}\"");
    let _ = writeln!(m, "    branch: \"runner/{{item}}\"");
    let _ = writeln!(m, "    vars: {{ task: \"{{match.path}}\" }}");
    let _ = writeln!(m);
    match agent {
        Some(a) => {
            let _ = writeln!(
                m,
                "# `{}` was found on PATH; its adapter ({AGENTS_DIR}/{}.sh) runs it headless and tells runner",
                a.cli, a.cli
            );
            let _ = writeln!(
                m,
                "# the provider's failures (exit 75) from its own, and what it spent ($RUNNER_USAGE)."
            );
            let _ = writeln!(m, "models:");
            let _ = writeln!(m, "  primary: {}", quoted(a.primary));
            if let Some(f) = a.fallback {
                let _ = writeln!(m, "  fallbacks: [{}]", quoted(f));
            }
            let _ = writeln!(m, "  threshold: 2");
            let _ = writeln!(m);
            let _ = writeln!(m, "worker:");
            let _ = writeln!(
                m,
                "  run: [\"./{AGENTS_DIR}/{}.sh\", \"{{model}}\", \"{{item.task}}\"]",
                a.cli
            );
            let _ = writeln!(m, "  timeout: 45m");
            let _ = writeln!(m, "  attempts: 2");
            let _ = writeln!(m);
            let _ = writeln!(m, "env:");
            let _ = writeln!(m, "  pass: [PATH, HOME, LANG]");
            let secrets: Vec<String> = a.secrets.iter().map(|s| s.to_string()).collect();
            let _ = writeln!(
                m,
                "  # Passed to the agent and redacted from every log and report."
            );
            let _ = writeln!(m, "  secrets: [{}]", secrets.join(", "));
            write_sandbox(&mut m, a);
            let _ = writeln!(
                m,
                "# Stop starting new items once the agents report this much spent (exit 5)."
            );
            let _ = writeln!(m, "budget: {{ cost_usd: 20 }}");
        }
        None => {
            let _ = writeln!(
                m,
                "# No agent CLI (claude, codex, gemini, aider, opencode) was found on PATH. Set `run` to the"
            );
            let _ = writeln!(
                m,
                "# command that does the work; runner's repository has adapters in manifests/agents/."
            );
            let _ = writeln!(m, "worker:");
            let _ = writeln!(
                m,
                "  run: \"echo 'set worker.run in {}' >&2; exit 1\"",
                name
            );
            let _ = writeln!(m, "  timeout: 45m");
        }
    }
    m
}
