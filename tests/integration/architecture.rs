//! The floors of the code (`docs/design.md`): every `crate::` path in a module must point to a
//! module below it. Reads the sources, so an arrow pointing back up fails here, not in review.

use std::collections::BTreeSet;
use std::path::Path;

/// Each top-level module and the modules it may name. Anything absent from a row is an arrow
/// against the flow.
const FLOORS: &[(&str, &[&str])] = &[
    ("vocab", &[]),
    ("support", &[]),
    ("failures", &[]),
    ("events", &["vocab"]),
    ("manifest", &["support"]),
    ("lease", &["support"]),
    ("process", &["support", "vocab", "lease", "failures"]),
    ("git", &["support", "process"]),
    ("plan", &["support", "vocab", "manifest", "git"]),
    (
        "engine",
        &[
            "support", "vocab", "events", "manifest", "lease", "process", "git", "plan", "failures",
        ],
    ),
    ("ledger", &["support", "vocab", "events", "plan"]),
    (
        "report",
        &["support", "vocab", "events", "plan", "failures"],
    ),
    ("ui", &["support", "vocab", "events", "plan"]),
    ("cli", &["vocab", "manifest", "plan"]),
    (
        "session",
        &[
            "support", "vocab", "events", "manifest", "lease", "process", "git", "plan", "engine",
            "ledger", "report", "ui",
        ],
    ),
    (
        "commands",
        &[
            "support", "vocab", "events", "manifest", "lease", "process", "git", "plan", "engine",
            "ledger", "report", "ui", "cli", "session",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`src/engine/item.rs` -> `engine`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The code of `text`: line comments left out, lines joined, so that a path group written over
/// several lines reads as one.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    for line in text.lines() {
        code.push_str(match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        });
        code.push('\n');
    }
    // `crate :: x` is the same path as `crate::x`.
    regex::Regex::new(r"\s*::\s*")
        .unwrap()
        .replace_all(&code, "::")
        .into_owned()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first names of the paths in a `{a, b::c, d::{e, f}}` group that `text` opens with: `a`,
/// `b`, `d`. `self` names the module the group is under, left out here.
fn group_heads(text: &str, out: &mut BTreeSet<String>) {
    let mut depth = 0usize;
    let mut at_start = true;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' => {
                depth += 1;
                at_start = depth == 1;
            }
            '}' => {
                if depth <= 1 {
                    return;
                }
                depth -= 1;
            }
            ',' if depth == 1 => at_start = true,
            c if c.is_whitespace() => {}
            c if is_ident(c) && at_start && depth == 1 => {
                let name: String = text[i..].chars().take_while(|c| is_ident(*c)).collect();
                for _ in 1..name.len() {
                    chars.next();
                }
                if name != "self" {
                    out.insert(name);
                }
                at_start = false;
            }
            _ => at_start = false,
        }
    }
}

/// Every `crate::name` in the code of `text`, comments left out; in a group
/// (`use crate::{a, b::c};`) every name it opens with.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code = code_of(text);
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        let after = rest[i + "crate::".len()..].trim_start();
        // `$crate::` and `some_crate::` are not paths into this crate.
        if !before.is_some_and(|c| is_ident(c) || c == '$') {
            if after.starts_with('{') {
                group_heads(after, &mut out);
            } else {
                let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
        rest = after;
    }
    out
}

#[test]
fn every_import_points_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut against = Vec::new();
    let mut unknown = BTreeSet::new();
    for f in &files {
        let module = module_of(&src, f);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some((_, allowed)) = FLOORS.iter().find(|(m, _)| *m == module) else {
            unknown.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for target in crate_paths(&text) {
            if target != module && !allowed.contains(&target.as_str()) {
                against.push(format!(
                    "{} names `crate::{target}`, which is not below `{module}`",
                    f.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules missing from the floor table: {unknown:?}"
    );
    assert!(
        against.is_empty(),
        "imports against the flow:\n{}",
        against.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_and_skips_comments() {
    let seen = crate_paths(
        "use crate::engine::x;\n// crate::report\nlet a = crate::ui::f(); // crate::ledger\n$crate::z; tokio_crate::w;",
    );
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec!["engine".to_string(), "ui".to_string()]
    );
}

#[test]
fn the_scanner_reads_every_form_of_a_use() {
    let seen = crate_paths(
        "use crate::{engine, report::x};\nuse crate::{\n    ui::{a, b},\n    // crate::ledger\n    self,\n    ledger::Ledger as L,\n};\nuse crate :: plan;\nuse crate::{git::{x, y}, lease};",
    );
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["engine", "git", "lease", "ledger", "plan", "report", "ui"]
    );
}

#[test]
fn every_module_of_the_crate_has_a_floor() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(m) = line.strip_prefix("pub mod ") {
            let m = m.trim_end_matches(';');
            assert!(
                FLOORS.iter().any(|(name, _)| *name == m),
                "`{m}` has no row in the floor table"
            );
        }
    }
}

/// The modules of folder `dir`: each `.rs` file but `mod.rs`, and each sub-folder, by name.
fn children(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() || (p.extension().is_some_and(|x| x == "rs") && name != "mod") {
            out.insert(name);
        }
    }
    out
}

/// Whether `code` names `name::` as a path of its own: at its start, or after `self::` or
/// `prefix` — not as the tail of another path (`other::name::`).
fn names_path(code: &str, name: &str, prefix: &str) -> bool {
    let needle = format!("{name}::");
    let mut from = 0;
    while let Some(i) = code[from..].find(&needle) {
        let at = from + i;
        let before = &code[..at];
        let last = before.chars().next_back();
        if !last.is_some_and(|c| is_ident(c) || c == ':')
            || before.ends_with("self::")
            || before.ends_with(prefix)
        {
            return true;
        }
        from = at + needle.len();
    }
    false
}

/// Whether `code` (a file of folder `folder`, `crate::` path `prefix`) names something of the
/// folder's `mod.rs`: `super::x` or `crate::folder::x` where `x` is not one of its sibling
/// modules.
fn names_parent(code: &str, prefix: &str, siblings: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for lead in ["super::", prefix] {
        // Where the search goes on from, in `code`: what precedes a match is read in the whole
        // text (the second `super::` of `super::super::x` follows `::`, and is not the head's).
        let mut from = 0;
        while let Some(i) = code[from..].find(lead).map(|i| from + i) {
            let before = code[..i].chars().next_back();
            let after = &code[i + lead.len()..];
            from = i + lead.len();
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let mut heads = BTreeSet::new();
            if after.starts_with('{') {
                group_heads(after, &mut heads);
            } else if after.starts_with('*') {
                // A glob takes whatever the head defines.
                heads.insert("*".to_string());
            } else {
                let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
                heads.insert(name);
            }
            for h in heads {
                if !h.is_empty() && h != "super" && !siblings.contains(&h) {
                    out.push(h);
                }
            }
        }
    }
    out
}

/// `text` without its inline unit tests (`#[cfg(test)] mod tests { … }`, at the end by house
/// style), whose `super` is the file itself, not its folder's head.
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The `crate::` path of folder `dir` under `src`, ending in `::`.
fn crate_prefix(dir: &Path, src: &Path) -> String {
    let rel = dir.strip_prefix(src).unwrap();
    format!(
        "crate::{}::",
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("::")
    )
}

fn folders(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push(p.clone());
            folders(&p, out);
        }
    }
}

/// Inside a folder the arrows run one way: a `mod.rs` that uses its own files is not used by
/// them, and one whose files use it (shared types, say) uses none of them.
#[test]
fn no_folder_and_its_files_use_each_other_both_ways() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = Vec::new();
    folders(&src, &mut dirs);
    dirs.sort();
    let mut both = Vec::new();
    for dir in dirs {
        let head = if dir.join("mod.rs").exists() {
            dir.join("mod.rs")
        } else {
            dir.with_extension("rs")
        };
        let Ok(head_text) = std::fs::read_to_string(&head) else {
            continue;
        };
        let prefix = crate_prefix(&dir, &src);
        let head_code = code_of(&head_text);
        let kids = children(&dir);
        for kid in &kids {
            let file = dir.join(format!("{kid}.rs"));
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            // Unit tests live beside their module and use it by design.
            if kid == "tests" {
                continue;
            }
            let down = names_path(&head_code, kid, &prefix);
            let up = names_parent(&code_of(without_tests(&text)), &prefix, &kids);
            if down && !up.is_empty() {
                both.push(format!(
                    "{} uses `{kid}`, and {} uses its {:?}",
                    head.strip_prefix(&src).unwrap().display(),
                    file.strip_prefix(&src).unwrap().display(),
                    up.into_iter().collect::<BTreeSet<_>>()
                ));
            }
        }
    }
    assert!(
        both.is_empty(),
        "folders whose head and files use each other:\n{}",
        both.join("\n")
    );
}

#[test]
fn the_folder_check_tells_a_files_parent_from_its_siblings() {
    let siblings: BTreeSet<String> = ["local", "probe"].iter().map(|s| s.to_string()).collect();
    let code = code_of(
        "use super::local::Reads;\nuse super::{probe, head};\n// super::hidden\nlet x = crate::git::command(d);\nlet y = other::super::z;\nuse super::*;\nlet c = super::super::config::entries(t);",
    );
    let mut seen = names_parent(&code, "crate::git::", &siblings);
    seen.sort();
    assert_eq!(seen, ["*", "command", "head"]);
    let tested = "use super::local::x;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    assert!(names_parent(&code_of(without_tests(tested)), "crate::git::", &siblings).is_empty());
    let head = code_of("mod probe;\npub use probe::Probe;\nlet a = other::local::x();");
    assert!(names_path(&head, "probe", "crate::git::"));
    assert!(!names_path(&head, "local", "crate::git::"));
}

/// The functions over `limit` lines in `text`: each `fn` whose body, from its line to the brace
/// that closes it at its own indentation, is longer. `(name, lines)`.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let rest = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .fold(t, |t, p| t.strip_prefix(p).unwrap_or(t));
        let rest = ["const ", "async ", "unsafe ", "extern \"C\" "]
            .iter()
            .fold(rest, |t, p| t.strip_prefix(p).unwrap_or(t));
        let Some(sig) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = sig.chars().take_while(|c| is_ident(*c)).collect();
        // The body opens where the signature ends with `{`; a declaration ends with `;`.
        let Some(open) = (i..lines.len())
            .find(|&j| lines[j].trim_end().ends_with('{') || lines[j].trim_end().ends_with(';'))
        else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            let n = end - i + 1;
            if n > limit {
                out.push((name, n));
            }
        }
    }
    out
}

/// No source file over 1,000 lines, and no function over 150 except the flat matches over a
/// closed vocabulary that the module's `//!` names as such.
#[test]
fn files_and_functions_stay_readable() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut over = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&src).unwrap().display().to_string();
        let n = text.lines().count();
        if n > 1000 {
            over.push(format!("{rel}: {n} lines"));
        }
        let head: String = text
            .lines()
            .take_while(|l| l.starts_with("//!") || l.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        for (name, n) in long_functions(&text, 150) {
            let named = head.contains(&format!("::{name}`]")) && head.contains("flat `match`");
            if !named {
                over.push(format!("{rel}: fn {name} is {n} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "over the house's sizes:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_size_check_finds_a_long_function() {
    let mut text =
        String::from("impl X {\n    pub(crate) async fn long(\n        a: u32,\n    ) -> u32 {\n");
    for _ in 0..150 {
        text.push_str("        a += 1;\n");
    }
    text.push_str("    }\n\n    fn short() {}\n}\n");
    assert_eq!(long_functions(&text, 150), vec![("long".to_string(), 154)]);
    assert!(long_functions(&text, 154).is_empty());
}

/// The verbs: each module of `src/commands` but the ones they share.
fn verbs(commands: &Path) -> BTreeSet<String> {
    let mut out = children(commands);
    for shared in ["shared", "outputs"] {
        out.remove(shared);
    }
    out
}

/// No verb names another: what two verbs share (a loader, an output type `schema` describes)
/// lives in a module they both name, so a verb can change without reaching into the others.
#[test]
fn no_verb_names_another() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let commands = src.join("commands");
    let verbs = verbs(&commands);
    assert!(verbs.contains("status") && verbs.contains("schema") && !verbs.contains("shared"));
    let mut wrong = Vec::new();
    for verb in &verbs {
        let mut files = Vec::new();
        let file = commands.join(format!("{verb}.rs"));
        if file.is_file() {
            files.push(file);
        }
        let folder = commands.join(verb);
        if folder.is_dir() {
            rust_files(&folder, &mut files);
        }
        for f in files {
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            let named = verbs_named(&code);
            for other in verbs.iter().filter(|v| *v != verb && named.contains(*v)) {
                wrong.push(format!("{} names the verb `{other}`", f.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The modules of `src/commands` that `code` (a verb's file) names: `super::x`,
/// `commands::x`, `super::super::x` from a verb's own folder, and each of a group
/// (`super::{x, y}`). A bare `report::` is the crate's `report` module, not the verb.
fn verbs_named(code: &str) -> BTreeSet<String> {
    let code = code.replace("super::super::", "commands::");
    let mut out = BTreeSet::new();
    for lead in ["super::", "commands::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(lead) {
            let at = from + i;
            from = at + lead.len();
            if code[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let after = &code[from..];
            if after.starts_with('{') {
                group_heads(after, &mut out);
            } else {
                out.insert(after.chars().take_while(|c| is_ident(*c)).collect());
            }
        }
    }
    out
}

#[test]
fn the_verb_check_sees_a_verb_named() {
    let named = |code: &str| verbs_named(code).into_iter().collect::<Vec<_>>();
    assert_eq!(named("x = super::status::Status;"), ["status"]);
    assert_eq!(named("use crate::commands::plan::ShardMatrix;"), ["plan"]);
    assert_eq!(
        named("use super::{plan, shared::load};"),
        ["plan", "shared"]
    );
    assert_eq!(named("super::super::watch::run(ui)"), ["watch"]);
    assert!(named("use crate::plan::shard::ShardMatrix; report::counts(r)").is_empty());
}

/// The arrows between the files of one folder: `a` → `b` when file `a` names its sibling `b`.
fn sibling_arrows(dir: &Path, src: &Path) -> BTreeSet<(String, String)> {
    let prefix = crate_prefix(dir, src);
    let kids = children(dir);
    let mut arrows = BTreeSet::new();
    for kid in &kids {
        let Ok(text) = std::fs::read_to_string(dir.join(format!("{kid}.rs"))) else {
            continue;
        };
        if kid == "tests" {
            continue;
        }
        let code = code_of(without_tests(&text));
        for other in kids.iter().filter(|o| *o != kid && *o != "tests") {
            let named = [format!("super::{other}::"), format!("{prefix}{other}::")]
                .iter()
                .any(|p| code.contains(p.as_str()))
                || names_in_group(&code, "super::", other)
                || names_in_group(&code, &prefix, other);
            if named {
                arrows.insert((kid.clone(), other.clone()));
            }
        }
    }
    arrows
}

/// Whether a group import after `lead` (`super::{a, b::c}`) names `name` at its head.
fn names_in_group(code: &str, lead: &str, name: &str) -> bool {
    let mut from = 0;
    while let Some(i) = code[from..].find(lead) {
        from += i + lead.len();
        let after = &code[from..];
        if after.starts_with('{') {
            let mut heads = BTreeSet::new();
            group_heads(after, &mut heads);
            if heads.contains(name) {
                return true;
            }
        } else if after.starts_with(name) && !after[name.len()..].starts_with(is_ident) {
            return true;
        }
    }
    false
}

/// Each circle of `arrows` (a strongly connected set of more than one file), sorted.
fn circles(arrows: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = arrows.iter().flat_map(|(a, b)| [a, b]).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for (a, b) in arrows {
                if *a == n && seen.insert(b.clone()) {
                    stack.push(b.clone());
                }
            }
        }
        seen
    };
    let mut out: Vec<Vec<String>> = Vec::new();
    for n in &nodes {
        let from_n = reach(n);
        let mut circle: Vec<String> = nodes
            .iter()
            .filter(|m| *m != n && from_n.contains(**m) && reach(m).contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if circle.is_empty() {
            continue;
        }
        circle.push((*n).clone());
        circle.sort();
        if !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

/// The circles of imports still to cut, by folder: each may only shrink (a file leaving it) or
/// go; none may grow and no new one may form. A circle that is gone must leave this list too, so
/// that it cannot come back.
const CIRCLES_LEFT: &[(&str, &[&str])] = &[];

/// The files of a folder use each other one way: no circle of imports among siblings, so each
/// can be read, tested and moved knowing only what it names.
#[test]
fn no_folders_files_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src.clone()];
    folders(&src, &mut dirs);
    dirs.sort();
    let mut wrong = Vec::new();
    let mut still = BTreeSet::new();
    for dir in dirs {
        let folder = dir.strip_prefix(&src).unwrap().display().to_string();
        for circle in circles(&sibling_arrows(&dir, &src)) {
            let known = CIRCLES_LEFT.iter().find(|(f, files)| {
                *f == folder && circle.iter().all(|c| files.contains(&c.as_str()))
            });
            match known {
                Some((f, _)) => {
                    still.insert(*f);
                }
                None => wrong.push(format!("{folder}: {} is a new circle", circle.join(" ↔ "))),
            }
        }
    }
    for (folder, files) in CIRCLES_LEFT {
        if !still.contains(folder) {
            wrong.push(format!(
                "{folder}: {} is no longer a circle; take it off CIRCLES_LEFT",
                files.join(" ↔ ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_circle_check_finds_a_circle_through_three() {
    let arrows: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(circles(&arrows), [["a", "b", "c"]]);
    assert!(names_in_group(
        "use super::{local, probe::Probe};",
        "super::",
        "probe"
    ));
    assert!(!names_in_group(
        "use super::{local, probe::Probe};",
        "super::",
        "pro"
    ));
}

/// What a verb's or a run's failure looks like in `text`: a bare exit code returned for a
/// reason said elsewhere (`-> i32`, `Result<_, i32>`), or exit 2 or 4 named outside the one
/// type that stands for them.
fn bare_failures(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if code.contains("-> i32")
            || code.contains(", i32>")
            || code.contains("EXIT_INVALID")
            || code.contains("EXIT_INTERNAL")
        {
            found.push(format!("{}: {}", n + 1, line.trim()));
        }
    }
    found
}

/// Verbs and the run they drive fail through one type (`session::failure::Failure`), which
/// `commands::run` alone says and turns into its exit code; a verb's `Ok` is its own exit code.
/// Allowed: that one place, the type itself, and a finished drain's exit code (its reason is the
/// run's last line).
#[test]
fn verbs_fail_through_one_type() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed: &[(&str, &[&str])] = &[
        ("commands/mod.rs", &["pub fn run(cli: Cli) -> i32 {"]),
        ("session/failure.rs", &[""]),
        (
            "session/finish.rs",
            &[
                "-> i32 {",
                "EXIT_INTERNAL",
                "use crate::vocab::{EXIT_FAILURES, EXIT_INTERNAL, EXIT_OK, EXIT_STALLED};",
            ],
        ),
        (
            "session/run.rs",
            &["pub fn finish(self, ui: &Ui, end: DrainEnd) -> i32 {"],
        ),
    ];
    let mut files = Vec::new();
    rust_files(&src.join("commands"), &mut files);
    rust_files(&src.join("session"), &mut files);
    let mut against = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().display().to_string();
        let ok = allowed.iter().find(|(p, _)| *p == rel).map(|(_, l)| *l);
        for hit in bare_failures(&std::fs::read_to_string(&f).unwrap()) {
            let line = hit.split_once(": ").unwrap().1;
            if !ok.is_some_and(|l| l.iter().any(|a| line.contains(a))) {
                against.push(format!("{rel}:{hit}"));
            }
        }
    }
    assert!(
        against.is_empty(),
        "a failure that bypasses `Failure`:\n{}",
        against.join("\n")
    );
}

#[test]
fn the_failure_check_sees_a_bare_code() {
    let hits = bare_failures(
        "fn a() -> i32 {\n// -> i32\nfn b() -> Result<u32, i32> {\nreturn EXIT_INVALID;\nlet x = 1; // EXIT_INTERNAL\n",
    );
    assert_eq!(hits.len(), 3, "{hits:?}");
}
