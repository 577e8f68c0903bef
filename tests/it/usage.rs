//! The command line's own surface: `--version` with the git revision, shell
//! completions, and errors as JSON lines under `--json`.

use std::process::Output;

use crate::common::forestall;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every stdout line parsed as JSON (a non-JSON line fails the test).
fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn version_names_the_git_revision() {
    let o = forestall(&["--version"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let line = text(&o.stdout);
    let rest = line
        .trim()
        .strip_prefix(&format!("forestall {} (git ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("unexpected version line: {line}"));
    let revision = rest.strip_suffix(')').expect("closing parenthesis");
    let hash = revision.strip_suffix("-dirty").unwrap_or(revision);
    assert!(
        hash == "unknown" || (hash.len() == 12 && hash.chars().all(|c| c.is_ascii_hexdigit())),
        "revision {revision}"
    );
}

#[test]
fn completions_print_a_script_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef forestall"),
        ("fish", "complete -c forestall"),
        ("elvish", "edit:completion:arg-completer[forestall]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let o = forestall(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o.stderr));
        let script = text(&o.stdout);
        assert!(
            script.contains(marker),
            "{shell}: no '{marker}' in the script"
        );
        // every subcommand is completed
        for sub in ["run", "bench", "whatif", "completions"] {
            assert!(script.contains(sub), "{shell}: no '{sub}'");
        }
    }
    let o = forestall(&["--json", "completions", "fish"]);
    assert_eq!(o.status.code(), Some(0));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["type"], "completions");
    assert_eq!(lines[0]["data"]["shell"], "fish");
    assert!(lines[0]["data"]["script"]
        .as_str()
        .is_some_and(|s| s.contains("complete -c forestall")));
}

#[test]
fn an_unknown_shell_is_named_with_exit_2() {
    let o = forestall(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
    assert!(err.contains("bash") && err.contains("zsh"), "{err}");
    assert!(o.stdout.is_empty(), "nothing on stdout without --json");
    // under --json the usage error is a JSON line too, with the same code
    let o = forestall(&["--json", "completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "error");
    let message = lines[0]["data"]["message"].as_str().expect("message");
    assert!(message.contains("invalid value 'tcsh'"), "{message}");
    assert!(!message.starts_with("error:"), "{message}");
    assert_eq!(lines[0]["data"]["exit_code"], 2);
    let o = forestall(&["completions"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn errors_under_json_are_json_lines_with_their_causes() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("no-such-job.toml");
    let o = forestall(&["run", missing.to_str().expect("utf-8"), "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let lines = json_lines(&o);
    let last = lines.last().expect("an error line");
    assert_eq!(last["type"], "error");
    assert_eq!(last["data"]["exit_code"], 2);
    let message = last["data"]["message"].as_str().expect("message");
    let causes: Vec<&str> = last["data"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    let everything = format!("{message} {}", causes.join(" "));
    assert!(everything.contains("no-such-job.toml"), "{everything}");
    // the text is on stderr as well
    assert!(text(&o.stderr).contains("no-such-job.toml"));
    // without --json stdout stays empty
    let o = forestall(&["run", missing.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    // clap's own usage errors: an unknown subcommand
    let o = forestall(&["--json", "frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["type"], "error");
    assert!(lines[0]["data"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("frobnicate")));
    // help is not an error, JSON or not
    let o = forestall(&["--json", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stdout).contains("Usage:"));
}
