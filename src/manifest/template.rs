//! Templates: `{name}` placeholders in commands, branches, ids and vars; `{{` and `}}` are
//! literal braces.
//!
//! A template is parsed once at load time so that an unknown placeholder or a stray brace is a
//! validation error, never a surprise at run time. Rendering is total: every placeholder a
//! validated template holds has a value in the context it was validated for.

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Lit(String),
    Var(String),
}

/// Parse a template into literal and placeholder parts.
pub fn parse(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if matches!(chars.peek(), Some((_, '{'))) => {
                chars.next();
                lit.push('{');
            }
            '}' if matches!(chars.peek(), Some((_, '}'))) => {
                chars.next();
                lit.push('}');
            }
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                if !closed {
                    return Err(format!(
                        "unclosed `{{` at character {}; write `{{{{` for a literal brace",
                        i + 1
                    ));
                }
                let name = name.trim().to_string();
                if name.is_empty() {
                    return Err("empty placeholder `{}`".into());
                }
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                parts.push(Part::Var(name));
            }
            '}' => {
                return Err(format!(
                    "stray `}}` at character {}; write `}}}}` for a literal brace",
                    i + 1
                ));
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

/// The placeholder names a template uses, in order of appearance.
pub(crate) fn placeholders(text: &str) -> Result<Vec<String>, String> {
    Ok(parse(text)?
        .into_iter()
        .filter_map(|p| match p {
            Part::Var(v) => Some(v),
            Part::Lit(_) => None,
        })
        .collect())
}

/// Render a template; `lookup` supplies each placeholder's value. A placeholder `lookup` does not
/// know is an error naming it (validation makes this unreachable for loaded manifests).
pub fn render(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for part in parse(text)? {
        match part {
            Part::Lit(s) => out.push_str(&s),
            Part::Var(v) => match lookup(&v) {
                Some(val) => out.push_str(&val),
                None => return Err(format!("no value for `{{{v}}}`")),
            },
        }
    }
    Ok(out)
}

/// The prefix of a placeholder whose value a string `run` takes as written (`{raw:item.flags}`).
pub(crate) const RAW: &str = "raw:";

/// `value` quoted for `sh` where it needs to be: as is when it holds only characters no shell
/// gives a meaning to, else in single quotes (a `'` inside written as `'\''`), as GNU parallel
/// does. A value can then never be more than one word of the command, whatever it holds.
pub(crate) fn shell_quote(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c));
    if plain {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

/// Where a template is used, which decides the placeholders it may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    /// Worker and gate commands and worker environment values.
    Command { models: bool },
    /// An explicit item's work branch.
    Branch,
    /// A discovered item's id and vars.
    Discover,
    /// A discovered item's branch: as `Discover`, plus `{item}` (the rendered id).
    DiscoverBranch,
}

/// The `{match.*}` names a discovery template may use.
pub(crate) const MATCH_NAMES: &[&str] = &["path", "dir", "name", "stem", "parent"];

/// Check one placeholder name against a context. `Ok(Some(var))` means `{item.var}`, which the
/// caller must check against the items using the template.
pub(crate) fn check_placeholder(name: &str, ctx: Context) -> Result<Option<String>, String> {
    // `{raw:NAME}`: a command's value inserted as written, not shell-quoted.
    let name = match (name.strip_prefix(RAW), ctx) {
        (Some(rest), Context::Command { .. }) => rest,
        (Some(_), _) => {
            return Err(format!(
                "`{{{name}}}`: `{RAW}` is only for commands, where values are otherwise shell-quoted"
            ));
        }
        (None, _) => name,
    };
    if let Some(var) = name.strip_prefix("item.") {
        if var.is_empty() {
            return Err("`{item.}` names no variable".into());
        }
        return match ctx {
            Context::Discover | Context::DiscoverBranch => Err(format!(
                "`{{{name}}}` is not available in discovery; use `{{match.*}}` names"
            )),
            _ => Ok(Some(var.to_string())),
        };
    }
    if let Some(m) = name.strip_prefix("match.") {
        return match ctx {
            Context::Discover | Context::DiscoverBranch if MATCH_NAMES.contains(&m) => Ok(None),
            Context::Discover | Context::DiscoverBranch => Err(format!(
                "unknown placeholder `{{{name}}}`; discovery offers {}",
                MATCH_NAMES
                    .iter()
                    .map(|n| format!("`{{match.{n}}}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Err(format!(
                "`{{{name}}}` is only available in `discover` templates"
            )),
        };
    }
    let allowed: &[&str] = match ctx {
        Context::Command { models: true } => {
            &["model", "repo", "repo.path", "item", "attempt", "run"]
        }
        Context::Command { models: false } => &["repo", "repo.path", "item", "attempt", "run"],
        Context::Branch => &["repo", "item"],
        Context::Discover => &["repo"],
        Context::DiscoverBranch => &["repo", "item"],
    };
    if allowed.contains(&name) {
        return Ok(None);
    }
    if name == "model" && ctx == (Context::Command { models: false }) {
        return Err("`{model}` needs a `models` section naming the primary model".into());
    }
    let list = allowed
        .iter()
        .map(|n| format!("`{{{n}}}`"))
        .chain(match ctx {
            Context::Command { .. } | Context::Branch => Some("`{item.<var>}`".to_string()),
            Context::Discover | Context::DiscoverBranch => Some("`{match.*}`".to_string()),
        })
        .collect::<Vec<_>>()
        .join(", ");
    Err(format!(
        "unknown placeholder `{{{name}}}`; here you may use {list}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_keeps_a_value_one_word() {
        assert_eq!(shell_quote("done/fix-1.txt"), "done/fix-1.txt");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("svc $(touch PWNED)"), "'svc $(touch PWNED)'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("printf %s {}", shell_quote("x'; echo $HOME `id` \"y\"")),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "x'; echo $HOME `id` \"y\""
        );
    }

    #[test]
    fn parses_placeholders_and_literal_braces() {
        assert_eq!(
            parse("a {model} {{b}} {item.task}").unwrap(),
            vec![
                Part::Lit("a ".into()),
                Part::Var("model".into()),
                Part::Lit(" {b} ".into()),
                Part::Var("item.task".into()),
            ]
        );
        assert!(parse("{oops").is_err());
        assert!(parse("x } y").is_err());
        assert!(parse("{}").is_err());
    }

    #[test]
    fn renders() {
        let r = render("--model={model} {{x}}", |n| {
            (n == "model").then(|| "m1".into())
        });
        assert_eq!(r.unwrap(), "--model=m1 {x}");
        assert!(render("{nope}", |_| None).is_err());
    }

    #[test]
    fn contexts_limit_names() {
        let cmd = Context::Command { models: true };
        assert_eq!(check_placeholder("model", cmd), Ok(None));
        assert_eq!(
            check_placeholder("raw:item.task", cmd),
            Ok(Some("task".into()))
        );
        assert!(check_placeholder("raw:item", Context::Branch).is_err());
        assert_eq!(check_placeholder("item.task", cmd), Ok(Some("task".into())));
        assert!(check_placeholder("modle", cmd).is_err());
        assert!(check_placeholder("match.path", cmd).is_err());
        assert!(check_placeholder("model", Context::Command { models: false }).is_err());
        assert_eq!(check_placeholder("match.stem", Context::Discover), Ok(None));
        assert!(check_placeholder("match.ext", Context::Discover).is_err());
        assert!(check_placeholder("item.x", Context::Discover).is_err());
        assert!(check_placeholder("attempt", Context::Branch).is_err());
    }
}
