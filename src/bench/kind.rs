//! What produced a bench row: the dataflow (threads or processes) or one of
//! the reference loops timed outside timely.

use std::cmp::Ordering;
use std::fmt;

/// The kind of a bench row. Written to `raw.parquet` and the `--json` lines
/// as its label (`timely`, `timely 2×2`, `plain`, `plain-burn`) and parsed
/// back once with [`RunKind::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// The dataflow as threads in the bench's own process.
    Timely,
    /// The dataflow as local processes, `threads` workers each.
    Launched {
        /// Processes.
        processes: u32,
        /// Worker threads per process.
        threads: u32,
    },
    /// The dataflow as processes on hosts in network namespaces, `threads`
    /// workers each (`hosts = [N]`).
    Hosts {
        /// Hosts, one process each.
        hosts: u32,
        /// Worker threads per process.
        threads: u32,
    },
    /// The plain loop without timely (`reference = "plain"`).
    Plain,
    /// The plain burn loop with burn's own Adam (`reference = "burn"`).
    PlainBurn,
}

impl RunKind {
    /// The label of the kind, as the tables and files show it.
    pub fn label(&self) -> String {
        self.to_string()
    }

    /// Parses a label written by [`fmt::Display`]; `None` for anything else.
    pub fn parse(label: &str) -> Option<Self> {
        match label {
            "timely" => Some(Self::Timely),
            "plain" => Some(Self::Plain),
            "plain-burn" => Some(Self::PlainBurn),
            other => {
                let layout = other.strip_prefix("timely ")?;
                let (layout, hosts) = match layout.strip_suffix(" hosts") {
                    Some(l) => (l, true),
                    None => (layout, false),
                };
                let (p, t) = layout.split_once('×')?;
                let (p, threads) = (p.parse().ok()?, t.parse().ok()?);
                Some(match hosts {
                    true => Self::Hosts { hosts: p, threads },
                    false => Self::Launched {
                        processes: p,
                        threads,
                    },
                })
            }
        }
    }

    /// Whether the row is a timely run (threads or processes), not a
    /// reference loop.
    pub fn is_timely(&self) -> bool {
        match self {
            Self::Timely | Self::Launched { .. } | Self::Hosts { .. } => true,
            Self::Plain | Self::PlainBurn => false,
        }
    }

    /// The process layout of a launched run (`2×2`), if it is one.
    pub fn layout(&self) -> Option<String> {
        match self {
            Self::Launched { processes, threads } => Some(format!("{processes}×{threads}")),
            Self::Hosts { hosts, threads } => Some(format!("{hosts}×{threads} hosts")),
            Self::Timely | Self::Plain | Self::PlainBurn => None,
        }
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timely => f.write_str("timely"),
            Self::Launched { processes, threads } => write!(f, "timely {processes}×{threads}"),
            Self::Hosts { hosts, threads } => write!(f, "timely {hosts}×{threads} hosts"),
            Self::Plain => f.write_str("plain"),
            Self::PlainBurn => f.write_str("plain-burn"),
        }
    }
}

/// Ordered by label, as the summary tables list their groups.
impl Ord for RunKind {
    fn cmp(&self, other: &Self) -> Ordering {
        self.label().cmp(&other.label())
    }
}

impl PartialOrd for RunKind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl serde::Serialize for RunKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        for kind in [
            RunKind::Timely,
            RunKind::Launched {
                processes: 2,
                threads: 3,
            },
            RunKind::Hosts {
                hosts: 4,
                threads: 2,
            },
            RunKind::Plain,
            RunKind::PlainBurn,
        ] {
            assert_eq!(RunKind::parse(&kind.label()), Some(kind));
        }
        assert_eq!(RunKind::parse("timely 2x2"), None);
        assert_eq!(RunKind::parse("burn"), None);
        assert!(RunKind::Launched {
            processes: 1,
            threads: 1
        }
        .is_timely());
        assert!(!RunKind::PlainBurn.is_timely());
    }
}
