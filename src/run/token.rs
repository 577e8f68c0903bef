//! The job's secret, which every connection between its processes proves
//! ([`crate::run::handshake`]). It comes from a file (`--token-file`, else
//! the file `FORESTALL_TOKEN_FILE` names) or from `FORESTALL_TOKEN`, never
//! from the command line, where every user of the host can read it. A file
//! must exist, hold something, and not be readable by every user. The
//! launcher of local processes makes a fresh one. A job whose hosts are all
//! loopback may run without one (its connections still run the handshake,
//! with an empty key); one with another host may not.

use std::path::Path;

use anyhow::{bail, Context};

/// The variable that holds a token's value.
pub const TOKEN_VAR: &str = "FORESTALL_TOKEN";
/// The variable that names a token's file.
pub const TOKEN_FILE_VAR: &str = "FORESTALL_TOKEN_FILE";

/// The key every connection of the job proves: `file`'s contents, else
/// those of the file [`TOKEN_FILE_VAR`] names, else [`TOKEN_VAR`]'s value
/// (`var` reads the environment), each with surrounding white space
/// trimmed. Empty when none is given and every address is loopback.
pub fn job_key(
    file: Option<&Path>,
    var: &dyn Fn(&str) -> Option<String>,
    addresses: &[String],
) -> anyhow::Result<Vec<u8>> {
    let from_env_file = var(TOKEN_FILE_VAR).filter(|f| !f.is_empty());
    let key = match (file, &from_env_file) {
        (Some(f), _) => read_token_file(f, "--token-file")?,
        (None, Some(f)) => read_token_file(Path::new(f), TOKEN_FILE_VAR)?,
        (None, None) => match var(TOKEN_VAR) {
            Some(t) if t.trim().is_empty() => bail!("{TOKEN_VAR} is set but empty"),
            Some(t) => t.trim().as_bytes().to_vec(),
            None => Vec::new(),
        },
    };
    if key.is_empty() {
        if let Some(remote) = addresses
            .iter()
            .find(|a| !crate::run::cluster::is_loopback(a))
        {
            bail!(
                "{remote} is not a loopback address: a job across hosts needs a token that its \
                 processes prove to each other (--token-file FILE, {TOKEN_FILE_VAR} or \
                 {TOKEN_VAR}; docs/processes-and-hosts.md#security)"
            );
        }
    }
    Ok(key)
}

fn read_token_file(path: &Path, given_by: &str) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read the token file {} ({given_by})", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        bail!(
            "the token file {} ({given_by}) is readable by every user (mode {:o}); \
             make it private: chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read the token file {} ({given_by})", path.display()))?;
    let token = text.trim_ascii();
    if token.is_empty() {
        bail!("the token file {} ({given_by}) is empty", path.display());
    }
    Ok(token.to_vec())
}

/// A fresh token: 32 random bytes in hex.
pub fn fresh() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn none(_: &str) -> Option<String> {
        None
    }

    fn local() -> Vec<String> {
        vec![
            "127.0.0.1:7000".into(),
            "[::1]:7001".into(),
            "localhost:7002".into(),
        ]
    }

    #[test]
    fn a_token_comes_from_a_private_file_or_the_environment() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, " s3cret\n").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(job_key(Some(&file), &none, &local()).unwrap(), b"s3cret");
        let named = file.display().to_string();
        let env = move |k: &str| match k {
            TOKEN_FILE_VAR => Some(named.clone()),
            TOKEN_VAR => Some("ignored".into()),
            _ => None,
        };
        assert_eq!(
            job_key(None, &env, &local()).unwrap(),
            b"s3cret",
            "the file first"
        );
        let env = |k: &str| (k == TOKEN_VAR).then(|| "abc".to_owned());
        assert_eq!(job_key(None, &env, &local()).unwrap(), b"abc");
        assert!(
            job_key(None, &none, &local()).unwrap().is_empty(),
            "loopback may go without"
        );
        assert_eq!(fresh().unwrap().len(), 64);
        assert_ne!(fresh().unwrap(), fresh().unwrap());
    }

    #[test]
    fn bad_tokens_are_named() {
        let dir = tempfile::tempdir().expect("dir");
        let err = |file: Option<&Path>, env: &dyn Fn(&str) -> Option<String>, hosts: &[String]| {
            job_key(file, env, hosts).unwrap_err().to_string()
        };
        let missing = dir.path().join("nope");
        assert!(err(Some(&missing), &none, &local()).contains("cannot read the token file"));
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").expect("write");
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(err(Some(&empty), &none, &local()).contains("is empty"));
        let open = dir.path().join("open");
        std::fs::write(&open, "x").expect("write");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = err(Some(&open), &none, &local());
        assert!(
            e.contains("readable by every user (mode 644)") && e.contains("chmod 600"),
            "{e}"
        );
        let blank = |k: &str| (k == TOKEN_VAR).then(|| "  ".to_owned());
        assert!(err(None, &blank, &local()).contains("FORESTALL_TOKEN is set but empty"));
        let remote = vec!["127.0.0.1:7000".to_owned(), "10.1.2.3:7000".to_owned()];
        let e = err(None, &none, &remote);
        assert!(
            e.contains("10.1.2.3:7000 is not a loopback address") && e.contains("--token-file"),
            "{e}"
        );
    }
}
