//! What names a model and its files: the repository id (`<author>/<model>`), the revision (a git branch,
//! tag or commit SHA) and a file inside the model's directory (llamacpp `modelPath`).
//!
//! Each is checked as what it is. These values reach the launchers' command lines (`{repository}`,
//! `{revision}`, `{model_file}`, engine flags), so none may read as a flag (`--output=…`), carry a shell word
//! (`;`, `$(…)`, a space) or climb out of the model's directory (`..`, an absolute path).
//! The messages never repeat the value.

/// Longest author or model part of a repository id (the Hub's limit for a name).
pub const MAX_REPO_PART_LEN: usize = 96;
/// Longest revision (git's practical limit for a ref name).
pub const MAX_REVISION_LEN: usize = 255;
/// Longest model file path.
pub const MAX_MODEL_FILE_LEN: usize = 1024;
/// The model's directory as the serving container sees it. A model file is named relative to it, or
/// under it (the catalog's llamacpp recipes give `/repository/<file>.gguf`).
pub const MODEL_DIR: &str = "/repository/";

const REPO_FORM: &str = "must have the form `<author>/<model>`";

/// A Hub repository id: `<author>/<model>`, each part letters, digits, `-`, `_` and `.`, starting with a
/// letter or digit and not ending with `-` or `.`, without `--` or `..`, at most 96 characters.
pub fn check_repo_id(id: &str) -> Result<(), &'static str> {
    let Some((author, model)) = id.split_once('/') else {
        return Err(REPO_FORM);
    };
    if model.contains('/') {
        return Err(REPO_FORM);
    }
    check_repo_part(author)?;
    check_repo_part(model)?;
    if id.ends_with(".git") {
        return Err("must not end with `.git`");
    }
    Ok(())
}

fn check_repo_part(part: &str) -> Result<(), &'static str> {
    let (Some(first), Some(last)) = (part.bytes().next(), part.bytes().last()) else {
        return Err(REPO_FORM);
    };
    if part.len() > MAX_REPO_PART_LEN {
        return Err("each part of `<author>/<model>` must be at most 96 characters");
    }
    if !part
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err("may contain only letters, digits, `-`, `_` and `.` (in `<author>/<model>`)");
    }
    if !first.is_ascii_alphanumeric() || last == b'-' || last == b'.' {
        return Err(
            "each part of `<author>/<model>` must start with a letter or digit and not end with `-` or `.`",
        );
    }
    if part.contains("--") || part.contains("..") {
        return Err("must not contain `--` or `..`");
    }
    Ok(())
}

/// A revision: a branch or tag name by git's rules (`git check-ref-format`), in letters, digits, `-`, `_`,
/// `.` and `/`; a 40- or 64-digit commit SHA is one too. Not starting with `-`, no `..`, no empty part, no
/// part starting with `.` or ending with `.lock`, not ending with `.`, at most 255 characters.
pub fn check_revision(revision: &str) -> Result<(), &'static str> {
    if revision.is_empty() {
        return Err("must not be empty (null means the latest `main`)");
    }
    if revision.len() > MAX_REVISION_LEN {
        return Err("must be at most 255 characters");
    }
    if !revision
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
    {
        return Err(
            "must be a branch, tag or commit SHA: letters, digits, `-`, `_`, `.` and `/` only",
        );
    }
    if revision.starts_with('-') {
        return Err("must not start with `-`");
    }
    if revision.contains("..") {
        return Err("must not contain `..`");
    }
    if revision.ends_with('.') {
        return Err("must not end with `.`");
    }
    for part in revision.split('/') {
        if part.is_empty() {
            return Err("must not start or end with `/` or contain `//`");
        }
        if part.starts_with('.') || part.ends_with(".lock") {
            return Err("no `/`-separated part may start with `.` or end with `.lock`");
        }
    }
    Ok(())
}

/// A file inside the model's directory: relative to it, or under [`MODEL_DIR`]; parts of letters, digits,
/// `-`, `_`, `.` and `+`, separated by `/`; no empty, `.` or `..` part, none starting with `-`.
pub fn check_model_file(path: &str) -> Result<(), &'static str> {
    let relative = path.strip_prefix(MODEL_DIR).unwrap_or(path);
    if relative.is_empty() {
        return Err("must not be empty");
    }
    if path.len() > MAX_MODEL_FILE_LEN {
        return Err("must be at most 1024 characters");
    }
    if relative.starts_with('/') {
        return Err(
            "must be a file in the model's directory: a relative path, or one under `/repository/`",
        );
    }
    if !relative
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.+/".contains(&b))
    {
        return Err("may contain only letters, digits, `-`, `_`, `.`, `+` and `/`");
    }
    for part in relative.split('/') {
        match part {
            "" => return Err("must not contain empty parts (`//` or a trailing `/`)"),
            "." | ".." => return Err("must not contain `.` or `..` parts"),
            p if p.starts_with('-') => return Err("no `/`-separated part may start with `-`"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        for good in [
            "openai/gpt-oss-20b",
            "sentence-transformers/all-MiniLM-L6-v2",
            "BAAI/bge-small-en-v1.5",
            "Qwen/Qwen2.5-Coder-32B-Instruct-GGUF",
            "org/m",
            "a_b/c_d",
            &format!("a/{}", "m".repeat(96)),
        ] {
            assert_eq!(check_repo_id(good), Ok(()), "{good}");
        }
        for bad in [
            "gpt2",
            "a/",
            "/b",
            "a/b/c",
            "a/b;id",
            "a/b$(id)",
            "--help/x",
            "a/b c",
            "a/-b",
            "a/.b",
            "a/b-",
            "a/b.",
            "a/b--c",
            "a/b..c",
            "a/b.git",
            "a/b\n",
            "é/b",
            &format!("a/{}", "m".repeat(97)),
        ] {
            assert!(check_repo_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn revisions() {
        for good in [
            "main",
            "v1.0",
            "refs/pr/1",
            "release/2024-01",
            "abc",
            &"a".repeat(40),
            &"0123456789abcdef".repeat(4),
        ] {
            assert_eq!(check_revision(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "--output=/etc/x",
            "-b",
            "../../x",
            "a..b",
            "/main",
            "main/",
            "a//b",
            ".hidden",
            "a/.b",
            "main.lock",
            "main.",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "a@{1}",
            "$(id)",
            "a;b",
            "a\u{7f}",
            &"a".repeat(256),
        ] {
            assert!(check_revision(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn model_files() {
        for good in [
            "m.gguf",
            "Q4_K_M/model-00001-of-00002.gguf",
            "/repository/Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf",
            "/repository/sub/m.gguf",
            "a+b.gguf",
        ] {
            assert_eq!(check_model_file(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "/repository/",
            "../../../etc/passwd",
            "/repository/../etc/passwd",
            "/etc/passwd",
            "/repository//etc/passwd",
            "./m.gguf",
            "a/./m.gguf",
            "a//m.gguf",
            "dir/",
            "--model=/etc/passwd",
            "a/-m.gguf",
            "a\\..\\m.gguf",
            "m.gguf\0",
            "m gguf",
            "$(id).gguf",
            &"a".repeat(1025),
        ] {
            assert!(check_model_file(bad).is_err(), "{bad:?}");
        }
    }
}
