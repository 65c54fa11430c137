//! `repositories`: declared paths, clone urls and globs, with their per-repository overrides.

use super::*;

impl Cx {
    pub(super) fn repositories(
        &mut self,
        node: &Node,
        models: bool,
    ) -> Option<Vec<RepositorySpec>> {
        let nodes = self.list(node, "repositories")?;
        if nodes.is_empty() {
            self.err(
                "invalid-value",
                "repositories",
                node.span,
                "name at least one repository",
            );
            return None;
        }
        let mut out = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if let Some(r) = self.repository(n, i, models, &mut names) {
                out.push(r);
            }
        }
        Some(out)
    }

    /// `repositories[i]`; `names` holds the names declared before it, and where.
    fn repository(
        &mut self,
        n: &Node,
        i: usize,
        models: bool,
        names: &mut HashMap<String, usize>,
    ) -> Option<RepositorySpec> {
        let p = index("repositories", i);
        let m = self.map(n, &p, REPOSITORY_KEYS)?;
        let sources: Vec<&str> = ["path", "url", "glob"]
            .into_iter()
            .filter(|k| m.has(k))
            .collect();
        if sources.len() != 1 {
            let msg = if sources.is_empty() {
                "a repository needs exactly one of `path`, `url` or `glob`".to_string()
            } else {
                format!(
                    "a repository takes exactly one of `path`, `url` or `glob`, found {}",
                    sources
                        .iter()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                )
            };
            self.err("invalid-repository", &p, m.span, msg);
        }
        let get_str =
            |cx: &mut Cx, key: &str| m.get(key).and_then(|v| cx.nonempty(v, &child(&p, key)));
        let path = get_str(self, "path");
        let url = get_str(self, "url");
        let glob = get_str(self, "glob");
        if let (Some(g), Some(gn)) = (&glob, m.get("glob")) {
            self.glob_entry(&m, &p, g, gn);
        }
        let explicit_name = m.get("name").and_then(|nn| {
            let np = child(&p, "name");
            let s = self.nonempty(nn, &np)?;
            if !valid_name(&s) {
                self.err("invalid-value", &np, nn.span, format!("repository name `{s}` may use only letters, digits, `.`, `_` and `-`, and may not start with `.`"));
                return None;
            }
            Some(s)
        });
        let derived = if glob.is_some() {
            None
        } else if let Some(n) = &explicit_name {
            Some(n.clone())
        } else {
            self.derived_name(&m, &p, path.as_deref(), url.as_deref())
        };
        if let Some(name) = &derived {
            let at = m
                .get("name")
                .or(m.get("path"))
                .or(m.get("url"))
                .map_or(m.span, |n| n.span);
            if let Some(first) = names.insert(name.clone(), i) {
                self.err_help(
                    "duplicate",
                    &p,
                    at,
                    format!("repository `{name}` is already declared at `repositories[{first}]`"),
                    "repository names must be unique; set `name` to tell them apart",
                );
            }
        }
        let base = m
            .get("base")
            .and_then(|v| self.nonempty(v, &child(&p, "base")));
        let critical_base = m
            .get("critical_base")
            .and_then(|v| self.string_list(v, &child(&p, "critical_base"), "marker"));
        let optional = m
            .get("optional")
            .and_then(|v| self.boolean(v, &child(&p, "optional")))
            .unwrap_or(false);
        let worker = m
            .get("worker")
            .map(|v| self.worker(v, &child(&p, "worker"), models, Some(i)));
        let gates = m
            .get("gates")
            .map(|v| self.gates(v, &child(&p, "gates"), models, Some(i)));
        let rmodels = m
            .get("models")
            .map(|v| self.models(v, &child(&p, "models")));
        let env = m.get("env").map(|v| self.env(v, &child(&p, "env")));
        let worktree = m
            .get("worktree")
            .and_then(|v| self.worktree(v, &child(&p, "worktree")));
        let worker = worker.flatten().map(|w| WorkerOverride {
            run: match w.run {
                CommandSpec::Argv(v) if v.is_empty() => None,
                r => Some(r),
            },
            timeout: w.timeout,
            grace: w.grace,
            env: w.env,
            attempts: w.attempts,
        });
        Some(RepositorySpec {
            name: derived.or(explicit_name),
            path,
            url,
            glob,
            base,
            critical_base: critical_base.unwrap_or_default(),
            optional,
            worker,
            gates: gates.flatten(),
            models: rmodels.flatten(),
            env: env.flatten(),
            worktree,
            span: n.span,
        })
    }

    /// A `glob` entry: the glob compiles, and no `name` (each match is named after its folder).
    fn glob_entry(&mut self, m: &MapView<'_>, p: &str, glob: &str, at: &Node) {
        if let Err(e) = compile_glob(glob) {
            self.err(
                "invalid-glob",
                &child(p, "glob"),
                at.span,
                format!("`{glob}` is not a valid glob: {e}"),
            );
        }
        if let Some(nn) = m.get("name") {
            self.err_help(
                "invalid-repository",
                &child(p, "name"),
                nn.span,
                "a `glob` entry cannot take a `name`",
                "each repository a glob matches is named after its folder",
            );
        }
    }

    /// The name of an entry without `name`: its path's last folder, or its url's.
    fn derived_name(
        &mut self,
        m: &MapView<'_>,
        p: &str,
        path: Option<&str>,
        url: Option<&str>,
    ) -> Option<String> {
        if let Some(pth) = path {
            let full = normalize(&self.dir.join(pth));
            let name = full
                .file_name()
                .and_then(|f| f.to_str())
                .filter(|f| valid_name(f));
            if name.is_none() {
                self.err_help(
                    "invalid-repository",
                    &child(p, "path"),
                    m.get("path").map_or(m.span, |n| n.span),
                    format!("cannot name a repository after `{pth}`"),
                    "give it a `name`",
                );
            }
            return name.map(str::to_string);
        }
        let u = url?;
        let name = name_from_url(u);
        if name.is_none() {
            self.err_help(
                "invalid-repository",
                &child(p, "url"),
                m.get("url").map_or(m.span, |n| n.span),
                "cannot name a repository after its url",
                "give it a `name`",
            );
        }
        name
    }
}
