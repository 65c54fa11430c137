//! The manifest's `sandbox` section: how the kernel confines an item's processes.

use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

/// Default `env.pass`: what every command gets of runner's environment unless the manifest
/// says otherwise.
pub(crate) const DEFAULT_ENV_PASS: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TMPDIR"];

/// The confinement of an item's processes (workers, gates, a worktree's setup).
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Sandbox {
    /// `required` (refuse to start where the kernel cannot confine), `best-effort` (the
    /// default: confine as far as the kernel can, warning what is missing) or `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<SandboxMode>,
    /// Folders and files items may write besides their checkout and private `TMPDIR`: an
    /// agent CLI's config and cache folders (`~/.claude`, `~/.cache/pip`). Absolute, `~/…`, or
    /// relative to the manifest's folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<String>,
    /// `open` (the default), `none` (a network namespace of the item's own with loopback
    /// only), or a list of the hosts items may reach (`api.anthropic.com`, `host:port`,
    /// `*.domain`), through a proxy runner serves: nothing else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

/// `sandbox.network`: a policy, or the hosts items may reach.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Network {
    Policy(NetworkPolicy),
    Allow(Vec<String>),
}

impl Sandbox {
    pub fn mode(&self) -> SandboxMode {
        self.mode.unwrap_or(SandboxMode::BestEffort)
    }
    pub fn network(&self) -> NetworkPolicy {
        match &self.network {
            None => NetworkPolicy::Open,
            Some(Network::Policy(p)) => *p,
            Some(Network::Allow(_)) => NetworkPolicy::Allow,
        }
    }

    /// The hosts of an allow-list (`network: [hosts]`); empty otherwise.
    pub fn allowed_hosts(&self) -> &[String] {
        match &self.network {
            Some(Network::Allow(hosts)) => hosts,
            _ => &[],
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    Required,
    #[default]
    BestEffort,
    Off,
}

impl SandboxMode {
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::Required,
        SandboxMode::BestEffort,
        SandboxMode::Off,
    ];
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::Required => "required",
            SandboxMode::BestEffort => "best-effort",
            SandboxMode::Off => "off",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkPolicy {
    #[default]
    Open,
    None,
    /// Given as a list of hosts, not by this name.
    #[schemars(skip)]
    #[serde(skip)]
    Allow,
}

impl NetworkPolicy {
    pub fn name(self) -> &'static str {
        match self {
            NetworkPolicy::Open => "open",
            NetworkPolicy::None => "none",
            NetworkPolicy::Allow => "allow-list",
        }
    }
}

/// What of runner's own environment reaches the processes it starts.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EnvPolicy {
    /// The only variables of runner's own environment that reach workers and gates
    /// (default PATH, HOME, LANG, TERM, TMPDIR).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<Vec<String>>,
    /// Passed through to the roles `roles` names, and redacted from every log and report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Which commands each secret reaches (`{GH_TOKEN: [source, publish, notify]}`): a secret
    /// not named here reaches workers and runner's own commands (sources, publish, notifiers),
    /// never gates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, Vec<SecretRole>>,
}

impl EnvPolicy {
    pub fn pass(&self) -> Vec<String> {
        match &self.pass {
            Some(p) => p.clone(),
            None => DEFAULT_ENV_PASS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The roles secret `name` reaches.
    pub fn roles_of(&self, name: &str) -> Vec<SecretRole> {
        self.roles
            .get(name)
            .cloned()
            .unwrap_or_else(|| SecretRole::DEFAULT.to_vec())
    }

    /// The secrets `role` gets.
    pub fn secrets_for(&self, role: SecretRole) -> Vec<String> {
        self.secrets
            .iter()
            .filter(|s| self.roles_of(s).contains(&role))
            .cloned()
            .collect()
    }
}

/// A command runner starts, as far as secrets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecretRole {
    Worker,
    Gate,
    Source,
    Publish,
    Notify,
}

impl SecretRole {
    pub const ALL: [SecretRole; 5] = [
        SecretRole::Worker,
        SecretRole::Gate,
        SecretRole::Source,
        SecretRole::Publish,
        SecretRole::Notify,
    ];
    /// Where a secret goes unless `env.roles` says: a worker needs its provider's key; a gate
    /// runs what the agent wrote and gets none.
    pub const DEFAULT: [SecretRole; 4] = [
        SecretRole::Worker,
        SecretRole::Source,
        SecretRole::Publish,
        SecretRole::Notify,
    ];
    pub fn name(self) -> &'static str {
        match self {
            SecretRole::Worker => "worker",
            SecretRole::Gate => "gate",
            SecretRole::Source => "source",
            SecretRole::Publish => "publish",
            SecretRole::Notify => "notify",
        }
    }
}
