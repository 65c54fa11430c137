//! Runner's own settings from its environment (`RUNNER_*` that an operator, or the run that
//! started this one, sets), as `commands::settings` read and checked them once before any verb
//! ran: what the code needs of them it asks [`current`], never the environment. Plain values
//! here (this is the bottom layer); what each means is checked where it is read.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The settings every layer reads.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// `RUNNER_ROLE`: set when this runner was started by a worker or gate of another run (a
    /// nested run), to the role of what started it (a role runner knows).
    pub role: Option<String>,
    /// `RUNNER_MAX_WORKERS`: the ceiling a nested run inherits.
    pub max_workers: Option<u32>,
    /// `RUNNER_REPO_PATH`: the repository a nested run is confined to.
    pub repo_path: Option<PathBuf>,
    /// `RUNNER_TOKEN` of a nested run: the token of the run that started it.
    pub parent_token: Option<String>,
    /// `RUNNER_CONTAINMENT`: how items' processes are held (`auto`, `cgroup`, `process-group`).
    pub containment: Option<String>,
    /// `RUNNER_SANDBOX_WRITABLE`: absolute folders every confined item may write besides its
    /// own.
    pub sandbox_writable: Vec<PathBuf>,
    /// `RUNNER_HOST_DIR`: where this machine's runs share their state (pause, slots).
    pub host_dir: Option<PathBuf>,
    /// `RUNNER_RESOURCES_DIR`: where the lock files of shared resources live.
    pub resources_dir: Option<PathBuf>,
    /// `RUNNER_CGROUP`: the cgroup runs make theirs under.
    pub cgroup: Option<PathBuf>,
    /// `RUNNER_LOG`: what the diagnostic log shows.
    pub log: Option<String>,
}

static CURRENT: OnceLock<Settings> = OnceLock::new();

/// The settings of this process (none set: all unset, as in a unit test).
pub fn current() -> &'static Settings {
    CURRENT.get_or_init(Settings::default)
}

/// This process's settings, once (a second call changes nothing).
pub fn install(settings: Settings) {
    let _ = CURRENT.set(settings);
}
