//! `forestall completions SHELL`: the shell's completion script for every
//! subcommand and flag, on stdout (clap_complete).
//!
//! ```text
//! forestall completions bash > ~/.local/share/bash-completion/completions/forestall
//! forestall completions zsh > ~/.zfunc/_forestall
//! forestall completions fish > ~/.config/fish/completions/forestall.fish
//! ```

use std::process::ExitCode;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::output::print_stdout;
use super::{Cli, GlobalArgs};
use crate::report::json;

/// Arguments of `forestall completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, elvish, fish, powershell or zsh.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// What `completions --json` prints.
#[derive(Debug, serde::Serialize)]
struct Script<'a> {
    shell: String,
    script: &'a str,
}

/// The completion script of `shell` for the `forestall` command line.
pub fn script(shell: Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "forestall", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `forestall completions SHELL`.
pub fn run(args: &CompletionsArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let text = script(args.shell);
    if global.json {
        print_stdout(&json::line(
            "completions",
            &Script {
                shell: args.shell.to_string(),
                script: &text,
            },
        ));
    } else {
        print_stdout(text.trim_end_matches('\n'));
    }
    Ok(ExitCode::SUCCESS)
}
