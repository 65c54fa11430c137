//! `sandbox`: the confinement items run under.

use super::*;

impl Cx {
    /// `sandbox`: how the kernel confines items, what else they may write, their network.
    pub(super) fn sandbox(&mut self, node: &Node) -> Option<Sandbox> {
        let m = self.map(node, "sandbox", SANDBOX_KEYS)?;
        let mode = m.get("mode").and_then(|n| {
            let s = self.string(n, "sandbox.mode")?;
            let found = SandboxMode::ALL.into_iter().find(|x| x.name() == s);
            if found.is_none() {
                self.err_help(
                    "invalid-value",
                    "sandbox.mode",
                    n.span,
                    format!("unknown sandbox mode `{s}`"),
                    "modes: required, best-effort, off",
                );
            }
            found
        });
        let network = m.get("network").and_then(|n| {
            if let Value::Seq(_) = n.value {
                let hosts = self.string_list(n, "sandbox.network", "host")?;
                if hosts.is_empty() {
                    self.err_help(
                        "invalid-value",
                        "sandbox.network",
                        n.span,
                        "an empty list of hosts",
                        "give `none` for no network, or the hosts items may reach",
                    );
                    return None;
                }
                if let Err(e) = crate::support::hosts::Allow::parse(&hosts) {
                    self.err_help(
                        "invalid-value",
                        "sandbox.network",
                        n.span,
                        e,
                        "name a host as `api.anthropic.com`, `host:port`, `*.domain` or an IP address",
                    );
                    return None;
                }
                return Some(Network::Allow(hosts));
            }
            let s = self.string(n, "sandbox.network")?;
            match s.as_str() {
                "open" => Some(Network::Policy(NetworkPolicy::Open)),
                "none" => Some(Network::Policy(NetworkPolicy::None)),
                _ => {
                    self.err_help(
                        "invalid-value",
                        "sandbox.network",
                        n.span,
                        format!("unknown network policy `{s}`"),
                        "policies: open, none, or a list of the hosts items may reach",
                    );
                    None
                }
            }
        });
        let writable = m
            .get("writable")
            .and_then(|n| {
                let list = self.string_list(n, "sandbox.writable", "path")?;
                for s in &list {
                    if s == "/" || s == "~" || s == "~/" || s.split('/').any(|c| c == "..") {
                        self.err_help(
                            "invalid-value",
                            "sandbox.writable",
                            n.span,
                            format!("`{s}` would make too much writable"),
                            "name the folders an agent CLI writes (its config and cache), without `..`",
                        );
                    }
                }
                Some(list)
            })
            .unwrap_or_default();
        Some(Sandbox {
            mode,
            writable,
            network,
        })
    }

    /// `env.roles`: for each secret of `secrets`, the commands it reaches.
    pub(super) fn secret_roles(
        &mut self,
        node: &Node,
        path: &str,
        secrets: &[String],
    ) -> Option<BTreeMap<String, Vec<SecretRole>>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, path, "a mapping of secret names to lists of roles");
            return None;
        };
        let mut out = BTreeMap::new();
        for (key, value) in entries {
            let Value::Str(name) = &key.value else {
                self.wrong_type(key, path, "a secret's name");
                continue;
            };
            let p = child(path, name);
            if !secrets.contains(name) {
                self.err_help(
                    "invalid-value",
                    &p,
                    key.span,
                    format!("`{name}` is not one of `env.secrets`"),
                    "name a secret listed under `env.secrets`",
                );
                continue;
            }
            let names = self.string_list(value, &p, "role")?;
            let mut roles = Vec::new();
            for name in names {
                match SecretRole::ALL.into_iter().find(|r| r.name() == name) {
                    Some(r) => roles.push(r),
                    None => self.err_help(
                        "invalid-value",
                        &p,
                        value.span,
                        format!("unknown role `{name}`"),
                        "roles: worker, gate, source, publish, notify",
                    ),
                }
            }
            out.insert(name.clone(), roles);
        }
        Some(out)
    }
}
