//! Where a job's value came from (a line of the file, or a flag), so that
//! every message points at it.

use std::path::Path;

use crate::spec::{origin, Overrides, SpecError};

/// Where a value came from, to point at it in messages.
pub(crate) struct Context<'a> {
    pub(super) text: &'a str,
    pub(super) path: Option<&'a Path>,
    pub(super) overrides: &'a Overrides,
}

impl Context<'_> {
    /// The error for `[section] key`, pointing at its line (or at the flag).
    pub(crate) fn invalid(
        &self,
        section: &str,
        key: &str,
        message: impl Into<String>,
    ) -> SpecError {
        let from_flag = self.overrides.touches(section, key);
        SpecError::Invalid {
            origin: if from_flag {
                "command line".to_owned()
            } else {
                origin(self.path)
            },
            line: if from_flag {
                None
            } else {
                locate(self.text, section, key)
            },
            section: section.to_owned(),
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

/// The 1-based line where `key` is set inside `[section]`, if the text has it.
pub fn locate(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            current = header.trim_end_matches(']').trim().to_owned();
        } else if current == section {
            if let Some(rest) = line.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}
