//! The manifest's `sandbox` section: how the kernel confines an item's processes.

use schemars::JsonSchema;
use serde::Serialize;

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
    /// `open` (the default) or `none` (a network namespace of the item's own with loopback
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
}

impl Sandbox {
    pub fn mode(&self) -> SandboxMode {
        self.mode.unwrap_or(SandboxMode::BestEffort)
    }
    pub fn network(&self) -> NetworkPolicy {
        self.network.unwrap_or(NetworkPolicy::Open)
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
}

impl NetworkPolicy {
    pub fn name(self) -> &'static str {
        match self {
            NetworkPolicy::Open => "open",
            NetworkPolicy::None => "none",
        }
    }
}
