//! Traces `forestall import` made from public traces: their formats, known
//! again from the job id the importer stamps (`<format>:<file stem>`).

/// The trace formats `forestall import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Alibaba PAI mini-batch times (CSV).
    AlibabaMinibatch,
    /// ByteDance StragglerAnalysis operation traces (Parquet).
    BytedanceOps,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 2] = [Format::AlibabaMinibatch, Format::BytedanceOps];

    /// The name on the command line. It is also the `workload` of the
    /// imported trace's iteration rows, and starts its job id.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::AlibabaMinibatch => "alibaba-minibatch",
            Format::BytedanceOps => "bytedance-ops",
        }
    }

    /// The format of an imported trace, from the job id `forestall import`
    /// stamps it with (`<format>:<file stem>`); `None` for any other job id
    /// (a run's is `<name>-<plan hash>`).
    pub fn of_job_id(job_id: &str) -> Option<Format> {
        let (prefix, _) = job_id.split_once(':')?;
        Format::ALL.into_iter().find(|f| f.as_str() == prefix)
    }
}
