//! The top level and the sections without cross-references: `capacity`, `models`, `worker`,
//! `gates`, `env`, `reports`.

use super::*;

impl Cx {
    pub(super) fn manifest(&mut self, root: &Node) -> Option<Manifest> {
        let m = self.map(root, "", TOP_KEYS)?;
        let version = self.required(&m, "", "version").and_then(|n| {
            let v = self.int(n, "version", i128::MIN, i128::MAX)?;
            if v != 1 {
                self.err(
                    "unsupported-version",
                    "version",
                    n.span,
                    format!("version {v} is not supported; this runner reads version 1"),
                );
                return None;
            }
            Some(1)
        });
        let name = self.required(&m, "", "name").and_then(|n| {
            let s = self.nonempty(n, "name")?;
            if s.chars().any(char::is_control) || s.len() > 100 {
                self.err(
                    "invalid-value",
                    "name",
                    n.span,
                    "must be at most 100 characters without control characters",
                );
                return None;
            }
            Some(s)
        });
        let capacity = m.get("capacity").map(|n| self.capacity(n));
        let models = m.get("models").map(|n| self.models(n, "models"));
        let has_models = matches!(models, Some(Some(_)));
        let worker = self
            .required(&m, "", "worker")
            .and_then(|n| self.worker(n, "worker", has_models, None));
        let gates = m
            .get("gates")
            .map(|n| self.gates(n, "gates", has_models, None));
        let env = m.get("env").map(|n| self.env(n, "env"));
        let repositories = self
            .required(&m, "", "repositories")
            .and_then(|n| self.repositories(n, has_models));
        let mut items = m.get("items").map(|n| self.items(n));
        let discover = m.get("discover").map(|n| self.discover(n));
        let sources = m.get("sources").map(|n| self.sources(n));
        let stall = m.get("stall").and_then(|n| {
            let s = self.map(n, "stall", STALL_KEYS)?;
            let after = s
                .get("after")
                .map(|a| self.u32(a, "stall.after", 1, 10_000));
            Some(Stall {
                after: after.flatten(),
            })
        });
        let budget = m.get("budget").and_then(|n| self.budget(n));
        let publish = m.get("publish").and_then(|n| self.publish(n));
        let notify = m.get("notify").and_then(|n| self.notify(n));
        let worktree = m.get("worktree").and_then(|n| self.worktree(n, "worktree"));
        let reports = m.get("reports").and_then(|n| self.reports(n));
        let sandbox = m.get("sandbox").and_then(|n| self.sandbox(n));
        let workspace = m
            .get("workspace")
            .and_then(|n| self.nonempty(n, "workspace"));
        let resources = m
            .get("resources")
            .and_then(|n| self.resources(n))
            .unwrap_or_default();
        for (path, name, span) in std::mem::take(&mut self.resource_uses) {
            if !resources.contains_key(&name) {
                let declared: Vec<&str> = resources.keys().map(String::as_str).collect();
                self.err_help(
                    "unknown-resource",
                    &path,
                    span,
                    format!("`{name}` is not a declared resource"),
                    if declared.is_empty() {
                        "declare it under `resources:` with how many may use it at once, e.g. `resources: {browser: 1}`".to_string()
                    } else {
                        format!("declared resources: {}", declared.join(", "))
                    },
                );
            }
        }

        // Cross-checks over whatever parsed.
        if let (Some(repos), Some(Some(items))) = (&repositories, &mut items) {
            self.check_items(repos, items, m.get("items"));
            self.check_after(items);
        }
        if let Some(repos) = &repositories {
            self.check_overrides(
                repos,
                worker.as_ref(),
                gates.as_ref().and_then(|g| g.as_ref()),
                models.as_ref().and_then(|m| m.as_ref()),
                env.as_ref().and_then(|e| e.as_ref()),
                root,
            );
            self.check_item_vars(
                repos,
                items.as_ref().and_then(|i| i.as_ref()),
                discover.as_ref().and_then(|d| d.as_ref()),
            );
        }

        if !self.problems.is_empty() {
            return None;
        }
        Some(Manifest {
            version: version?,
            name: name?,
            capacity: capacity.flatten(),
            repositories: repositories?,
            models: models.flatten(),
            worker: worker?,
            gates: gates.flatten().unwrap_or_default(),
            items: items.flatten().unwrap_or_default(),
            discover: discover.flatten().unwrap_or_default(),
            sources: sources.flatten().unwrap_or_default(),
            env: env.flatten(),
            stall,
            budget,
            publish,
            notify,
            reports,
            workspace,
            resources,
            worktree,
            sandbox,
        })
    }

    /// `budget`: what a run, a day and a month of runs may spend.
    fn budget(&mut self, n: &Node) -> Option<Budget> {
        let b = self.map(n, "budget", BUDGET_KEYS)?;
        let mut amount = |key: &str| -> Option<f64> {
            let c = b.get(key)?;
            let path = format!("budget.{key}");
            let usd = match c.value {
                Value::Int(i) => i as f64,
                Value::Float(f) => f,
                _ => {
                    self.wrong_type(c, &path, "an amount of US dollars such as `50`");
                    return None;
                }
            };
            if !(usd.is_finite() && usd > 0.0) {
                self.err(
                    "invalid-value",
                    &path,
                    c.span,
                    format!("must be more than 0, found {usd}"),
                );
                return None;
            }
            Some(usd)
        };
        let budget = Budget {
            cost_usd: amount("cost_usd"),
            daily_usd: amount("daily_usd"),
            monthly_usd: amount("monthly_usd"),
        };
        if BUDGET_KEYS.iter().all(|k| b.get(k).is_none()) {
            self.err(
                "missing-key",
                "budget",
                n.span,
                "give at least one of `cost_usd`, `daily_usd`, `monthly_usd`".to_string(),
            );
            return None;
        }
        (budget.cost_usd.is_some() || budget.daily_usd.is_some() || budget.monthly_usd.is_some())
            .then_some(budget)
    }

    /// `worktree` (top level, or a repository's): setup, its timeout, paths to share.
    pub(super) fn worktree(&mut self, node: &Node, path: &str) -> Option<WorktreePrep> {
        let m = self.map(node, path, WORKTREE_KEYS)?;
        let setup = m.get("setup").and_then(|n| {
            let p = child(path, "setup");
            let c = self.command(n, &p)?;
            for part in c.parts() {
                if let Err(e) = template::placeholders(part).and_then(|vars| {
                    match vars
                        .iter()
                        .find(|v| !SETUP_VARS.contains(&v.strip_prefix(template::RAW).unwrap_or(v)))
                    {
                        Some(v) => Err(format!(
                            "unknown placeholder `{{{v}}}`; here you may use {}",
                            SETUP_VARS
                                .iter()
                                .map(|v| format!("`{{{v}}}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                        None => Ok(()),
                    }
                }) {
                    self.err("unknown-placeholder", &p, n.span, e);
                }
            }
            Some(c)
        });
        let timeout = m
            .get("timeout")
            .and_then(|n| self.duration(n, &child(path, "timeout"), false));
        let share = m
            .get("share")
            .and_then(|n| {
                let p = child(path, "share");
                let list = self.string_list(n, &p, "path")?;
                for s in &list {
                    let bad = s.is_empty()
                        || s.starts_with('/')
                        || s.split('/').any(|c| c == ".." || c == ".git")
                        || s.contains(['*', '?', '[', '{', '\\']);
                    if bad {
                        self.err_help(
                            "invalid-value",
                            &p,
                            n.span,
                            format!("`{s}` is not a path inside the checkout"),
                            "give paths relative to the repository's top, such as `node_modules` or `.venv`, without `..`, `.git` or glob characters",
                        );
                    }
                }
                Some(list)
            })
            .unwrap_or_default();
        Some(WorktreePrep {
            setup,
            timeout,
            share,
        })
    }

    fn publish(&mut self, node: &Node) -> Option<Publish> {
        let m = self.map(node, "publish", PUBLISH_KEYS)?;
        let push = m.get("push").and_then(|n| self.boolean(n, "publish.push"));
        let remote = m.get("remote").and_then(|n| {
            let r = self.nonempty(n, "publish.remote")?;
            if r.starts_with('-') || r.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.err(
                    "invalid-value",
                    "publish.remote",
                    n.span,
                    format!("`{r}` is not a remote's name"),
                );
                return None;
            }
            Some(r)
        });
        let pr = m
            .get("pr")
            .and_then(|n| self.publish_command(n, "publish.pr"));
        let state = m
            .get("state")
            .and_then(|n| self.publish_command(n, "publish.state"));
        let timeout = m
            .get("timeout")
            .and_then(|n| self.duration(n, "publish.timeout", false));
        let review_rounds = m
            .get("review_rounds")
            .and_then(|n| self.u32(n, "publish.review_rounds", 0, 100));
        Some(Publish {
            push,
            remote,
            pr,
            state,
            review_rounds,
            timeout,
        })
    }

    /// A command of `publish` (`pr`, `state`): its placeholders are the branch's.
    fn publish_command(&mut self, n: &Node, path: &str) -> Option<CommandSpec> {
        let c = self.command(n, path)?;
        for part in c.parts() {
            let bad = template::placeholders(part).and_then(|p| {
                match p
                    .iter()
                    .find(|v| !PUBLISH_VARS.contains(&v.strip_prefix(template::RAW).unwrap_or(v)))
                {
                    Some(v) => Err(format!(
                        "unknown placeholder `{{{v}}}`; here you may use {}",
                        PUBLISH_VARS
                            .iter()
                            .map(|v| format!("`{{{v}}}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    None => Ok(()),
                }
            });
            if let Err(e) = bad {
                self.err("unknown-placeholder", path, n.span, e);
            }
        }
        Some(c)
    }

    pub(super) fn capacity(&mut self, node: &Node) -> Option<Capacity> {
        let m = self.map(node, "capacity", CAPACITY_KEYS)?;
        let workers = m.get("workers").map(|n| {
            if let Value::Int(0) = n.value {
                self.err_help(
                    "invalid-value",
                    "capacity.workers",
                    n.span,
                    "`workers: 0` would never run anything",
                    "omit `workers` to use the number of CPUs",
                );
                return None;
            }
            self.u32(n, "capacity.workers", 1, 1024)
        });
        let probe = m.get("probe").map(|n| {
            let c = self.command(n, "capacity.probe")?;
            for part in c.parts() {
                if let Err(e) = template::placeholders(part).and_then(|p| match p.first() {
                    Some(name) => Err(format!(
                        "unknown placeholder `{{{name}}}`; the probe takes no placeholders"
                    )),
                    None => Ok(()),
                }) {
                    self.err("unknown-placeholder", "capacity.probe", n.span, e);
                }
            }
            Some(c)
        });
        Some(Capacity {
            workers: workers.flatten(),
            probe: probe.flatten(),
        })
    }

    pub(super) fn models(&mut self, node: &Node, path: &str) -> Option<Models> {
        let m = self.map(node, path, MODELS_KEYS)?;
        let primary = self.required(&m, path, "primary").and_then(|n| {
            let p = child(path, "primary");
            if let Value::Null = n.value {
                self.err(
                    "empty-chain",
                    &p,
                    n.span,
                    "the model chain is empty: name a primary model",
                );
                return None;
            }
            let s = self.string(n, &p)?;
            if s.trim().is_empty() {
                self.err(
                    "empty-chain",
                    &p,
                    n.span,
                    "the model chain is empty: name a primary model",
                );
                return None;
            }
            Some(s)
        });
        let fallbacks = m.get("fallbacks").map(|n| {
            let p = child(path, "fallbacks");
            let list = self.string_list(n, &p, "model")?;
            if let (Some(primary), Value::Seq(nodes)) = (&primary, &n.value) {
                for (i, f) in list.iter().enumerate() {
                    if f == primary {
                        self.err(
                            "duplicate",
                            &index(&p, i),
                            nodes[i].span,
                            format!(
                                "model `{f}` is already the primary; a chain names each model once"
                            ),
                        );
                    }
                }
            }
            Some(list)
        });
        let threshold = m
            .get("threshold")
            .map(|n| self.u32(n, &child(path, "threshold"), 1, 100));
        let provider_failure = m.get("provider_failure").map(|n| {
            let p = child(path, "provider_failure");
            let pf = self.map(n, &p, PROVIDER_FAILURE_KEYS)?;
            let mut codes = |key: &str, taken: &[i32]| {
                pf.get(key).map(|n| {
                    let ep = child(&p, key);
                    let nodes = self.list(n, &ep)?;
                    let mut out = Vec::new();
                    for (i, c) in nodes.iter().enumerate() {
                        let code = self.int(c, &index(&ep, i), 1, 255)? as i32;
                        if out.contains(&code) {
                            self.err(
                                "duplicate",
                                &index(&ep, i),
                                c.span,
                                format!("exit code {code} is listed twice"),
                            );
                        } else if taken.contains(&code) {
                            self.err(
                                "duplicate",
                                &index(&ep, i),
                                c.span,
                                format!(
                                    "exit code {code} is also a provider failure (`exit_codes`): a code means one thing"
                                ),
                            );
                        }
                        out.push(code);
                    }
                    Some(out)
                })
            };
            let exit_codes = codes("exit_codes", &[]);
            let taken = exit_codes
                .clone()
                .flatten()
                .unwrap_or_else(|| crate::manifest::DEFAULT_PROVIDER_EXIT_CODES.to_vec());
            let refused_exit_codes = codes("refused_exit_codes", &taken);
            let patterns = pf
                .get("patterns")
                .map(|n| self.string_list(n, &child(&p, "patterns"), "pattern"));
            let silence = pf
                .get("silence")
                .map(|n| self.duration(n, &child(&p, "silence"), false));
            Some(ProviderFailure {
                exit_codes: exit_codes.flatten(),
                refused_exit_codes: refused_exit_codes.flatten(),
                patterns: patterns.flatten().unwrap_or_default(),
                silence: silence.flatten(),
            })
        });
        let backoff = m.get("backoff").and_then(|n| {
            let p = child(path, "backoff");
            let b = self.map(n, &p, BACKOFF_KEYS)?;
            let initial = b
                .get("initial")
                .and_then(|n| self.duration(n, &child(&p, "initial"), true));
            let max = b
                .get("max")
                .and_then(|n| self.duration(n, &child(&p, "max"), true));
            let (i, x) = (
                initial.map_or(DEFAULT_BACKOFF_INITIAL, |d| d.0),
                max.map_or(DEFAULT_BACKOFF_MAX, |d| d.0),
            );
            if i > x {
                self.err(
                    "invalid-value",
                    &p,
                    n.span,
                    format!(
                        "`initial` ({}) is longer than `max` ({})",
                        format_duration(i),
                        format_duration(x)
                    ),
                );
            }
            Some(BackoffSpec { initial, max })
        });
        let primary = primary?;
        let fallbacks = fallbacks.flatten().unwrap_or_default();
        let chain: Vec<&str> = std::iter::once(primary.as_str())
            .chain(fallbacks.iter().map(String::as_str))
            .collect();
        let prices = m
            .get("prices")
            .and_then(|n| self.prices(n, &child(path, "prices"), &chain))
            .unwrap_or_default();
        Some(Models {
            primary,
            fallbacks,
            threshold: threshold.flatten(),
            provider_failure: provider_failure.flatten(),
            backoff,
            prices,
        })
    }

    pub(super) fn worker(
        &mut self,
        node: &Node,
        path: &str,
        models: bool,
        repo: Option<usize>,
    ) -> Option<Worker> {
        let keys = if repo.is_some() {
            WORKER_OVERRIDE_KEYS
        } else {
            WORKER_KEYS
        };
        let m = self.map(node, path, keys)?;
        let run_node = if repo.is_some() {
            m.get("run")
        } else {
            self.required(&m, path, "run")
        };
        let run = run_node.and_then(|n| {
            let p = child(path, "run");
            let cmd = self.command(n, &p)?;
            let owner = match repo {
                Some(r) => Owner::Repo(r, Field::WorkerRun),
                None => Owner::Top(Field::WorkerRun),
            };
            self.command_templates(n, &p, &cmd, models, owner);
            Some(cmd)
        });
        let timeout = m
            .get("timeout")
            .map(|n| self.duration(n, &child(path, "timeout"), false));
        let grace = m
            .get("grace")
            .map(|n| self.duration(n, &child(path, "grace"), true));
        let env = m.get("env").map(|n| {
            let p = child(path, "env");
            let env = self.str_map(
                n,
                &p,
                valid_env_name,
                "is not a valid environment variable name",
            )?;
            if let Value::Map(entries) = &n.value {
                for (k, v) in entries {
                    let Value::Str(key) = &k.value else { continue };
                    let Some(val) = env.get(key) else { continue };
                    let vp = child(&p, key);
                    let vars = self.template(v, &vp, val, Context::Command { models });
                    if !vars.is_empty() {
                        let field = Field::WorkerEnv(key.clone());
                        let owner = match repo {
                            Some(r) => Owner::Repo(r, field),
                            None => Owner::Top(field),
                        };
                        self.uses.push(TemplateUse {
                            owner,
                            path: vp,
                            span: v.span,
                            vars,
                        });
                    }
                }
            }
            Some(env)
        });
        let attempts = m
            .get("attempts")
            .map(|n| self.u32(n, &child(path, "attempts"), 1, 100));
        let commit = m
            .get("commit")
            .and_then(|n| self.boolean(n, &child(path, "commit")));
        let require_change = m
            .get("require_change")
            .and_then(|n| self.boolean(n, &child(path, "require_change")));
        let limits = m
            .get("limits")
            .and_then(|n| self.limits(n, &child(path, "limits")));
        let uses = m
            .get("uses")
            .and_then(|n| self.resource_uses(n, &child(path, "uses")))
            .unwrap_or_default();
        let probe = m
            .get("probe")
            .and_then(|n| self.nonempty(n, &child(path, "probe")));
        // A repository override may omit `run`; the caller keeps it apart from a full worker.
        let run = match (run, repo) {
            (Some(r), _) => r,
            (None, Some(_)) if run_node.is_none() => CommandSpec::Argv(Vec::new()),
            (None, _) => return None,
        };
        Some(Worker {
            run,
            timeout: timeout.flatten(),
            grace: grace.flatten(),
            env: env.flatten().unwrap_or_default(),
            attempts: attempts.flatten(),
            commit,
            require_change,
            limits,
            uses,
            probe,
        })
    }

    /// A `uses` list: resource names, checked against `resources` once the whole manifest is read.
    fn resource_uses(&mut self, node: &Node, path: &str) -> Option<Vec<String>> {
        let list = self.string_list(node, path, "resource name")?;
        if let Value::Seq(nodes) = &node.value {
            for (i, name) in list.iter().enumerate() {
                if let Some(n) = nodes.get(i) {
                    self.resource_uses
                        .push((index(path, i), name.clone(), n.span));
                }
            }
        }
        Some(list)
    }

    /// `resources`: names and how many commands may hold each at once, host-wide.
    fn resources(&mut self, node: &Node) -> Option<BTreeMap<String, u32>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, "resources", "a mapping of resource names to counts");
            return None;
        };
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let Value::Str(name) = &k.value else {
                self.wrong_type(k, "resources", "a resource name");
                continue;
            };
            let p = child("resources", name);
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                || name.starts_with('.')
            {
                self.err(
                    "invalid-value",
                    &p,
                    k.span,
                    format!(
                        "`{name}` is not a resource name: use letters, digits, `-`, `_` and `.`"
                    ),
                );
                continue;
            }
            if let Some(n) = self.u32(v, &p, 1, 1024) {
                out.insert(name.clone(), n);
            }
        }
        Some(out)
    }

    /// `models.prices`: per model, US dollars per million input and output tokens.
    fn prices(
        &mut self,
        node: &Node,
        path: &str,
        chain: &[&str],
    ) -> Option<BTreeMap<String, Price>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, "a mapping of model names to prices");
            return None;
        };
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let Value::Str(model) = &k.value else {
                self.wrong_type(k, path, "a model name");
                continue;
            };
            let p = child(path, model);
            if !chain.contains(&model.as_str()) {
                self.err(
                    "invalid-value",
                    &p,
                    k.span,
                    format!(
                        "`{model}` is not a model of the chain ({})",
                        chain.join(", ")
                    ),
                );
                continue;
            }
            let Some(m) = self.map(v, &p, PRICE_KEYS) else {
                continue;
            };
            let mut rate = |key: &str| {
                let n = self.required(&m, &p, key)?;
                let kp = child(&p, key);
                let x = match n.value {
                    Value::Int(i) => i as f64,
                    Value::Float(f) => f,
                    _ => {
                        self.wrong_type(
                            n,
                            &kp,
                            "US dollars per million tokens, such as `3` or `0.25`",
                        );
                        return None;
                    }
                };
                if !(x.is_finite() && x >= 0.0) {
                    self.err(
                        "invalid-value",
                        &kp,
                        n.span,
                        format!("must be 0 or more, found {x}"),
                    );
                    return None;
                }
                Some(x)
            };
            let (input, output) = (rate("input"), rate("output"));
            if let (Some(input), Some(output)) = (input, output) {
                out.insert(model.clone(), Price { input, output });
            }
        }
        Some(out)
    }

    /// `worker.limits`.
    fn limits(&mut self, node: &Node, path: &str) -> Option<WorkerLimits> {
        let m = self.map(node, path, LIMITS_KEYS)?;
        let mut limits = crate::support::limits::Limits::default();
        if let Some(n) = m.get("memory") {
            let p = child(path, "memory");
            let parsed = match &n.value {
                Value::Int(i) if *i >= 1 => u64::try_from(*i).map_err(|_| "is too large".into()),
                Value::Int(i) => Err(format!("must be at least 1 byte, found {i}")),
                Value::Str(s) => crate::support::limits::parse_size(s),
                _ => {
                    self.wrong_type(n, &p, "a size such as `4G`");
                    return None;
                }
            };
            match parsed {
                Ok(0) => self.err("invalid-value", &p, n.span, "must be at least 1 byte"),
                Ok(b) => limits.memory = Some(b),
                Err(e) => self.err("invalid-value", &p, n.span, e),
            }
        }
        if let Some(n) = m.get("pids") {
            let p = child(path, "pids");
            limits.pids = self.int(n, &p, 1, 4_194_304).map(|i| i as u64);
        }
        if let Some(n) = m.get("cpu") {
            let p = child(path, "cpu");
            let cpus = match n.value {
                Value::Int(i) => Some(i as f64),
                Value::Float(f) => Some(f),
                _ => {
                    self.wrong_type(n, &p, "a number of CPUs such as `2` or `0.5`");
                    None
                }
            };
            match cpus {
                Some(c) if c > 0.0 && c <= 4096.0 => limits.cpu = Some(c),
                Some(c) => self.err(
                    "invalid-value",
                    &p,
                    n.span,
                    format!("must be more than 0 and at most 4096 CPUs, found {c}"),
                ),
                None => {}
            }
        }
        (!limits.is_empty()).then_some(WorkerLimits(limits))
    }

    pub(super) fn gates(
        &mut self,
        node: &Node,
        path: &str,
        models: bool,
        repo: Option<usize>,
    ) -> Option<Vec<Gate>> {
        let nodes = self.list(node, path)?;
        let mut out = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index(path, i);
            let Some(g) = self.map(n, &p, GATE_KEYS) else {
                continue;
            };
            let name = self.required(&g, &p, "name").and_then(|nn| {
                let np = child(&p, "name");
                let s = self.nonempty(nn, &np)?;
                if !valid_name(&s) {
                    self.err(
                        "invalid-value",
                        &np,
                        nn.span,
                        format!("gate name `{s}` may use only letters, digits, `.`, `_` and `-`"),
                    );
                    return None;
                }
                if let Some(first) = names.insert(s.clone(), i) {
                    self.err(
                        "duplicate",
                        &np,
                        nn.span,
                        format!("gate `{s}` is already defined at `{path}[{first}]`"),
                    );
                }
                Some(s)
            });
            let run = self.required(&g, &p, "run").and_then(|rn| {
                let rp = child(&p, "run");
                let cmd = self.command(rn, &rp)?;
                let owner = match repo {
                    Some(r) => Owner::Repo(r, Field::Gates),
                    None => Owner::Top(Field::Gates),
                };
                self.command_templates(rn, &rp, &cmd, models, owner);
                Some(cmd)
            });
            let timeout = g.get("timeout").map(|n| match &n.value {
                Value::Str(a) if a == "auto" => Some(GateTimeout::Auto),
                _ => self
                    .duration(n, &child(&p, "timeout"), false)
                    .map(GateTimeout::Fixed),
            });
            let grace = g
                .get("grace")
                .map(|n| self.duration(n, &child(&p, "grace"), true));
            let paths = g.get("paths").map(|n| {
                let pp = child(&p, "paths");
                let list = self.string_list(n, &pp, "path glob")?;
                if let Value::Seq(nodes) = &n.value {
                    for (j, glob) in list.iter().enumerate() {
                        if let Err(e) = compile_glob(glob) {
                            self.err(
                                "invalid-glob",
                                &index(&pp, j),
                                nodes[j].span,
                                format!("`{glob}` is not a valid glob: {e}"),
                            );
                        }
                    }
                }
                Some(list)
            });
            let required = g
                .get("required")
                .map(|n| self.boolean(n, &child(&p, "required")));
            let min_tests = g.get("min_tests").and_then(|n| {
                let mp = child(&p, "min_tests");
                let m = self.map(n, &mp, MIN_TESTS_KEYS)?;
                let count = self
                    .required(&m, &mp, "count")
                    .and_then(|c| self.u32(c, &child(&mp, "count"), 1, u32::MAX));
                let pattern = self.required(&m, &mp, "pattern").and_then(|pn| {
                    let pp = child(&mp, "pattern");
                    let text = self.nonempty(pn, &pp)?;
                    match regex::Regex::new(&text) {
                        Ok(_) => Some(text),
                        Err(e) => {
                            self.err(
                                "invalid-pattern",
                                &pp,
                                pn.span,
                                format!("`{text}` is not a regular expression: {e}"),
                            );
                            None
                        }
                    }
                });
                Some(MinTests {
                    count: count?,
                    pattern: pattern?,
                })
            });
            let uses = g
                .get("uses")
                .and_then(|n| self.resource_uses(n, &child(&p, "uses")))
                .unwrap_or_default();
            let baseline = g
                .get("baseline")
                .and_then(|n| self.boolean(n, &child(&p, "baseline")));
            let cache = g
                .get("cache")
                .and_then(|n| self.boolean(n, &child(&p, "cache")));
            if let (Some(name), Some(run)) = (name, run) {
                out.push(Gate {
                    name,
                    run,
                    timeout: timeout.flatten(),
                    grace: grace.flatten(),
                    paths: paths.flatten().unwrap_or_default(),
                    required: required.flatten(),
                    min_tests,
                    uses,
                    baseline,
                    cache,
                });
            }
        }
        Some(out)
    }

    pub(super) fn env(&mut self, node: &Node, path: &str) -> Option<EnvPolicy> {
        let m = self.map(node, path, ENV_KEYS)?;
        let names = |cx: &mut Cx, key: &str| -> Option<Vec<String>> {
            let n = m.get(key)?;
            let p = child(path, key);
            let list = cx.string_list(n, &p, "variable")?;
            if let Value::Seq(nodes) = &n.value {
                for (i, v) in list.iter().enumerate() {
                    if !valid_env_name(v) {
                        cx.err(
                            "invalid-value",
                            &index(&p, i),
                            nodes[i].span,
                            format!("`{v}` is not a valid environment variable name"),
                        );
                    }
                }
            }
            Some(list)
        };
        let pass = names(self, "pass");
        let secrets = names(self, "secrets").unwrap_or_default();
        let roles = m
            .get("roles")
            .and_then(|n| self.secret_roles(n, &child(path, "roles"), &secrets))
            .unwrap_or_default();
        Some(EnvPolicy {
            pass,
            secrets,
            roles,
        })
    }

    pub(super) fn reports(&mut self, node: &Node) -> Option<Reports> {
        let m = self.map(node, "reports", REPORTS_KEYS)?;
        let dir = m.get("dir").and_then(|n| self.nonempty(n, "reports.dir"));
        let formats = m.get("formats").and_then(|n| {
            let nodes = self.list(n, "reports.formats")?;
            if nodes.is_empty() {
                self.err(
                    "invalid-value",
                    "reports.formats",
                    n.span,
                    "name at least one format",
                );
                return None;
            }
            let mut out = Vec::new();
            for (i, f) in nodes.iter().enumerate() {
                let p = index("reports.formats", i);
                let s = self.string(f, &p)?;
                let Some(fmt) = ReportFormat::ALL.into_iter().find(|x| x.name() == s) else {
                    self.err_help(
                        "invalid-value",
                        &p,
                        f.span,
                        format!("unknown report format `{s}`"),
                        "formats: json, markdown, junit, html",
                    );
                    continue;
                };
                if out.contains(&fmt) {
                    self.err(
                        "duplicate",
                        &p,
                        f.span,
                        format!("format `{s}` is listed twice"),
                    );
                }
                out.push(fmt);
            }
            Some(out)
        });
        let keep = m.get("keep").and_then(|n| {
            let k = self.map(n, "reports.keep", KEEP_KEYS)?;
            let runs = k
                .get("runs")
                .and_then(|n| self.u32(n, "reports.keep.runs", 1, 1_000_000));
            let days = k
                .get("days")
                .and_then(|n| self.u32(n, "reports.keep.days", 1, 100_000));
            Some(Keep { runs, days })
        });
        let metrics = m
            .get("metrics")
            .and_then(|n| self.nonempty(n, "reports.metrics"));
        Some(Reports {
            dir,
            formats,
            keep,
            metrics,
        })
    }
}
