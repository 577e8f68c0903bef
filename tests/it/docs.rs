//! The documentation says only what is true of this build: every job snippet
//! in README.md and docs/ validates, every `forestall …` command line parses
//! with the real command-line parser, every relative link resolves, the guide
//! names no issue numbers and tells no history, and the README stays short.
//!
//! Conventions the checker reads (docs/README.md repeats them for writers):
//!
//! - A ```toml block is a job file, read as if it were a file in `pipelines/`
//!   (so `path = "../data/adult.parquet"` is the committed data). A block
//!   with a `[bench]` table is a benchmark pipeline: its sweeps' jobs are
//!   planned as `forestall bench` plans them. A block whose first line is
//!   `# partial` is a fragment: it must parse as TOML, nothing more.
//! - A dataset that `forestall data fetch` makes (MNIST, bio, PneumoniaMNIST)
//!   may be missing on this machine: the snippet is then validated against a
//!   placeholder file of that name, so every other key is still checked.
//! - In ```sh, ```bash, ```shell and ```console blocks, and in inline code,
//!   every command that starts with `forestall ` or `cargo run --release -- `
//!   is split as a shell would and parsed by `forestall::cli::Cli`, and the
//!   job and pipeline files it names under `pipelines/` must exist. Inline
//!   code in prose may name a subcommand without its required arguments
//!   (`forestall data fetch`); every word it has must still be real.

use std::path::{Path, PathBuf};

use clap::Parser;

/// The README's length limit, in lines.
const README_MAX_LINES: usize = 150;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, sorted.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    files.sort();
    files
}

/// A fenced code block: its language (the info string's first word), the
/// 1-based line of its first content line, and its text.
#[derive(Debug)]
struct Block {
    lang: String,
    line: usize,
    text: String,
}

/// The fenced blocks of a Markdown text, and its other lines (1-based).
fn split_markdown(text: &str) -> (Vec<Block>, Vec<(usize, &str)>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(String, String, usize, String)> = None; // fence, lang, line, text
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            Some((fence, _, _, body)) => {
                if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence.as_str() {
                    let (_, lang, line, body) = open.take().expect("open block");
                    blocks.push(Block {
                        lang,
                        line,
                        text: body,
                    });
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
            None => {
                if trimmed.starts_with("```") {
                    let fence: String = trimmed.chars().take_while(|&c| c == '`').collect();
                    let info = trimmed[fence.len()..].trim();
                    let lang = info.split([',', ' ']).next().unwrap_or_default().to_owned();
                    open = Some((fence, lang, i + 2, String::new()));
                } else {
                    prose.push((i + 1, line));
                }
            }
        }
    }
    (blocks, prose)
}

/// The inline code spans of a line of prose.
fn inline_code(line: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[start..start + ticks];
        let after = &rest[start + ticks..];
        match after.find(fence) {
            Some(end) => {
                spans.push(after[..end].trim().to_owned());
                rest = &after[end + ticks..];
            }
            None => break,
        }
    }
    spans
}

/// Splits a shell line into commands (at unquoted `&&`, `||`, `;` and `|`),
/// each a list of words with quotes removed; an unquoted `#` at the start of
/// a word begins a comment, and redirections (`>`, `2>`, `<`) are dropped
/// with their target.
fn shell_commands(line: &str) -> Result<Vec<Vec<String>>, String> {
    let mut commands = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let mut redirect = false;
    let end_word = |word: &mut String,
                    in_word: &mut bool,
                    redirect: &mut bool,
                    commands: &mut Vec<Vec<String>>| {
        if *in_word {
            if *redirect {
                *redirect = false;
            } else {
                commands
                    .last_mut()
                    .expect("a command")
                    .push(std::mem::take(word));
            }
            word.clear();
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated ' quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err("unterminated \" quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unterminated \" quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '#' if !in_word => break,
            '&' | '|' | ';' => {
                end_word(&mut word, &mut in_word, &mut redirect, &mut commands);
                if matches!(c, '&' | '|') && chars.peek() == Some(&c) {
                    chars.next();
                }
                commands.push(Vec::new());
            }
            '>' | '<' => {
                // `2>` and `>>`: the digits before belong to the redirection.
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    end_word(&mut word, &mut in_word, &mut redirect, &mut commands);
                }
                while chars.peek().is_some_and(|&c| c == '>' || c == '&') {
                    chars.next();
                }
                redirect = true;
            }
            c if c.is_whitespace() => {
                end_word(&mut word, &mut in_word, &mut redirect, &mut commands);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut redirect, &mut commands);
    commands.retain(|c| !c.is_empty());
    Ok(commands)
}

/// The `forestall` argument vector of a command, if it runs forestall
/// (`forestall …`, `./target/release/forestall …`, `cargo run --release -- …`).
fn forestall_argv(words: &[String]) -> Option<Vec<String>> {
    // Leading environment assignments (`FORESTALL_RUN_DIR=… forestall …`).
    let start = words.iter().position(|w| {
        !(w.contains('=') && w.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
    })?;
    let words = &words[start..];
    let first = words.first()?;
    if first == "forestall" || first.ends_with("/forestall") {
        return Some(
            std::iter::once("forestall".to_owned())
                .chain(words[1..].iter().cloned())
                .collect(),
        );
    }
    let cargo_run = ["cargo", "run", "--release", "--"];
    if words.len() >= cargo_run.len() && words.iter().zip(cargo_run).all(|(w, c)| w == c) {
        return Some(
            std::iter::once("forestall".to_owned())
                .chain(words[cargo_run.len()..].iter().cloned())
                .collect(),
        );
    }
    None
}

/// The job and pipeline files and committed models a command names that do
/// not exist in the repository (`pipelines/….toml`, `pipelines/models/…`).
fn missing_repo_files(argv: &[String]) -> Vec<String> {
    argv.iter()
        .filter(|w| {
            w.starts_with("pipelines/")
                && (w.ends_with(".toml") || w.starts_with("pipelines/models/"))
        })
        .filter(|w| !repo().join(w.trim_end_matches('/')).exists())
        .cloned()
        .collect()
}

/// Parses one command line as the binary would; help and version requests
/// count as parsed. With `naming` (inline code in prose, which may name a
/// subcommand without its arguments: `forestall data fetch`), a line that
/// lacks only required arguments counts as parsed too: every word it has is
/// a real subcommand or flag.
fn parse_command(argv: &[String], naming: bool) -> Result<(), String> {
    use clap::error::ErrorKind;
    match forestall::cli::Cli::try_parse_from(argv) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => Ok(()),
        Err(e)
            if naming
                && matches!(
                    e.kind(),
                    ErrorKind::MissingRequiredArgument
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                        | ErrorKind::MissingSubcommand
                ) =>
        {
            Ok(())
        }
        Err(e) => Err(e
            .to_string()
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or("does not parse")
            .to_owned()),
    }
}

/// The shell lines of a code block: continuation lines joined, `$ ` prompts
/// of console blocks taken off (other console lines are output).
fn block_lines(block: &Block) -> Vec<(usize, String)> {
    let console = block.lang == "console";
    let mut lines = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in block.text.lines().enumerate() {
        let line_no = block.line + i;
        let (start, mut text) = match pending.take() {
            Some((start, text)) => (start, text + " " + raw.trim()),
            None if console => match raw.trim_start().strip_prefix("$ ") {
                Some(cmd) => (line_no, cmd.to_owned()),
                None => continue,
            },
            None => (line_no, raw.trim().to_owned()),
        };
        if text.ends_with('\\') {
            text.pop();
            pending = Some((start, text));
        } else {
            lines.push((start, text));
        }
    }
    lines.extend(pending);
    lines
}

/// What the checks found: problems, and how much was checked.
#[derive(Debug, Default)]
struct Report {
    problems: Vec<String>,
    jobs: usize,
    pipelines: usize,
    partials: usize,
    commands: usize,
    links: usize,
    placeholders: Vec<String>,
}

/// The file name in a "dataset file PATH does not exist" message, when it is
/// a dataset `forestall data fetch` makes (not committed, so it may be
/// missing on this machine).
fn missing_fetchable_dataset(message: &str) -> Option<String> {
    let after = message.split("dataset file ").nth(1)?;
    let path = after.split(" does not exist").next()?;
    let name = Path::new(path).file_name()?.to_str()?.to_owned();
    let fetchable = name == "mnist.parquet"
        || name == "bio_train.parquet"
        || (name.contains("pneumonia") && name.ends_with(".npz"));
    fetchable.then_some(name)
}

/// Validates a job snippet as a file in `pipelines/` would be; a missing
/// fetchable dataset is replaced by a placeholder file of its name.
fn check_job(text: &str, placeholders: &mut Vec<String>) -> Result<(), String> {
    let origin = repo().join("pipelines").join("snippet.toml");
    let mut spec = forestall::spec::parse_job(text, Some(&origin)).map_err(|e| e.to_string())?;
    match forestall::spec::validate(&spec, text, Some(&origin)) {
        Ok(_) => Ok(()),
        Err(e) => {
            let message = e.to_string();
            let Some(name) = missing_fetchable_dataset(&message) else {
                return Err(message);
            };
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let placeholder = dir.path().join(&name);
            std::fs::write(&placeholder, b"").map_err(|e| e.to_string())?;
            spec.data.path = Some(placeholder.display().to_string());
            forestall::spec::validate(&spec, text, Some(&origin)).map_err(|e| e.to_string())?;
            placeholders.push(name);
            Ok(())
        }
    }
}

/// Plans a benchmark pipeline snippet as a file in `pipelines/`: every
/// sweep's job, with the sweep's overrides, validates.
fn check_pipeline(text: &str, placeholders: &mut Vec<String>) -> Result<(), String> {
    let spec: forestall::bench::spec::PipelineSpec =
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())?;
    let dir = repo().join("pipelines");
    if spec.sweeps.is_empty() {
        return Err("a pipeline without sweeps".into());
    }
    for sweep in &spec.sweeps {
        if sweep.seeds.is_empty() {
            return Err(format!("sweep '{}' has no seeds", sweep.name));
        }
        for run in sweep.runs(&dir) {
            let (mut job, job_text) = forestall::spec::read_job_file(&run.job)
                .map_err(|e| format!("sweep '{}': {e}", sweep.name))?;
            run.overrides.apply(&mut job);
            if let Err(e) = forestall::spec::validate::validate_with(
                &job,
                &job_text,
                Some(&run.job),
                &run.overrides,
            ) {
                let message = e.to_string();
                match missing_fetchable_dataset(&message) {
                    Some(name) => placeholders.push(name),
                    None => return Err(format!("sweep '{}': {message}", sweep.name)),
                }
            }
        }
    }
    Ok(())
}

/// Words and phrases the guide does not use: issue numbers a reader cannot
/// look up, and history (which lives in git and the run directories).
fn history_problems(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lower = line.to_lowercase();
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let before_ok = i == 0 || matches!(bytes[i - 1], b' ' | b'(' | b'[' | b'\t');
        if b == b'#' && before_ok && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            found.push("an issue number (#N)".to_owned());
        }
    }
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("issue") {
        let after = rest[at + 5..].trim_start_matches([' ', 's']);
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            found.push("an issue number (issue N)".to_owned());
        }
        rest = &rest[at + 5..];
    }
    for phrase in ["used to ", "(was "] {
        if lower.contains(phrase) || lower.trim_end().ends_with(phrase.trim_end()) {
            found.push(format!("history ({phrase:?})"));
        }
    }
    found
}

/// The targets of the Markdown links of a line: `[text](target)` and
/// reference definitions `[name]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                targets.push(
                    after[..end]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_owned(),
                );
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(end) = trimmed.find("]: ") {
            targets.push(trimmed[end + 3..].trim().to_owned());
        }
    }
    targets
}

/// Every check of one Markdown file (`path` names it in messages and
/// anchors its relative links).
fn check_doc(path: &Path, text: &str, report: &mut Report) {
    let name = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    let (blocks, prose) = split_markdown(text);
    let mut problem = |line: usize, what: String| {
        report_problem(&mut report.problems, &name, line, &what);
    };

    for block in &blocks {
        match block.lang.as_str() {
            "toml" => {
                let partial = block
                    .text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .is_some_and(|l| l.trim_start().starts_with("# partial"));
                let result = if partial {
                    report.partials += 1;
                    toml::from_str::<toml::Table>(&block.text)
                        .map(|_| ())
                        .map_err(|e| e.to_string().trim_end().to_owned())
                } else if block.text.lines().any(|l| l.trim() == "[bench]") {
                    report.pipelines += 1;
                    check_pipeline(&block.text, &mut report.placeholders)
                } else {
                    report.jobs += 1;
                    check_job(&block.text, &mut report.placeholders)
                };
                if let Err(e) = result {
                    problem(block.line, format!("toml snippet: {e}"));
                }
            }
            "sh" | "bash" | "shell" | "console" => {
                for (line, text) in block_lines(block) {
                    match shell_commands(&text) {
                        Err(e) => problem(line, format!("`{text}`: {e}")),
                        Ok(commands) => {
                            for argv in commands.iter().filter_map(|c| forestall_argv(c)) {
                                report.commands += 1;
                                if let Err(e) = parse_command(&argv, false) {
                                    problem(line, format!("`{}`: {e}", argv.join(" ")));
                                }
                                for file in missing_repo_files(&argv) {
                                    problem(
                                        line,
                                        format!("`{}`: no such file {file}", argv.join(" ")),
                                    );
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    let dir = path.parent().unwrap_or(Path::new("."));
    for &(line, text) in &prose {
        for span in inline_code(text) {
            if !(span.starts_with("forestall ") || span.starts_with("cargo run --release -- ")) {
                continue;
            }
            match shell_commands(&span) {
                Err(e) => problem(line, format!("`{span}`: {e}")),
                Ok(commands) => {
                    for argv in commands.iter().filter_map(|c| forestall_argv(c)) {
                        report.commands += 1;
                        if let Err(e) = parse_command(&argv, true) {
                            problem(line, format!("`{}`: {e}", argv.join(" ")));
                        }
                        for file in missing_repo_files(&argv) {
                            problem(line, format!("`{}`: no such file {file}", argv.join(" ")));
                        }
                    }
                }
            }
        }
        let without_code = strip_inline_code(text);
        for target in link_targets(&without_code) {
            if target.is_empty()
                || target.starts_with('#')
                || target.contains("://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            report.links += 1;
            let file = target.split('#').next().unwrap_or_default();
            if !dir.join(file).exists() {
                problem(line, format!("link to {target}: no such file"));
            }
        }
    }

    for (i, line) in text.lines().enumerate() {
        for what in history_problems(line) {
            problem(i + 1, what);
        }
    }
}

fn report_problem(problems: &mut Vec<String>, file: &str, line: usize, what: &str) {
    problems.push(format!("{file}:{line}: {what}"));
}

/// A line with its inline code spans blanked out (a link inside code is
/// not a link).
fn strip_inline_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            out.push(c);
        }
    }
    out
}

#[test]
fn every_snippet_command_and_link_in_the_docs_holds() {
    let mut report = Report::default();
    let files = doc_files();
    assert!(
        files.len() > 5,
        "the guide under docs/ is missing: {files:?}"
    );
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable doc");
        check_doc(path, &text, &mut report);
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    if lines > README_MAX_LINES {
        report.problems.push(format!(
            "README.md: {lines} lines, more than {README_MAX_LINES}: move detail into docs/"
        ));
    }
    eprintln!(
        "docs: {} job snippets, {} pipelines, {} partial snippets, {} commands, {} links checked; \
         placeholders for datasets not fetched here: {:?}",
        report.jobs,
        report.pipelines,
        report.partials,
        report.commands,
        report.links,
        report.placeholders
    );
    assert!(
        report.problems.is_empty(),
        "{} problems in the docs:\n{}",
        report.problems.len(),
        report.problems.join("\n")
    );
    // Nothing checked would pass too: the guide has snippets and commands.
    assert!(
        report.jobs >= 5,
        "only {} job snippets checked",
        report.jobs
    );
    assert!(
        report.commands >= 30,
        "only {} commands checked",
        report.commands
    );
    assert!(report.links >= 20, "only {} links checked", report.links);
}

/// The checker itself catches what it is for: bad snippets, commands, links
/// and history are each reported, good ones are not.
#[test]
fn the_docs_checker_catches_bad_snippets() {
    let path = repo().join("docs").join("checker-example.md");
    let check = |text: &str| {
        let mut report = Report::default();
        check_doc(&path, text, &mut report);
        report
    };

    let good = check(
        "Run `forestall run pipelines/quickstart.toml --workers 3`.\n\
         ```toml\n[job]\niterations = 5\n[workers]\ncount = 2\n```\n\
         ```toml\n# partial\n[policy]\nname = \"forestall\"\n```\n\
         ```sh\ncargo run --release -- run pipelines/quickstart.toml  # train\n\
         forestall analyze OUT/ --threshold 0.5 | tail -1\n\
         forestall import bytedance-ops a.parquet \\\n  --out traces/\n```\n\
         See [the guide](README.md) and [the schema](traces.md#layout).\n",
    );
    assert!(good.problems.is_empty(), "{:?}", good.problems);
    assert_eq!((good.jobs, good.partials, good.commands), (1, 1, 4));

    let bad_job =
        check("```toml\n[straggler]\npattern = \"slow-worker\"\nprobability = 1.5\n```\n");
    assert!(
        bad_job.problems.iter().any(|p| p.contains("probability")),
        "{:?}",
        bad_job.problems
    );
    let unknown_key = check("```toml\n[workers]\ncount = 2\nthreads = 4\n```\n");
    assert_eq!(unknown_key.problems.len(), 1, "{:?}", unknown_key.problems);
    let missing_data = check("```toml\n[data]\npath = \"no-such-file.parquet\"\n```\n");
    assert_eq!(
        missing_data.problems.len(),
        1,
        "{:?}",
        missing_data.problems
    );
    let broken_partial = check("```toml\n# partial\n[policy\n```\n");
    assert_eq!(
        broken_partial.problems.len(),
        1,
        "{:?}",
        broken_partial.problems
    );

    let missing_job = check("```sh\nforestall run pipelines/no-such-job.toml\n```\n");
    assert_eq!(missing_job.problems.len(), 1, "{:?}", missing_job.problems);
    let bad_flag = check("```sh\nforestall run pipelines/quickstart.toml --no-such-flag 3\n```\n");
    assert_eq!(bad_flag.problems.len(), 1, "{:?}", bad_flag.problems);
    let bad_sub = check("Then `forestall frobnicate runs/`.\n");
    assert_eq!(bad_sub.problems.len(), 1, "{:?}", bad_sub.problems);
    let bad_value =
        check("```console\n$ forestall run job.toml --workers many\noutput line\n```\n");
    assert_eq!(bad_value.problems.len(), 1, "{:?}", bad_value.problems);

    let naming = check("Use `forestall data fetch` or `forestall predictor train`.\n");
    assert!(naming.problems.is_empty(), "{:?}", naming.problems);
    let missing_arg = check("```sh\nforestall data fetch\n```\n");
    assert_eq!(missing_arg.problems.len(), 1, "{:?}", missing_arg.problems);
    let bad_link = check("See [missing](no-such-page.md).\n");
    assert_eq!(bad_link.problems.len(), 1, "{:?}", bad_link.problems);
    let history = check("Fixed in #12 (was 4); see issue 9. Workers used to wait.\n");
    assert_eq!(history.problems.len(), 4, "{:?}", history.problems);
}

#[test]
fn shell_lines_split_as_a_shell_would() {
    let split = |s: &str| shell_commands(s).expect("splits");
    assert_eq!(
        split("forestall run 'a b.toml' --out \"x y\" # comment"),
        vec![vec!["forestall", "run", "a b.toml", "--out", "x y"]]
    );
    assert_eq!(
        split("forestall import a --out i && forestall analyze i > out.txt 2>&1"),
        vec![
            vec!["forestall", "import", "a", "--out", "i"],
            vec!["forestall", "analyze", "i"]
        ]
    );
    assert_eq!(
        split("forestall --json run j.toml | tail -1"),
        vec![
            vec!["forestall", "--json", "run", "j.toml"],
            vec!["tail", "-1"]
        ]
    );
    assert!(shell_commands("forestall run 'open").is_err());
}
