//! `items` and `discover`: explicit work items and the rules that find them in repositories.

use super::checks::valid_var_name;
use super::*;

impl Cx {
    pub(super) fn items(&mut self, node: &Node) -> Option<Vec<ItemSpec>> {
        let nodes = self.list(node, "items")?;
        let mut out = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index("items", i);
            let Some(m) = self.map(n, &p, ITEM_KEYS) else {
                continue;
            };
            let repo = self
                .required(&m, &p, "repo")
                .and_then(|v| self.nonempty(v, &child(&p, "repo")));
            let id = self.required(&m, &p, "id").and_then(|v| {
                let ip = child(&p, "id");
                let s = self.scalar_text(v, &ip)?;
                if !valid_item_id(&s) {
                    self.err_help("invalid-id", &ip, v.span, format!("item id `{s}` is not valid"), "ids use letters, digits and `.`, `_`, `/`, `-`, with no empty, `.` or `..` segment");
                    return Some(s);
                }
                Some(s)
            });
            let branch = m.get("branch").and_then(|v| {
                let bp = child(&p, "branch");
                let s = self.nonempty(v, &bp)?;
                self.template(v, &bp, &s, Context::Branch);
                // Without placeholders the name is final: checked now, not at plan time.
                if !s.contains('{')
                    && let Some(why) = crate::support::refname::work_branch_problem(&s)
                {
                    self.err("invalid-branch", &bp, v.span, why);
                }
                Some(s)
            });
            let vars = m.get("vars").map(|v| {
                self.str_map(
                    v,
                    &child(&p, "vars"),
                    valid_var_name,
                    "is not a valid variable name (letters, digits, `_`, `-`)",
                )
            });
            let (after, after_spans) = m
                .get("after")
                .and_then(|v| {
                    let ap = child(&p, "after");
                    let list = self.string_list(v, &ap, "item")?;
                    let spans = match &v.value {
                        Value::Seq(ns) => ns.iter().map(|n| n.span).collect(),
                        _ => Vec::new(),
                    };
                    Some((list, spans))
                })
                .unwrap_or_default();
            if let (Some(repo), Some(id)) = (repo, id) {
                out.push(ItemSpec {
                    repo,
                    id,
                    branch,
                    vars: vars.flatten().unwrap_or_default(),
                    after,
                    after_spans,
                    after_items: Vec::new(),
                    span: n.span,
                });
            }
        }
        Some(out)
    }

    pub(super) fn discover(&mut self, node: &Node) -> Option<Vec<DiscoverSpec>> {
        let nodes = self.list(node, "discover")?;
        let mut out = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index("discover", i);
            let Some(m) = self.map(n, &p, DISCOVER_KEYS) else {
                continue;
            };
            let glob = self.required(&m, &p, "glob").and_then(|v| {
                let gp = child(&p, "glob");
                let g = self.nonempty(v, &gp)?;
                if g.starts_with('/') || g.split('/').any(|s| s == "..") {
                    self.err(
                        "invalid-glob",
                        &gp,
                        v.span,
                        format!("`{g}` must stay inside the repository (relative, without `..`)"),
                    );
                    return None;
                }
                if let Err(e) = compile_glob(&g) {
                    self.err(
                        "invalid-glob",
                        &gp,
                        v.span,
                        format!("`{g}` is not a valid glob: {e}"),
                    );
                    return None;
                }
                Some(g)
            });
            let id = self.required(&m, &p, "id").and_then(|v| {
                let ip = child(&p, "id");
                let s = self.nonempty(v, &ip)?;
                self.template(v, &ip, &s, Context::Discover);
                Some(s)
            });
            let branch = m.get("branch").and_then(|v| {
                let bp = child(&p, "branch");
                let s = self.nonempty(v, &bp)?;
                self.template(v, &bp, &s, Context::DiscoverBranch);
                Some(s)
            });
            let vars = m.get("vars").and_then(|v| {
                let vp = child(&p, "vars");
                let map = self.str_map(
                    v,
                    &vp,
                    valid_var_name,
                    "is not a valid variable name (letters, digits, `_`, `-`)",
                )?;
                if let Value::Map(entries) = &v.value {
                    for (k, val) in entries {
                        if let (Value::Str(key), Some(text)) = (&k.value, map.get(k.value_str())) {
                            self.template(val, &child(&vp, key), text, Context::Discover);
                        }
                    }
                }
                Some(map)
            });
            if let (Some(glob), Some(id)) = (glob, id) {
                out.push(DiscoverSpec {
                    glob,
                    id,
                    branch,
                    vars: vars.unwrap_or_default(),
                    span: n.span,
                });
            }
        }
        Some(out)
    }

    /// `sources`: each a named command printing a tracker's items, with where they go.
    pub(super) fn sources(&mut self, node: &Node) -> Option<Vec<SourceSpec>> {
        let nodes = self.list(node, "sources")?;
        let mut out: Vec<SourceSpec> = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index("sources", i);
            let Some(m) = self.map(n, &p, SOURCE_KEYS) else {
                continue;
            };
            let name = self.required(&m, &p, "name").and_then(|v| {
                let np = child(&p, "name");
                let s = self.nonempty(v, &np)?;
                let ok = s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
                if !ok || s.starts_with('.') {
                    self.err(
                        "invalid-value",
                        &np,
                        v.span,
                        format!("source name `{s}` may use only letters, digits, `.`, `_` and `-`, and may not start with `.`"),
                    );
                    return None;
                }
                if let Some(first) = out.iter().position(|o| o.name == s) {
                    self.err(
                        "duplicate",
                        &np,
                        v.span,
                        format!("source `{s}` is already declared at `sources[{first}]`"),
                    );
                    return None;
                }
                Some(s)
            });
            // Taken as written: it runs once for the whole manifest, with no placeholders (a
            // brace in it is the command's own, as in a `jq` filter).
            let run = self
                .required(&m, &p, "run")
                .and_then(|v| self.command(v, &child(&p, "run")));
            let timeout = m
                .get("timeout")
                .and_then(|v| self.duration(v, &child(&p, "timeout"), false));
            let repo = m
                .get("repo")
                .and_then(|v| self.nonempty(v, &child(&p, "repo")));
            let labels = m
                .get("labels")
                .and_then(|v| self.str_map(v, &child(&p, "labels"), |k| !k.is_empty(), "is empty"));
            let branch = m.get("branch").and_then(|v| {
                let bp = child(&p, "branch");
                let s = self.nonempty(v, &bp)?;
                self.template(v, &bp, &s, Context::DiscoverBranch);
                Some(s)
            });
            let vars = m.get("vars").and_then(|v| {
                self.str_map(
                    v,
                    &child(&p, "vars"),
                    valid_var_name,
                    "is not a valid variable name (letters, digits, `_`, `-`)",
                )
            });
            let writeback = m
                .get("writeback")
                .and_then(|v| self.command(v, &child(&p, "writeback")));
            let check = m
                .get("check")
                .and_then(|v| self.command(v, &child(&p, "check")));
            if let (Some(name), Some(run)) = (name, run) {
                out.push(SourceSpec {
                    writeback,
                    check,
                    name,
                    run,
                    timeout,
                    repo,
                    labels: labels.unwrap_or_default(),
                    branch,
                    vars: vars.unwrap_or_default(),
                    span: n.span,
                });
            }
        }
        Some(out)
    }
}
