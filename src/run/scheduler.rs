//! Where a process finds its place when a scheduler started it: the job's
//! hosts and ports, and which of them it is, from the environment instead of
//! `--hostfile` and `--process`.
//!
//! - `FORESTALL_PROCESS` and `FORESTALL_HOSTS` (a comma-separated list of
//!   `host:port`, one a process), as torchrun's `RANK` and `MASTER_ADDR`
//!   are set by whatever starts the processes;
//! - Slurm's, for a task of a job step that `srun` started: the step's
//!   nodes (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`, in Slurm's
//!   compressed form such as `node[01-04,07]`), its tasks on each node
//!   (`SLURM_STEP_TASKS_PER_NODE`, else `SLURM_TASKS_PER_NODE`, e.g.
//!   `2(x3),1`), the task's rank (`SLURM_PROCID`) and, for its threads,
//!   `SLURM_CPUS_PER_TASK`. Task j of a node listens on the base port plus
//!   j; tasks are numbered node by node (srun's default block distribution),
//!   which is checked against the node the task runs on (`SLURMD_NODENAME`).
//!
//! Everything here reads the environment through a function, so the tests
//! give it any environment they like.

use thiserror::Error;

/// The port of a node's first task when none is given (`--base-port`).
pub const DEFAULT_BASE_PORT: u16 = 29_600;

/// A process's place, as the environment gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Every process's `host:port`, in process order.
    pub addresses: Vec<String>,
    /// This process's index.
    pub process: u32,
    /// Worker threads for this process, if the scheduler says
    /// (`SLURM_CPUS_PER_TASK`).
    pub threads: Option<u32>,
    /// Where it came from, for messages: `FORESTALL_HOSTS` or
    /// `SLURM_STEP_NODELIST`/`SLURM_JOB_NODELIST`.
    pub source: &'static str,
}

/// An environment that does not describe a place.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SchedulerError {
    /// A variable's value does not parse or does not fit the others.
    #[error("{name}={value:?}: {problem}")]
    Bad {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A variable the others need is not set.
    #[error("{name} is not set, but {because} is")]
    Missing {
        /// The variable missing.
        name: &'static str,
        /// The variable that needs it.
        because: &'static str,
    },
}

/// The place the environment `var` gives this process, if it gives one:
/// `FORESTALL_PROCESS`/`FORESTALL_HOSTS` first, then a Slurm step's task.
/// `None` when neither is set (a job started by hand).
pub fn placed_from(
    var: &dyn Fn(&str) -> Option<String>,
    base_port: u16,
) -> Result<Option<Placed>, SchedulerError> {
    match (var("FORESTALL_PROCESS"), var("FORESTALL_HOSTS")) {
        (Some(process), Some(hosts)) => return generic(&process, &hosts).map(Some),
        (Some(_), None) => {
            return Err(SchedulerError::Missing {
                name: "FORESTALL_HOSTS",
                because: "FORESTALL_PROCESS",
            })
        }
        (None, Some(_)) => {
            return Err(SchedulerError::Missing {
                name: "FORESTALL_PROCESS",
                because: "FORESTALL_HOSTS",
            })
        }
        (None, None) => {}
    }
    // A task of a job step (srun) has a step id; the batch script itself,
    // which also sees SLURM_PROCID, does not.
    if var("SLURM_STEP_ID")
        .or_else(|| var("SLURM_STEPID"))
        .is_none()
    {
        return Ok(None);
    }
    let Some(procid) = var("SLURM_PROCID") else {
        return Ok(None);
    };
    // A step of one task is a job of one process, as a run outside Slurm.
    slurm(var, &procid, base_port).map(|p| (p.addresses.len() > 1).then_some(p))
}

fn bad(name: &'static str, value: &str, problem: impl Into<String>) -> SchedulerError {
    SchedulerError::Bad {
        name,
        value: value.to_owned(),
        problem: problem.into(),
    }
}

fn generic(process: &str, hosts: &str) -> Result<Placed, SchedulerError> {
    let addresses: Vec<String> = hosts
        .split(',')
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .collect();
    if addresses.is_empty() {
        return Err(bad("FORESTALL_HOSTS", hosts, "lists no host:port"));
    }
    let index: u32 = process
        .trim()
        .parse()
        .map_err(|_| bad("FORESTALL_PROCESS", process, "not a process index"))?;
    if index as usize >= addresses.len() {
        return Err(bad(
            "FORESTALL_PROCESS",
            process,
            format!("FORESTALL_HOSTS lists {} processes", addresses.len()),
        ));
    }
    Ok(Placed {
        addresses,
        process: index,
        threads: None,
        source: "FORESTALL_HOSTS",
    })
}

fn slurm(
    var: &dyn Fn(&str) -> Option<String>,
    procid: &str,
    base_port: u16,
) -> Result<Placed, SchedulerError> {
    let (list_name, list) = match var("SLURM_STEP_NODELIST") {
        Some(l) => ("SLURM_STEP_NODELIST", l),
        None => match var("SLURM_JOB_NODELIST") {
            Some(l) => ("SLURM_JOB_NODELIST", l),
            None => {
                return Err(SchedulerError::Missing {
                    name: "SLURM_JOB_NODELIST",
                    because: "SLURM_PROCID",
                })
            }
        },
    };
    let nodes = expand_hostlist(&list).map_err(|p| bad(list_name, &list, p))?;
    let (per_name, per) = match var("SLURM_STEP_TASKS_PER_NODE") {
        Some(t) => ("SLURM_STEP_TASKS_PER_NODE", t),
        None => match var("SLURM_TASKS_PER_NODE") {
            Some(t) => ("SLURM_TASKS_PER_NODE", t),
            // one task a node
            None => ("SLURM_TASKS_PER_NODE", vec!["1"; nodes.len()].join(",")),
        },
    };
    let counts = tasks_per_node(&per).map_err(|p| bad(per_name, &per, p))?;
    if counts.len() != nodes.len() {
        return Err(bad(
            per_name,
            &per,
            format!(
                "gives tasks for {} nodes, but {list_name} lists {}",
                counts.len(),
                nodes.len()
            ),
        ));
    }
    let mut addresses = Vec::new();
    let mut node_of = Vec::new();
    for (node, &count) in nodes.iter().zip(&counts) {
        for j in 0..count {
            let port = u32::from(base_port) + j;
            if port > u32::from(u16::MAX) {
                return Err(bad(
                    per_name,
                    &per,
                    format!("{count} tasks on {node} need ports past 65535 from {base_port}"),
                ));
            }
            addresses.push(format!("{node}:{port}"));
            node_of.push(node.clone());
        }
    }
    let ntasks_name = if var("SLURM_STEP_NUM_TASKS").is_some() {
        "SLURM_STEP_NUM_TASKS"
    } else {
        "SLURM_NTASKS"
    };
    if let Some(n) = var(ntasks_name) {
        if n.trim().parse::<usize>().ok() != Some(addresses.len()) {
            return Err(bad(
                ntasks_name,
                &n,
                format!("{per_name} places {} tasks", addresses.len()),
            ));
        }
    }
    let process: u32 = procid
        .trim()
        .parse()
        .map_err(|_| bad("SLURM_PROCID", procid, "not a task rank"))?;
    let Some(node) = node_of.get(process as usize) else {
        return Err(bad(
            "SLURM_PROCID",
            procid,
            format!("the step has {} tasks", addresses.len()),
        ));
    };
    if let Some(here) = var("SLURMD_NODENAME").filter(|here| here != node) {
        return Err(bad(
            "SLURMD_NODENAME",
            &here,
            format!(
                "task {process} is on {here}, but numbering the tasks node by node puts it on \
                 {node}: start the step with srun's block distribution (--distribution=block)"
            ),
        ));
    }
    let threads = match var("SLURM_CPUS_PER_TASK") {
        None => None,
        Some(c) => Some(
            c.trim()
                .parse::<u32>()
                .ok()
                .filter(|&c| c > 0)
                .ok_or_else(|| bad("SLURM_CPUS_PER_TASK", &c, "not a positive count"))?,
        ),
    };
    Ok(Placed {
        addresses,
        process,
        threads,
        source: list_name,
    })
}

/// Slurm's compressed host list, expanded in order: comma-separated
/// entries, each a name with bracketed ranges (`node[01-04,07]`,
/// `rack[1-2]-node[1-3]`: every combination, the last bracket fastest),
/// numbers keeping the width of a zero-padded range's bounds.
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for entry in split_top(expr)? {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err("an empty entry".into());
        }
        hosts.extend(expand_entry(entry)?);
    }
    if hosts.is_empty() {
        return Err("no hosts".into());
    }
    Ok(hosts)
}

/// `expr` split at the commas outside brackets.
fn split_top(expr: &str) -> Result<Vec<&str>, String> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!(
                "unbalanced or nested brackets at character {}",
                i + 1
            ));
        }
    }
    if depth != 0 {
        return Err("a bracket is not closed".into());
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

/// One entry: its text outside brackets, and each bracket's numbers.
fn expand_entry(entry: &str) -> Result<Vec<String>, String> {
    let mut names = vec![String::new()];
    let mut rest = entry;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("'{entry}': a bracket is not closed"))?;
        let literal = &rest[..open];
        let numbers =
            bracket_numbers(&rest[open + 1..close]).map_err(|p| format!("'{entry}': {p}"))?;
        names = names
            .iter()
            .flat_map(|n| numbers.iter().map(move |x| format!("{n}{literal}{x}")))
            .collect();
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(format!("'{entry}': a ']' without its '['"));
    }
    Ok(names.into_iter().map(|n| n + rest).collect())
}

/// The numbers of a bracket's ranges (`01-04,07`), as text.
fn bracket_numbers(inside: &str) -> Result<Vec<String>, String> {
    let mut numbers = Vec::new();
    for range in inside.split(',') {
        let range = range.trim();
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!("'{range}' is not a number or a range a-b"));
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| format!("'{lo}' is too large"))?,
            hi.parse().map_err(|_| format!("'{hi}' is too large"))?,
        );
        if a > b {
            return Err(format!("'{range}' runs backwards"));
        }
        if b - a >= 100_000 {
            return Err(format!("'{range}' names more than 100,000 hosts"));
        }
        let width = if lo.starts_with('0') && lo.len() > 1 {
            lo.len()
        } else {
            0
        };
        numbers.extend((a..=b).map(|x| format!("{x:0width$}")));
    }
    Ok(numbers)
}

/// Slurm's tasks a node (`2(x3),1`: 2 on each of 3 nodes, then 1), one
/// count a node.
pub fn tasks_per_node(expr: &str) -> Result<Vec<u32>, String> {
    let mut counts = Vec::new();
    for part in expr.split(',') {
        let part = part.trim();
        let (count, times) = match part.split_once("(x") {
            Some((c, r)) => {
                let r = r
                    .strip_suffix(')')
                    .ok_or_else(|| format!("'{part}' is not N or N(xM)"))?;
                (c, r)
            }
            None => (part, "1"),
        };
        let parse = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("'{part}' is not N or N(xM) with positive N and M"))
        };
        let (count, times) = (parse(count)?, parse(times)?);
        if times > 100_000 {
            return Err(format!("'{part}' repeats more than 100,000 times"));
        }
        counts.extend(std::iter::repeat_n(count, times as usize));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn hostlists_expand_in_every_form_slurm_documents() {
        let x = |e: &str| expand_hostlist(e).expect(e);
        assert_eq!(x("node01"), ["node01"]);
        assert_eq!(x("a,b,c"), ["a", "b", "c"]);
        assert_eq!(x("tux[0-3,6]"), ["tux0", "tux1", "tux2", "tux3", "tux6"]);
        assert_eq!(
            x("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(x("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(x("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(x("gpu[1-2]-ib"), ["gpu1-ib", "gpu2-ib"]);
        assert_eq!(
            x("rack[1-2]-node[1-2]"),
            ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]
        );
        assert_eq!(
            x("a[1-2],b5,c[3]"),
            ["a1", "a2", "b5", "c3"],
            "entries in order, a one-number bracket"
        );
        assert_eq!(x("10.0.0.[1-2]"), ["10.0.0.1", "10.0.0.2"]);
    }

    #[test]
    fn malformed_hostlists_are_named() {
        let e = |x: &str| expand_hostlist(x).expect_err(x);
        assert!(e("node[1-").contains("not closed"));
        assert!(e("node[1-3").contains("not closed"));
        assert!(e("node1-3]").contains("brackets"));
        assert!(e("node[3-1]").contains("runs backwards"));
        assert!(e("node[a-b]").contains("'a-b' is not a number"));
        assert!(e("node[1,,2]").contains("is not a number"));
        assert!(e("node[[1]]").contains("nested"));
        assert!(e("a,,b").contains("empty entry"));
        assert!(e("").contains("empty entry"));
        assert!(e("n[0-999999]").contains("more than 100,000"));
    }

    #[test]
    fn tasks_per_node_repeat_counts() {
        assert_eq!(tasks_per_node("4").unwrap(), [4]);
        assert_eq!(tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(tasks_per_node("1,2(x2)").unwrap(), [1, 2, 2]);
        for bad in ["", "0", "2(x0)", "2(x3", "x", "2(3)", "-1"] {
            assert!(tasks_per_node(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_slurm_task_finds_its_place_and_its_peers() {
        let var = env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "3"),
            ("SLURM_JOB_NODELIST", "node[01-02]"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_NTASKS", "4"),
            ("SLURMD_NODENAME", "node02"),
            ("SLURM_CPUS_PER_TASK", "3"),
        ]);
        let p = placed_from(&var, 5000).unwrap().expect("placed");
        assert_eq!(
            p.addresses,
            ["node01:5000", "node01:5001", "node02:5000", "node02:5001"]
        );
        assert_eq!((p.process, p.threads), (3, Some(3)));
        assert_eq!(p.source, "SLURM_JOB_NODELIST");
    }

    #[test]
    fn the_step_describes_itself_before_the_job() {
        let var = env(&[
            ("SLURM_STEPID", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_JOB_NODELIST", "n[1-4]"),
            ("SLURM_TASKS_PER_NODE", "1(x4)"),
            ("SLURM_STEP_NODELIST", "n[3-4]"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
            ("SLURM_STEP_NUM_TASKS", "2"),
        ]);
        let p = placed_from(&var, DEFAULT_BASE_PORT)
            .unwrap()
            .expect("placed");
        assert_eq!(p.addresses, ["n3:29600", "n4:29600"]);
        assert_eq!(p.threads, None);
    }

    #[test]
    fn no_scheduler_no_place_and_the_batch_script_is_not_a_task() {
        assert_eq!(placed_from(&env(&[]), 1).unwrap(), None);
        // sbatch's script sees SLURM_PROCID but is no step's task
        let batch = env(&[("SLURM_PROCID", "0"), ("SLURM_JOB_NODELIST", "n1")]);
        assert_eq!(placed_from(&batch, 1).unwrap(), None);
    }

    #[test]
    fn a_step_of_one_task_is_a_job_of_one_process() {
        let var = env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_JOB_NODELIST", "node07"),
            ("SLURM_NTASKS", "1"),
        ]);
        assert_eq!(placed_from(&var, 1).unwrap(), None);
    }

    #[test]
    fn the_generic_form_comes_first() {
        let var = env(&[
            ("FORESTALL_PROCESS", "1"),
            ("FORESTALL_HOSTS", "10.0.0.1:7000, 10.0.0.2:7000"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
        ]);
        let p = placed_from(&var, 1).unwrap().expect("placed");
        assert_eq!(p.addresses, ["10.0.0.1:7000", "10.0.0.2:7000"]);
        assert_eq!((p.process, p.source), (1, "FORESTALL_HOSTS"));
    }

    #[test]
    fn environments_that_do_not_fit_are_named() {
        let err = |pairs: &[(&str, &str)]| placed_from(&env(pairs), 5000).unwrap_err().to_string();
        assert!(err(&[("FORESTALL_PROCESS", "0")]).contains("FORESTALL_HOSTS is not set"));
        assert!(err(&[("FORESTALL_HOSTS", "a:1")]).contains("FORESTALL_PROCESS is not set"));
        assert!(
            err(&[("FORESTALL_PROCESS", "2"), ("FORESTALL_HOSTS", "a:1,b:1")])
                .contains("FORESTALL_HOSTS lists 2 processes")
        );
        assert!(
            err(&[("FORESTALL_PROCESS", "x"), ("FORESTALL_HOSTS", "a:1")])
                .contains("not a process index")
        );
        let task = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "1"),
                ("SLURM_JOB_NODELIST", "n[1-2]"),
            ];
            pairs.extend_from_slice(extra);
            err(&pairs)
        };
        assert!(task(&[("SLURM_TASKS_PER_NODE", "1(x3)")]).contains("for 3 nodes"));
        assert!(task(&[("SLURM_NTASKS", "5")]).contains("places 2 tasks"));
        assert!(task(&[("SLURMD_NODENAME", "n1")]).contains("--distribution=block"));
        assert!(task(&[("SLURM_CPUS_PER_TASK", "0")]).contains("SLURM_CPUS_PER_TASK"));
        assert!(task(&[("SLURM_JOB_NODELIST", "n[2-1]")]).contains("runs backwards"));
        assert!(err(&[("SLURM_STEP_ID", "0"), ("SLURM_PROCID", "0")])
            .contains("SLURM_JOB_NODELIST is not set"));
        let crowded = env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_TASKS_PER_NODE", "3"),
        ]);
        let e = placed_from(&crowded, 65_534).unwrap_err().to_string();
        assert!(e.contains("ports past 65535 from 65534"), "{e}");
    }
}
