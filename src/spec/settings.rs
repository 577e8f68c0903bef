//! Any job-file key set from outside the file: `--set data.split_seed=2`,
//! a bench sweep's `set = { "model.l2" = [0.05, 0.1] }`, and the values
//! `forestall tune` tries. A setting is put into the file's TOML before it is
//! read into a [`JobSpec`], so it meets exactly the checks the file's own
//! value would (an unknown key, a wrong type, a bad value), and a message
//! names it as coming from the command line.

use std::path::Path;

use super::job::JobSpec;
use super::{Result, SpecError};

/// One `SECTION.KEY=VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The table, e.g. `data`.
    pub section: String,
    /// The key in it, e.g. `split_seed`.
    pub key: String,
    /// The value as TOML reads it (`2`, `0.1`, `true`, `"adam"`; a bare word
    /// that is not TOML is a string).
    pub value: toml::Value,
}

impl Setting {
    /// Parses `SECTION.KEY=VALUE`.
    pub fn parse(word: &str) -> std::result::Result<Self, String> {
        let (path, value) = word
            .split_once('=')
            .ok_or_else(|| format!("'{word}' is not SECTION.KEY=VALUE (no '=')"))?;
        let (section, key) = path
            .trim()
            .split_once('.')
            .filter(|(s, k)| is_name(s) && is_name(k))
            .ok_or_else(|| {
                format!("'{path}' is not SECTION.KEY (e.g. data.split_seed, model.l2)")
            })?;
        let value = value.trim();
        if value.is_empty() {
            return Err(format!("'{word}' has no value after '='"));
        }
        Ok(Self {
            section: section.to_owned(),
            key: key.to_owned(),
            value: parse_value(value),
        })
    }

    /// `SECTION.KEY=VALUE` again (the value in TOML's spelling).
    pub fn word(&self) -> String {
        format!("{}.{}={}", self.section, self.key, self.value)
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A value as TOML reads it, or the text as a string.
pub fn parse_value(text: &str) -> toml::Value {
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

/// Parses job `text` (from `path`, for messages) with `settings` put in,
/// each replacing the file's value.
pub fn parse_job_with(text: &str, path: Option<&Path>, settings: &[Setting]) -> Result<JobSpec> {
    if settings.is_empty() {
        return super::parse_job(text, path);
    }
    let origin = super::origin(path);
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| SpecError::Parse {
            origin: origin.clone(),
            message: super::parse_message(&e),
        })?;
    for s in settings {
        let section = table
            .entry(s.section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(section) = section else {
            return Err(SpecError::Parse {
                origin,
                message: format!("--set {}: '{}' is not a table", s.word(), s.section),
            });
        };
        section.insert(s.key.clone(), s.value.clone());
    }
    table.try_into().map_err(|e: toml::de::Error| {
        let words: Vec<String> = settings.iter().map(Setting::word).collect();
        SpecError::Parse {
            origin: format!("{origin} with --set {}", words.join(" --set ")),
            message: super::parse_message(&e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "[job]\nname = \"j\"\n\n[model]\nl2 = 0.5\n";

    #[test]
    fn settings_parse_as_toml_values_or_bare_words() {
        let s = Setting::parse("data.split_seed=3").expect("parses");
        assert_eq!((s.section.as_str(), s.key.as_str()), ("data", "split_seed"));
        assert_eq!(s.value, toml::Value::Integer(3));
        assert_eq!(
            Setting::parse("model.l2 = 0.1").unwrap().value,
            toml::Value::Float(0.1)
        );
        assert_eq!(
            Setting::parse("model.optimizer=sgd").unwrap().value,
            toml::Value::String("sgd".into())
        );
        assert_eq!(
            Setting::parse("model.optimizer=sgd").unwrap().word(),
            "model.optimizer=\"sgd\""
        );
        for bad in [
            "data.split_seed",
            "split_seed=3",
            "a.b.c=1",
            ".k=1",
            "model.l2=",
        ] {
            assert!(Setting::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_setting_replaces_or_adds_a_key() {
        let set = |w: &str| Setting::parse(w).unwrap();
        let spec = parse_job_with(JOB, None, &[set("model.l2=0.25"), set("data.split_seed=7")])
            .expect("valid");
        assert_eq!(spec.model.l2, Some(0.25));
        assert_eq!(spec.data.split_seed, Some(7));
        assert_eq!(spec.job.name.as_deref(), Some("j"));
    }

    #[test]
    fn an_unknown_key_or_a_wrong_type_names_the_setting() {
        let set = |w: &str| Setting::parse(w).unwrap();
        let e = parse_job_with(JOB, None, &[set("model.l3=1")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--set model.l3=1") && e.contains("l3"), "{e}");
        let e = parse_job_with(JOB, None, &[set("model.l2=abc")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--set model.l2=\"abc\""), "{e}");
        let e = parse_job_with("job = 1\n", None, &[set("job.name=x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'job' is not a table"), "{e}");
    }
}
