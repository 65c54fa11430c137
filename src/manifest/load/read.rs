//! The readers every section uses: typed values out of the spanned tree, each mistake
//! recorded as a problem with its place, so that one mistake never hides the next.

use super::*;

impl Cx {
    pub(super) fn err(
        &mut self,
        code: &'static str,
        path: &str,
        span: Span,
        msg: impl Into<String>,
    ) {
        self.problems.push(Problem::new(code, path, msg).at(span));
    }

    pub(super) fn err_help(
        &mut self,
        code: &'static str,
        path: &str,
        span: Span,
        msg: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.problems
            .push(Problem::new(code, path, msg).at(span).help(help));
    }

    pub(super) fn wrong_type(&mut self, node: &Node, path: &str, expected: &str) {
        self.err(
            "wrong-type",
            path,
            node.span,
            format!("expected {expected}, {}", found(node)),
        );
    }

    pub(super) fn map<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        keys: &[&str],
    ) -> Option<MapView<'n>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, "a mapping");
            return None;
        };
        let mut view = MapView {
            span: node.span,
            entries: Vec::with_capacity(entries.len()),
        };
        for (k, v) in entries {
            let Value::Str(key) = &k.value else {
                self.err(
                    "wrong-type",
                    path,
                    k.span,
                    format!("keys must be strings, {}", found(k)),
                );
                continue;
            };
            if !keys.contains(&key.as_str()) {
                let at = if path.is_empty() {
                    "at the top level".to_string()
                } else {
                    format!("in `{path}`")
                };
                let help = match suggest(key, keys) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("known keys: {}", keys.join(", ")),
                };
                self.err_help(
                    "unknown-key",
                    &child(path, key),
                    k.span,
                    format!("unknown key `{key}` {at}"),
                    help,
                );
                continue;
            }
            view.entries.push((key.as_str(), k, v));
        }
        Some(view)
    }

    pub(super) fn required<'n>(
        &mut self,
        m: &MapView<'n>,
        path: &str,
        key: &str,
    ) -> Option<&'n Node> {
        let v = m.get(key);
        if v.is_none() {
            let at = if path.is_empty() {
                "at the top level".to_string()
            } else {
                format!("in `{path}`")
            };
            self.err(
                "missing-key",
                &child(path, key),
                m.span,
                format!("missing required key `{key}` {at}"),
            );
        }
        v
    }

    pub(super) fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.wrong_type(node, path, "a string");
                None
            }
        }
    }

    pub(super) fn nonempty(&mut self, node: &Node, path: &str) -> Option<String> {
        let s = self.string(node, path)?;
        if s.trim().is_empty() {
            self.err("invalid-value", path, node.span, "must not be empty");
            return None;
        }
        Some(s)
    }

    /// A scalar as text: vars may be written as numbers or booleans.
    pub(super) fn scalar_text(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => {
                self.wrong_type(node, path, "a string");
                None
            }
        }
    }

    pub(super) fn int(&mut self, node: &Node, path: &str, min: i128, max: i128) -> Option<i128> {
        let Value::Int(i) = node.value else {
            self.wrong_type(node, path, "an integer");
            return None;
        };
        if i < min || i > max {
            let msg = if i < min {
                format!("must be at least {min}, found {i}")
            } else {
                format!("must be at most {max}, found {i}")
            };
            self.err("invalid-value", path, node.span, msg);
            return None;
        }
        Some(i)
    }

    pub(super) fn u32(&mut self, node: &Node, path: &str, min: u32, max: u32) -> Option<u32> {
        self.int(node, path, min.into(), max.into())
            .and_then(|i| u32::try_from(i).ok())
    }

    pub(super) fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.wrong_type(node, path, "`true` or `false`");
                None
            }
        }
    }

    pub(super) fn list<'n>(&mut self, node: &'n Node, path: &str) -> Option<&'n [Node]> {
        match &node.value {
            Value::Seq(v) => Some(v),
            _ => {
                self.wrong_type(node, path, "a list");
                None
            }
        }
    }

    /// A list of non-empty strings, reporting duplicates.
    pub(super) fn string_list(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
    ) -> Option<Vec<String>> {
        let nodes = self.list(node, path)?;
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, n) in nodes.iter().enumerate() {
            let p = index(path, i);
            if let Some(s) = self.nonempty(n, &p) {
                if !seen.insert(s.clone()) {
                    self.err(
                        "duplicate",
                        &p,
                        n.span,
                        format!("{what} `{s}` is listed twice"),
                    );
                }
                out.push(s);
            }
        }
        Some(out)
    }

    pub(super) fn duration(
        &mut self,
        node: &Node,
        path: &str,
        allow_zero: bool,
    ) -> Option<DurationSpec> {
        let text = match &node.value {
            Value::Str(s) => s.clone(),
            Value::Int(i) => {
                self.err_help(
                    "invalid-duration",
                    path,
                    node.span,
                    format!("`{i}` has no unit"),
                    format!("durations take units: `{i}s`, `{i}m`, `{i}h` or `{i}ms`"),
                );
                return None;
            }
            Value::Float(f) => {
                self.err_help(
                    "invalid-duration",
                    path,
                    node.span,
                    format!("`{f}` is not a duration"),
                    "durations take whole numbers with units, e.g. `1500ms`",
                );
                return None;
            }
            _ => {
                self.wrong_type(node, path, "a duration such as `30s`");
                return None;
            }
        };
        match parse_duration(&text) {
            Ok(d) if d.is_zero() && !allow_zero => {
                self.err(
                    "invalid-duration",
                    path,
                    node.span,
                    "must be longer than zero",
                );
                None
            }
            Ok(d) => Some(DurationSpec(d)),
            Err(e) => {
                self.err("invalid-duration", path, node.span, e);
                None
            }
        }
    }

    pub(super) fn command(&mut self, node: &Node, path: &str) -> Option<CommandSpec> {
        match &node.value {
            Value::Str(s) if s.trim().is_empty() => {
                self.err("invalid-value", path, node.span, "the command is empty");
                None
            }
            Value::Str(s) => Some(CommandSpec::Shell(s.clone())),
            Value::Seq(items) => {
                if items.is_empty() {
                    self.err("invalid-value", path, node.span, "the command is empty");
                    return None;
                }
                let mut out = Vec::new();
                let mut ok = true;
                for (i, n) in items.iter().enumerate() {
                    match self.scalar_text(n, &index(path, i)) {
                        Some(s) => out.push(s),
                        None => ok = false,
                    }
                }
                if ok && out[0].trim().is_empty() {
                    self.err(
                        "invalid-value",
                        path,
                        items[0].span,
                        "the program name is empty",
                    );
                    return None;
                }
                ok.then_some(CommandSpec::Argv(out))
            }
            _ => {
                self.wrong_type(
                    node,
                    path,
                    "a command (a string for `sh -c`, or a list argv)",
                );
                None
            }
        }
    }

    /// A mapping of names to scalar values.
    pub(super) fn str_map(
        &mut self,
        node: &Node,
        path: &str,
        check_key: fn(&str) -> bool,
        key_rule: &str,
    ) -> Option<BTreeMap<String, String>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, "a mapping");
            return None;
        };
        let mut out = BTreeMap::new();
        for (k, v) in entries {
            let Some(key) = self.scalar_text(k, path) else {
                continue;
            };
            let p = child(path, &key);
            if !check_key(&key) {
                self.err("invalid-value", &p, k.span, format!("`{key}` {key_rule}"));
                continue;
            }
            if let Some(val) = self.scalar_text(v, &p) {
                out.insert(key, val);
            }
        }
        Some(out)
    }

    /// Check a template's placeholders for `ctx`; returns the `{item.<var>}` names it uses.
    pub(super) fn template(
        &mut self,
        node: &Node,
        path: &str,
        text: &str,
        ctx: Context,
    ) -> Vec<String> {
        let names = match template::placeholders(text) {
            Ok(n) => n,
            Err(e) => {
                self.err("invalid-template", path, node.span, e);
                return Vec::new();
            }
        };
        let mut vars = Vec::new();
        for name in names {
            match template::check_placeholder(&name, ctx) {
                Ok(Some(v)) => {
                    if !vars.contains(&v) {
                        vars.push(v)
                    }
                }
                Ok(None) => {}
                Err(e) => self.err("unknown-placeholder", path, node.span, e),
            }
        }
        vars
    }

    pub(super) fn command_templates(
        &mut self,
        node: &Node,
        path: &str,
        cmd: &CommandSpec,
        models: bool,
        owner: Owner,
    ) {
        let nodes: Vec<&Node> = match &node.value {
            Value::Seq(v) => v.iter().collect(),
            _ => vec![node],
        };
        for (i, part) in cmd.parts().into_iter().enumerate() {
            let n = nodes.get(i).copied().unwrap_or(node);
            let p = if matches!(cmd, CommandSpec::Argv(_)) {
                index(path, i)
            } else {
                path.to_string()
            };
            let vars = self.template(n, &p, part, Context::Command { models });
            if !vars.is_empty() {
                self.uses.push(TemplateUse {
                    owner: owner.clone(),
                    path: p,
                    span: n.span,
                    vars,
                });
            }
        }
    }
}

impl Node {
    pub(super) fn value_str(&self) -> &str {
        match &self.value {
            Value::Str(s) => s,
            _ => "",
        }
    }

    /// Follow a key path (mapping keys, or list indices as numbers) down the tree.
    pub(super) fn lookup(&self, path: &[&str]) -> Option<&Node> {
        let mut cur = self;
        for key in path {
            cur = match &cur.value {
                Value::Map(e) => e
                    .iter()
                    .find(|(k, _)| k.value_str() == *key)
                    .map(|(_, v)| v)?,
                Value::Seq(s) => s.get(key.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }
}
