//! The cross-section checks: items against repositories, template variables against the items
//! that use them, and repository overrides that must narrow, never widen, the top level.

use super::*;

impl Cx {
    /// A relative program path (`./worker.sh`, `bin/agent`) resolves against the manifest's
    /// folder; one that is not there would fail every item at `apply`, so it is a problem now.
    /// Programs named by a template or looked up on `PATH`, and string commands (which `sh`
    /// reads), are left to run time.
    pub(super) fn check_programs(&mut self, root: &Node, m: &Manifest) {
        let mut commands: Vec<(Vec<String>, &CommandSpec)> =
            vec![(vec!["worker".into(), "run".into()], &m.worker.run)];
        for (i, g) in m.gates.iter().enumerate() {
            commands.push((vec!["gates".into(), i.to_string(), "run".into()], &g.run));
        }
        if let Some(p) = m.capacity.as_ref().and_then(|c| c.probe.as_ref()) {
            commands.push((vec!["capacity".into(), "probe".into()], p));
        }
        for (r, repo) in m.repositories.iter().enumerate() {
            let at = |rest: &[&str]| {
                let mut v = vec!["repositories".to_string(), r.to_string()];
                v.extend(rest.iter().map(|s| s.to_string()));
                v
            };
            if let Some(run) = repo.worker.as_ref().and_then(|w| w.run.as_ref()) {
                commands.push((at(&["worker", "run"]), run));
            }
            for (i, g) in repo.gates.iter().flatten().enumerate() {
                commands.push((at(&["gates", &i.to_string(), "run"]), &g.run));
            }
        }
        for (path, cmd) in commands {
            let CommandSpec::Argv(argv) = cmd else {
                continue;
            };
            let Some(program) = argv.first() else {
                continue;
            };
            if !program.contains('/') || program.starts_with('/') || program.contains('{') {
                continue;
            }
            let resolved = normalize(&self.dir.join(program));
            if resolved.exists() {
                continue;
            }
            let mut key: Vec<&str> = path.iter().map(String::as_str).collect();
            let whole = key.join(".");
            key.push("0");
            let span = root
                .lookup(&key)
                .or_else(|| root.lookup(&key[..key.len() - 1]))
                .map(|n| n.span)
                .unwrap_or_default();
            self.err_help(
                "program-not-found",
                &whole,
                span,
                format!(
                    "`{program}` does not exist in the manifest's folder (`{}`)",
                    resolved.display()
                ),
                "a relative program path resolves against the manifest's folder; give a path from there, an absolute path, or a name to look up on `PATH`",
            );
        }
    }

    /// Items must name a declared repository (or one a `glob` entry could match) and be unique
    /// within it.
    pub(super) fn check_items(
        &mut self,
        repos: &[RepositorySpec],
        items: &[ItemSpec],
        node: Option<&Node>,
    ) {
        let item_nodes: &[Node] = match node.map(|n| &n.value) {
            Some(Value::Seq(v)) => v,
            _ => &[],
        };
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        let scopes = RepoScopes::new(repos);
        for (i, item) in items.iter().enumerate() {
            let p = index("items", i);
            let field_span = |key: &str| -> Span {
                item_nodes
                    .iter()
                    .find(|n| n.span == item.span)
                    .and_then(|n| match &n.value {
                        Value::Map(e) => e
                            .iter()
                            .find(|(k, _)| k.value_str() == key)
                            .map(|(_, v)| v.span),
                        _ => None,
                    })
                    .unwrap_or(item.span)
            };
            if scopes.of(&item.repo).is_none() {
                let mut known: Vec<&str> = repos.iter().filter_map(|r| r.name.as_deref()).collect();
                known.dedup();
                let help = match suggest(&item.repo, &known) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None if known.is_empty() => "declare it under `repositories`".to_string(),
                    None => format!("declared repositories: {}", known.join(", ")),
                };
                self.err_help(
                    "undeclared-repo",
                    &child(&p, "repo"),
                    field_span("repo"),
                    format!(
                        "item names repository `{}`, which is not declared",
                        item.repo
                    ),
                    help,
                );
            }
            if let Some(first) = seen.insert((&item.repo, &item.id), i) {
                self.err(
                    "duplicate",
                    &child(&p, "id"),
                    field_span("id"),
                    format!(
                        "item `{}` of repository `{}` is already defined at `items[{first}]`",
                        item.id, item.repo
                    ),
                );
            }
        }
    }

    /// Every `{item.<var>}` a worker or gate template uses must be defined by every item that
    /// will render it: explicit items of the repositories it applies to, and every discovery.
    pub(super) fn check_item_vars(
        &mut self,
        repos: &[RepositorySpec],
        items: Option<&Vec<ItemSpec>>,
        discover: Option<&Vec<DiscoverSpec>>,
    ) {
        let uses = std::mem::take(&mut self.uses);
        let scopes = RepoScopes::new(repos);
        for u in &uses {
            for var in &u.vars {
                let mut missing: Vec<String> = Vec::new();
                for item in items.into_iter().flatten() {
                    let Some(scope) = scopes.of(&item.repo) else {
                        continue;
                    };
                    if applies(&u.owner, scope, repos) && !item.vars.contains_key(var) {
                        missing.push(format!("item `{}/{}`", item.repo, item.id));
                    }
                }
                for (di, d) in discover.into_iter().flatten().enumerate() {
                    let reaches = (0..repos.len()).any(|r| applies(&u.owner, r, repos));
                    if reaches && !d.vars.contains_key(var) {
                        missing.push(format!("`discover[{di}]`"));
                    }
                }
                if !missing.is_empty() {
                    let n = missing.len();
                    let listed = if n > 3 {
                        format!("{} and {} more", missing[..3].join(", "), n - 3)
                    } else {
                        missing.join(", ")
                    };
                    self.err_help(
                        "undefined-var",
                        &u.path,
                        u.span,
                        format!("`{{item.{var}}}` is not defined by {listed}"),
                        format!(
                            "define `{var}` in the `vars` of every item this template runs for"
                        ),
                    );
                }
            }
        }
        self.uses = uses;
    }

    /// Repository overrides may narrow the top level, never widen it.
    pub(super) fn check_overrides(
        &mut self,
        repos: &[RepositorySpec],
        worker: Option<&Worker>,
        gates: Option<&Vec<Gate>>,
        models: Option<&Models>,
        env: Option<&EnvPolicy>,
        root: &Node,
    ) {
        let repo_nodes: Vec<&Node> = match &root.value {
            Value::Map(e) => e
                .iter()
                .find(|(k, _)| k.value_str() == "repositories")
                .and_then(|(_, v)| match &v.value {
                    Value::Seq(s) => Some(s.iter().collect()),
                    _ => None,
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for (i, r) in repos.iter().enumerate() {
            let o = Override {
                p: index("repositories", i),
                node: repo_nodes.iter().find(|n| n.span == r.span).copied(),
                span: r.span,
            };
            if let (Some(w), Some(top)) = (&r.worker, worker) {
                self.widened_worker(&o, w, top);
            }
            if let Some(rg) = &r.gates {
                self.widened_gates(&o, rg, gates.map(Vec::as_slice).unwrap_or(&[]));
            }
            if let Some(rm) = &r.models {
                self.widened_models(&o, rm, models);
            }
            if let Some(re) = &r.env {
                self.widened_env(&o, re, env);
            }
        }
    }

    /// A widened override: `what` at `key` (below the repository's entry) goes beyond the top
    /// level.
    fn widened(&mut self, o: &Override<'_>, key: &[&str], what: impl Into<String>) {
        self.widened_at(o, key, &key.join("."), what);
    }

    fn widened_worker(&mut self, o: &Override<'_>, w: &WorkerOverride, top: &Worker) {
        if let Some(t) = w.timeout
            && t.0 > top.timeout()
        {
            let what = format!(
                "{} exceeds the top-level worker timeout of {}",
                format_duration(t.0),
                format_duration(top.timeout())
            );
            self.widened(o, &["worker", "timeout"], what);
        }
        if let Some(g) = w.grace
            && g.0 > top.grace()
        {
            let what = format!(
                "{} exceeds the top-level worker grace of {}",
                format_duration(g.0),
                format_duration(top.grace())
            );
            self.widened(o, &["worker", "grace"], what);
        }
        if let Some(a) = w.attempts
            && a > top.attempts()
        {
            let what = format!("{a} attempts exceed the top level's {}", top.attempts());
            self.widened(o, &["worker", "attempts"], what);
        }
    }

    /// A repository's gate may not run or linger longer than the top-level gate of its name, or
    /// (a gate of its own) than the longest top-level one.
    fn widened_gates(&mut self, o: &Override<'_>, rg: &[Gate], top_gates: &[Gate]) {
        let ceiling = top_gates
            .iter()
            .map(Gate::timeout)
            .max()
            .unwrap_or(DEFAULT_GATE_TIMEOUT);
        let grace_ceiling = top_gates
            .iter()
            .map(Gate::grace)
            .max()
            .unwrap_or(DEFAULT_GRACE);
        for (gi, g) in rg.iter().enumerate() {
            let gis = gi.to_string();
            let same = top_gates.iter().find(|t| t.name == g.name);
            let (limit, what) = match same {
                Some(t) => (
                    t.timeout(),
                    format!("the top-level `{}` gate's timeout", t.name),
                ),
                None => (ceiling, "the longest top-level gate timeout".to_string()),
            };
            if g.timeout() > limit {
                let what = format!(
                    "{} exceeds {what} of {}",
                    format_duration(g.timeout()),
                    format_duration(limit)
                );
                let shown = format!("gates[{gi}].timeout");
                self.widened_at(o, &["gates", &gis, "timeout"], &shown, what);
            }
            let glimit = same.map_or(grace_ceiling, Gate::grace);
            if g.grace() > glimit {
                let what = format!(
                    "grace {} exceeds the top level's {}",
                    format_duration(g.grace()),
                    format_duration(glimit)
                );
                let shown = format!("gates[{gi}].grace");
                self.widened_at(o, &["gates", &gis, "grace"], &shown, what);
            }
        }
    }

    /// A repository's models come from the top-level chain.
    fn widened_models(&mut self, o: &Override<'_>, rm: &Models, top: Option<&Models>) {
        let Some(top) = top else {
            let what = "the top level names no models, so a repository cannot add any";
            self.widened_at(o, &["models"], "models", what);
            return;
        };
        let chain = top.chain();
        for (mi, model) in rm.chain().iter().enumerate() {
            if chain.contains(model) {
                continue;
            }
            let fallback = mi.saturating_sub(1).to_string();
            let key: &[&str] = if mi == 0 {
                &["models", "primary"]
            } else {
                &["models", "fallbacks", &fallback]
            };
            let what = format!(
                "model `{model}` is not in the top-level chain ({})",
                chain.join(", ")
            );
            self.widened_at(o, key, "models", what);
        }
    }

    /// [`Cx::widened`], named at `shown` below the repository's entry rather than at `key`.
    fn widened_at(&mut self, o: &Override<'_>, key: &[&str], shown: &str, what: impl Into<String>) {
        self.err_help(
            "widened-override",
            &format!("{}.{shown}", o.p),
            o.at(key),
            what,
            "a repository may narrow the top level but never widen it",
        );
    }

    /// A repository passes and holds as secret only what the top level does.
    fn widened_env(&mut self, o: &Override<'_>, re: &EnvPolicy, top: Option<&EnvPolicy>) {
        let top_pass = top
            .map(EnvPolicy::pass)
            .unwrap_or_else(|| DEFAULT_ENV_PASS.iter().map(|s| s.to_string()).collect());
        let top_secrets = top.map(|e| e.secrets.clone()).unwrap_or_default();
        for (vi, v) in re.pass.iter().flatten().enumerate() {
            if !top_pass.contains(v) {
                let what = format!("`{v}` is not passed by the top level");
                self.widened_at(
                    o,
                    &["env", "pass", &vi.to_string()],
                    &format!("env.pass[{vi}]"),
                    what,
                );
            }
        }
        for (vi, v) in re.secrets.iter().enumerate() {
            if !top_secrets.contains(v) {
                let what = format!("`{v}` is not a top-level secret");
                self.widened_at(
                    o,
                    &["env", "secrets", &vi.to_string()],
                    &format!("env.secrets[{vi}]"),
                    what,
                );
            }
        }
    }
}

/// A repository entry whose overrides are checked: its path in problems, and where it is.
struct Override<'n> {
    p: String,
    node: Option<&'n Node>,
    span: Span,
}

impl Override<'_> {
    /// Where `path` below the entry is written, or the entry itself.
    fn at(&self, path: &[&str]) -> Span {
        self.node
            .and_then(|n| n.lookup(path))
            .map_or(self.span, |n| n.span)
    }
}

pub(super) fn valid_var_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The index of the repository entry an item's `repo` refers to: a named entry, or else the first
/// `glob` entry whose last segment could match that name. Globs are compiled once, not per item.
pub(crate) struct RepoScopes<'a> {
    repos: &'a [RepositorySpec],
    /// Per entry, the matcher of its glob's last segment (`None` for `**`, which matches all).
    globs: Vec<Option<Option<GlobMatcher>>>,
}

impl<'a> RepoScopes<'a> {
    pub fn new(repos: &'a [RepositorySpec]) -> Self {
        let globs = repos
            .iter()
            .map(|r| {
                r.glob.as_deref().and_then(|g| {
                    let last = g.trim_end_matches('/').rsplit('/').next().unwrap_or(g);
                    if last == "**" {
                        Some(None)
                    } else {
                        Glob::new(last).ok().map(|gl| Some(gl.compile_matcher()))
                    }
                })
            })
            .collect();
        RepoScopes { repos, globs }
    }

    pub fn of(&self, name: &str) -> Option<usize> {
        if let Some(i) = self
            .repos
            .iter()
            .position(|r| r.name.as_deref() == Some(name))
        {
            return Some(i);
        }
        self.globs.iter().position(|g| match g {
            Some(None) => true,
            Some(Some(m)) => m.is_match(name),
            None => false,
        })
    }
}

/// Does a template of `owner` render for items of repository entry `scope`?
pub(super) fn applies(owner: &Owner, scope: usize, repos: &[RepositorySpec]) -> bool {
    match owner {
        Owner::Repo(r, _) => *r == scope,
        Owner::Top(field) => {
            let r = &repos[scope];
            match field {
                Field::WorkerRun => r.worker.as_ref().is_none_or(|w| w.run.is_none()),
                Field::WorkerEnv(k) => r.worker.as_ref().is_none_or(|w| !w.env.contains_key(k)),
                Field::Gates => r.gates.is_none(),
            }
        }
    }
}
