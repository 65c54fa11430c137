//! `notify`: the notifier, its time limit, and where a notice goes when it cannot take it.

use super::*;

impl Cx {
    /// `notify`: the command told of incidents, its time limit, its fallbacks.
    pub(super) fn notify(&mut self, n: &Node) -> Option<Notify> {
        let s = self.map(n, "notify", NOTIFY_KEYS)?;
        let run = self
            .required(&s, "notify", "run")
            .and_then(|c| self.command(c, "notify.run"));
        let timeout = s
            .get("timeout")
            .and_then(|t| self.duration(t, "notify.timeout", false));
        let fallback = match s.get("fallback") {
            Some(list) => {
                let nodes = self.list(list, "notify.fallback")?;
                let mut out = Vec::with_capacity(nodes.len());
                for (i, f) in nodes.iter().enumerate() {
                    if let Some(f) = self.fallback(f, &index("notify.fallback", i)) {
                        out.push(f);
                    }
                }
                out
            }
            None => Vec::new(),
        };
        Some(Notify {
            run: run?,
            timeout,
            fallback,
        })
    }

    /// One of `notify.fallback`: a notifier (`run`, `timeout`) or a file, never both.
    fn fallback(&mut self, n: &Node, path: &str) -> Option<NotifyFallback> {
        let m = self.map(n, path, NOTIFY_FALLBACK_KEYS)?;
        let run = m
            .get("run")
            .and_then(|c| self.command(c, &child(path, "run")));
        let timeout = m
            .get("timeout")
            .and_then(|t| self.duration(t, &child(path, "timeout"), false));
        let file = m
            .get("file")
            .and_then(|f| self.nonempty(f, &child(path, "file")));
        match (m.get("run"), m.get("file")) {
            (Some(_), Some(f)) => {
                self.err_help(
                    "invalid-value",
                    &child(path, "file"),
                    f.span,
                    "a fallback is a notifier (`run`) or a file (`file`), not both",
                    "give each its own entry of `notify.fallback`, in the order to try them",
                );
                return None;
            }
            (None, None) => {
                self.err_help(
                    "missing-key",
                    path,
                    m.span,
                    "a fallback needs `run` (a notifier) or `file` (a file to append the notice to)",
                    "e.g. `{file: notices.jsonl}` or `{run: [manifests/notifiers/sendmail.sh, ops@example.com]}`",
                );
                return None;
            }
            (None, Some(_)) => {
                if let Some(t) = m.get("timeout") {
                    self.err(
                        "invalid-value",
                        &child(path, "timeout"),
                        t.span,
                        "`timeout` bounds a notifier (`run`); a file has none",
                    );
                    return None;
                }
            }
            (Some(_), None) => {}
        }
        if m.get("run").is_some() && run.is_none() {
            return None;
        }
        Some(NotifyFallback { run, timeout, file })
    }
}
