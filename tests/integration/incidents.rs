//! Incidents reach a person once: the shipped notifiers (real `curl`, `jq`) post to a loopback
//! receiver; a cause seen by three cron-like runs is raised by the first only and resolved by
//! the fourth; a notifier that hangs is ended at its timeout without changing the run's verdict,
//! and its notice goes out with the next run; secrets never leave in a notice.

use crate::common;

use common::{have, not_run, repo, runner, stderr, validates};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One request the receiver answered: its request line and headers (lower-cased names), body.
#[derive(Clone, Debug)]
struct Request {
    headers: Vec<(String, String)>,
    body: String,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// A loopback HTTP receiver answering every request with `status`, keeping what it got.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    fn start(status: u16) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                if let Some(r) = read_request(&mut stream) {
                    keep.lock().unwrap().push(r);
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Receiver { url, got }
    }
    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut r = Request {
        headers,
        body: String::new(),
    };
    if r.header("expect") == Some("100-continue") {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
    }
    let len: usize = r.header("content-length")?.parse().ok()?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    r.body = String::from_utf8_lossy(&body).into_owned();
    Some(r)
}

fn notifier(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("manifests/notifiers/{name}"))
}

fn tools_here() -> bool {
    have("curl", std::process::Command::new("curl").arg("--version"))
        && have("jq", std::process::Command::new("jq").arg("--version"))
}

/// A manifest in `root` whose tracker source fails (printing the token it was given) until
/// `root/fixed` exists, notifying with `notify`.
fn manifest(root: &Path, notify: &str) {
    repo(&root.join("api"));
    std::fs::write(
        root.join("src.sh"),
        format!(
            "#!/bin/sh\n[ -f {} ] || {{ echo \"401 Unauthorized for token $TRACKER_TOKEN\" >&2; exit 1; }}\necho '{{\"schema\": \"runner.items/v1\", \"items\": []}}'\n",
            root.join("fixed").display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", "src.sh"])
        .current_dir(root)
        .status()
        .unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: nightly\ncapacity: {{workers: 1}}\nrepositories: [{{path: api}}]\nenv: {{secrets: [TRACKER_TOKEN, RUNNER_WEBHOOK_URL]}}\nsources: [{{name: tracker, run: [./src.sh], repo: api}}]\nworker: {{run: 'echo x > work.txt'}}\nnotify: {notify}\nitems: [{{repo: api, id: fix}}]\n"
        ),
    )
    .unwrap();
}

const TOKEN: &str = "tok-5ecret-4711";

fn cron_run(root: &Path, url: &str) -> std::process::Output {
    cron_run_with(root, url, &[])
}

fn cron_run_with(root: &Path, url: &str, more: &[&str]) -> std::process::Output {
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .args(more)
        .env("TRACKER_TOKEN", TOKEN)
        .env("RUNNER_WEBHOOK_URL", url)
        .output()
        .unwrap()
}

#[test]
fn an_incident_is_raised_once_over_three_cron_runs_and_resolved_by_the_fourth() {
    if !tools_here() {
        return not_run("curl and jq are not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let hook = Receiver::start(200);
    manifest(
        root,
        &format!(
            "{{run: [{}], timeout: 20s}}",
            notifier("webhook.sh").display()
        ),
    );
    for round in 1..=3 {
        let out = cron_run(root, &hook.url);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "round {round}: {err}");
        assert!(err.contains("source `tracker` could not be read"), "{err}");
        assert_eq!(
            hook.requests().len(),
            1,
            "round {round}: {:?}",
            hook.requests()
        );
    }
    let raised = hook.requests()[0].clone();
    assert_eq!(raised.header("content-type"), Some("application/json"));
    let n = raised.json();
    assert_eq!(n["schema"], "runner.incident/v1");
    assert_eq!(n["notice"], "raised");
    assert_eq!(n["kind"], "source-unreadable");
    assert_eq!(n["cause"], "source-unreadable:tracker");
    assert_eq!(n["count"], 1);
    assert_eq!(n["manifest"], "nightly");
    let summary = n["summary"].as_str().unwrap();
    assert!(summary.contains("401 Unauthorized"), "{summary}");
    // The fourth run no longer sees it: resolved, with how many runs saw it.
    std::fs::write(root.join("fixed"), "").unwrap();
    let out = cron_run(root, &hook.url);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = hook.requests();
    assert_eq!(got.len(), 2, "{got:?}");
    let r = got[1].json();
    assert_eq!(r["notice"], "resolved");
    assert_eq!(r["cause"], "source-unreadable:tracker");
    assert_eq!(r["count"], 3, "{r}");
    assert_eq!(r["first_seen"], n["first_seen"]);
    assert!(r["resolved_at"].is_string(), "{r}");
    // A fifth run: nothing more to say.
    let out = cron_run(root, &hook.url);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(hook.requests().len(), 2);
    // What left the machine never held the token, and follows the schema.
    let mut files = Vec::new();
    for (i, req) in got.iter().enumerate() {
        assert!(!req.body.contains(TOKEN), "{}", req.body);
        assert!(!req.body.contains(&hook.url), "{}", req.body);
        let f = root.join(format!("notice-{i}.json"));
        std::fs::write(&f, &req.body).unwrap();
        files.push(f);
    }
    validates("incident", &files);
}

#[test]
fn a_hanging_notifier_is_ended_at_its_timeout_and_the_next_run_delivers_its_notice() {
    if !tools_here() {
        return not_run("curl and jq are not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let hook = Receiver::start(200);
    manifest(
        root,
        "{run: 'echo started > notifier.log; sleep 300 # hang-marker-incidents', timeout: 1s}",
    );
    let out = cron_run(root, &hook.url);
    let err = stderr(&out);
    // The drain's verdict is the source's, not the notifier's.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("was not delivered") && err.contains("took longer than 1s"),
        "{err}"
    );
    assert!(root.join("notifier.log").exists(), "the notifier ran");
    assert!(
        common::processes_matching("hang-marker-incidents").is_empty(),
        "the notifier was ended"
    );
    // The next run, with a notifier that works, sends what is owed: one raise, two runs seen.
    let m = std::fs::read_to_string(root.join("m.yaml")).unwrap();
    let m = m
        .lines()
        .map(|l| {
            if l.starts_with("notify:") {
                format!("notify: {{run: [{}]}}", notifier("webhook.sh").display())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(root.join("m.yaml"), m).unwrap();
    let out = cron_run(root, &hook.url);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let got = hook.requests();
    assert_eq!(got.len(), 1, "{got:?}");
    let n = got[0].json();
    assert_eq!(
        (n["notice"].as_str(), n["count"].as_u64()),
        (Some("raised"), Some(2))
    );
    // A receiver that refuses: said, owed again, never the run's failure.
    let refusing = Receiver::start(500);
    std::fs::write(root.join("fixed"), "").unwrap();
    let out = cron_run(root, &refusing.url);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the next run sends it"),
        "{}",
        stderr(&out)
    );
    assert_eq!(refusing.requests().len(), 1);
    let out = cron_run(root, &hook.url);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = hook.requests();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1].json()["notice"], "resolved");
}

/// The Slack-compatible, ntfy and mail notifiers turn one notice into their services' shapes.
#[test]
fn the_slack_ntfy_and_mail_notifiers_speak_their_services_shapes() {
    if !tools_here() {
        return not_run("curl and jq are not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let notice = r#"{"schema":"runner.incident/v1","notice":"raised","kind":"quarantined","cause":"quarantined:api","summary":"repository `api` is quarantined","manifest":"nightly","manifest_path":"/srv/m.yaml","host":"build-1","run":"r1","seen_in":"r1","repositories":["api"],"first_seen":"2026-12-01T01:00:00Z","last_seen":"2026-12-01T01:00:00Z","count":1,"report":"/srv/runner-reports/r1/index.html"}"#;
    // curl as the notifiers run it, its arguments recorded: what any process could read in
    // /proc while it runs.
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let argv_log = tmp.path().join("curl-argv");
    let real_curl = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v curl"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::fs::write(
        bin.join("curl"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\nexec {} \"$@\"\n",
            argv_log.display(),
            real_curl.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("curl"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let feed = |script: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut child = std::process::Command::new(notifier(script))
            .args(args)
            .env("PATH", &path)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(notice.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{script}: {}", stderr(&out));
    };
    let slack = Receiver::start(200);
    feed("slack.sh", &[], &[("SLACK_WEBHOOK_URL", &slack.url)]);
    let text = slack.requests()[0].json()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains(":rotating_light:")
            && text.contains("nightly")
            && text.contains("quarantined")
            && text.contains("/srv/runner-reports/r1/index.html"),
        "{text}"
    );
    let ntfy = Receiver::start(200);
    feed(
        "ntfy.sh",
        &[],
        &[("NTFY_URL", &ntfy.url), ("NTFY_TOKEN", "tk")],
    );
    let r = &ntfy.requests()[0];
    assert_eq!(r.header("priority"), Some("high"));
    assert_eq!(
        r.header("title"),
        Some("runner nightly: quarantined raised")
    );
    assert_eq!(r.header("authorization"), Some("Bearer tk"));
    assert!(
        r.body.contains("repository `api` is quarantined"),
        "{}",
        r.body
    );
    let hook = Receiver::start(200);
    feed(
        "webhook.sh",
        &[],
        &[
            ("RUNNER_WEBHOOK_URL", &hook.url),
            ("RUNNER_WEBHOOK_TOKEN", "tok-9z"),
        ],
    );
    assert_eq!(
        hook.requests()[0].header("authorization"),
        Some("Bearer tok-9z")
    );
    // No URL or token ever stood on curl's command line.
    let argv = std::fs::read_to_string(&argv_log).unwrap();
    assert!(argv.contains("--data-binary"), "{argv}");
    for secret in [
        slack.url.as_str(),
        ntfy.url.as_str(),
        hook.url.as_str(),
        "Bearer tk",
        "tok-9z",
    ] {
        assert!(
            !argv.contains(secret),
            "{secret} on curl's command line: {argv}"
        );
    }
    // `sendmail -t` is a program that keeps the mail it is given.
    let mail = tmp.path().join("mail.txt");
    let fake = tmp.path().join("sendmail");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n[ \"$1\" = -t ] || exit 9\ncat > {}\n",
            mail.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .unwrap();
    feed(
        "sendmail.sh",
        &["oncall@example.com"],
        &[("SENDMAIL", fake.to_str().unwrap())],
    );
    let m = std::fs::read_to_string(&mail).unwrap();
    assert!(m.starts_with("To: oncall@example.com\n"), "{m}");
    assert!(
        m.contains("Subject: [runner] nightly: raised: repository `api` is quarantined\n"),
        "{m}"
    );
    assert!(m.contains("cause:      quarantined:api"), "{m}");
}

/// On a shared PostgreSQL ledger, the runs of two machines (two checkouts of one manifest) count
/// one incident: raised by the first, resolved once.
#[test]
fn runs_of_two_machines_on_a_shared_postgres_ledger_raise_and_resolve_an_incident_once() {
    if !tools_here() {
        return not_run("curl and jq are not installed");
    }
    let Some(db) = common::postgres_db() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let hook = Receiver::start(200);
    let notify = format!("{{run: [{}]}}", notifier("webhook.sh").display());
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for m in [&a, &b] {
        std::fs::create_dir_all(m).unwrap();
        manifest(m, &notify);
    }
    for m in [&a, &b, &a] {
        let out = cron_run_with(m, &hook.url, &["--state", &db]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    }
    assert_eq!(hook.requests().len(), 1, "{:?}", hook.requests());
    std::fs::write(b.join("fixed"), "").unwrap();
    let out = cron_run_with(&b, &hook.url, &["--state", &db]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = hook.requests();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1].json()["notice"], "resolved");
    assert_eq!(got[1].json()["count"], 3);
}

/// A run that started nothing (its day's cap already spent) could not have seen whether the
/// provider still refuses a model: the model's incident stays open, counted once, until a run
/// that used the chain finds the key accepted again.
#[test]
fn a_refused_model_is_not_resolved_by_a_run_that_started_nothing() {
    if !tools_here() {
        return;
    }
    let rx = Receiver::start(204);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    repo(&root.join("api"));
    std::fs::write(
        root.join("work.sh"),
        "if [ \"$RUNNER_MODEL\" = opus ] && [ -e ../revoked ]; then echo 'Error: 401 invalid x-api-key' >&2; exit 77; fi\necho '{\"cost_usd\": 1}' > \"$RUNNER_USAGE\"\n",
    )
    .unwrap();
    std::fs::write(root.join("revoked"), "").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: nightly\ncapacity: {{workers: 1}}\nrepositories: [{{path: api}}]\nmodels: {{primary: opus, fallbacks: [sonnet]}}\nbudget: {{daily_usd: 2}}\nenv: {{secrets: [RUNNER_WEBHOOK_URL]}}\nworker:\n  run: [sh, {}]\nnotify: {{run: [{}]}}\nitems: [{{repo: api, id: a}}, {{repo: api, id: b}}, {{repo: api, id: c}}, {{repo: api, id: d}}]\n",
            root.join("work.sh").display(),
            notifier("webhook.sh").display()
        ),
    )
    .unwrap();
    let cron = || {
        let out = runner()
            .current_dir(root)
            .env("RUNNER_WEBHOOK_URL", &rx.url)
            .args(["apply", "m.yaml", "--no-progress"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    };
    let notices = || -> Vec<(String, String)> {
        rx.requests()
            .iter()
            .map(|r| {
                let j = r.json();
                (
                    j["notice"].as_str().unwrap_or_default().to_string(),
                    j["cause"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let raised = |cause: &str| ("raised".to_string(), cause.to_string());
    let resolved = |cause: &str| ("resolved".to_string(), cause.to_string());
    // Two items run on the fallback and spend the day's cap.
    cron();
    let first = notices();
    assert!(first.contains(&raised("model-refused:opus")), "{first:?}");
    assert!(first.contains(&raised("budget")), "{first:?}");
    // The same day, the key restored: nothing starts, so nothing tells whether opus works.
    std::fs::remove_file(root.join("revoked")).unwrap();
    cron();
    let second = notices();
    assert!(
        !second.contains(&resolved("model-refused:opus")),
        "a run that started nothing resolved the model's incident: {second:?}"
    );
    // The next day (the ledger's spend moved back): items run on opus, accepted again.
    let db = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    db.execute("UPDATE spend SET day = '2000-01-01'", [])
        .unwrap();
    drop(db);
    cron();
    let third = notices();
    assert!(third.contains(&resolved("model-refused:opus")), "{third:?}");
}

/// A URL where nothing listens: a notifier posting there fails at once.
fn closed_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    drop(l);
    url
}

fn status_json(root: &Path) -> serde_json::Value {
    let out = runner()
        .current_dir(root)
        .args(["status", "m.yaml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The webhook down for two cron runs, then back: the notice is owed (and `status` says so,
/// with the failed tries), then arrives once, counted, naming what could not be sent.
#[test]
fn a_notice_no_notifier_took_is_shown_owed_and_arrives_named_when_the_webhook_is_back() {
    if !tools_here() {
        return not_run("curl and jq are not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    manifest(
        root,
        &format!(
            "{{run: [{}], timeout: 20s}}",
            notifier("webhook.sh").display()
        ),
    );
    let down = closed_url();
    for round in 1..=2u64 {
        let out = cron_run(root, &down);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "round {round}: {err}");
        assert!(
            err.contains("notice of incident `source-unreadable:tracker` was not delivered")
                && err.contains("the next notice that gets through names it"),
            "round {round}: {err}"
        );
        let st = status_json(root);
        let owed = st["notices_owed"]
            .as_array()
            .unwrap_or_else(|| panic!("{st}"));
        assert_eq!(owed.len(), 1, "{st}");
        assert_eq!(owed[0]["cause"], "source-unreadable:tracker");
        assert_eq!(owed[0]["notice"], "raised");
        assert_eq!(owed[0]["failed_attempts"], round, "{st}");
        assert!(owed[0]["failing_since"].is_string(), "{st}");
        assert!(!st.to_string().contains(TOKEN), "{st}");
    }
    let out = runner()
        .current_dir(root)
        .args(["status", "m.yaml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("notices owed") && text.contains("no notifier took it: 2 tries since"),
        "{text}"
    );
    // Back: the notice arrives, once, with the runs that saw it and the tries that failed.
    let hook = Receiver::start(200);
    let out = cron_run(root, &hook.url);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let got = hook.requests();
    assert_eq!(got.len(), 1, "{got:?}");
    let n = got[0].json();
    assert_eq!(n["notice"], "raised");
    assert_eq!(n["count"], 3, "{n}");
    assert_eq!(n["failed_attempts"], 2, "{n}");
    assert_eq!(n["undelivered"]["count"], 1, "{n}");
    assert_eq!(
        n["undelivered"]["notices"][0]["cause"],
        "source-unreadable:tracker"
    );
    assert_eq!(n["undelivered"]["notices"][0]["attempts"], 2, "{n}");
    assert!(!got[0].body.contains(TOKEN));
    let f = root.join("notice.json");
    std::fs::write(&f, &got[0].body).unwrap();
    validates("incident", &[f]);
    assert!(
        status_json(root).get("notices_owed").is_none(),
        "nothing is owed once it went out"
    );
    // The cause clears: its `resolved` notice names nothing more.
    std::fs::write(root.join("fixed"), "").unwrap();
    let out = cron_run(root, &hook.url);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = hook.requests();
    assert_eq!(got.len(), 2, "{got:?}");
    let r = got[1].json();
    assert_eq!(r["notice"], "resolved");
    assert!(
        r.get("undelivered").is_none() && r.get("failed_attempts").is_none(),
        "{r}"
    );
}

/// A notice the notifier cannot take goes to the fallbacks, in order: a failing one is passed,
/// a file takes it. When none can, it is owed as before.
#[test]
fn a_notice_the_notifier_cannot_take_goes_to_its_fallbacks_in_order() {
    if !tools_here() {
        return not_run("curl and jq are not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    manifest(
        root,
        &format!(
            "{{run: [{}], fallback: [{{run: 'echo mail relay refused >&2; exit 3', timeout: 5s}}, {{file: notices/owed.jsonl}}]}}",
            notifier("webhook.sh").display()
        ),
    );
    let out = cron_run(root, &closed_url());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("went to fallback 2 (file `notices/owed.jsonl`)")
            && err.contains("fallback 1 (a notifier): it failed (exit 3): mail relay refused"),
        "{err}"
    );
    let file = root.join("notices/owed.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let n: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        (n["notice"].as_str(), n["cause"].as_str()),
        (Some("raised"), Some("source-unreadable:tracker"))
    );
    assert!(!text.contains(TOKEN), "{text}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    assert!(status_json(root).get("notices_owed").is_none());
    // Where the file cannot be written either, the notice is owed, and the next that gets
    // through names it.
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    std::fs::write(root.join("fixed"), "").unwrap();
    let out = cron_run(root, &closed_url());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("was not delivered"), "{err}");
    let st = status_json(root);
    assert_eq!(st["notices_owed"][0]["notice"], "resolved", "{st}");
    std::fs::remove_dir(&file).unwrap();
    let out = cron_run(root, &closed_url());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    let n: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(n["notice"], "resolved");
    assert_eq!(n["failed_attempts"], 1, "{n}");
    assert_eq!(n["undelivered"]["notices"][0]["notice"], "resolved", "{n}");
}

/// A fallback is one notifier or one file, checked before anything runs.
#[test]
fn a_fallback_that_is_neither_or_both_is_named_by_validate() {
    for (fallback, says) in [
        ("[{file: a.jsonl, run: [true]}]", "not both"),
        ("[{timeout: 5s}]", "a fallback needs `run`"),
        ("[{file: a.jsonl, timeout: 5s}]", "a file has none"),
        ("[{mail: ops}]", "unknown key `mail`"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        manifest(root, &format!("{{run: [true], fallback: {fallback}}}"));
        let out = runner()
            .current_dir(root)
            .args(["validate", "m.yaml"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{fallback}: {err}");
        assert!(
            err.contains(says) && err.contains("notify.fallback[0]"),
            "{fallback}: {err}"
        );
    }
}
