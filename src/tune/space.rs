//! The configurations a tune tries: every combination of the values of its
//! `--over SECTION.KEY=V1,V2,…`, in the order the keys were given.

use crate::spec::settings::{parse_value, Setting};

/// One key and the values it takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Over {
    /// The table, e.g. `model`.
    pub section: String,
    /// The key, e.g. `learning_rate`.
    pub key: String,
    /// The values, as TOML reads them.
    pub values: Vec<toml::Value>,
}

impl Over {
    /// Parses `SECTION.KEY=V1,V2,…` (at least one value; none empty, none
    /// repeated).
    pub fn parse(word: &str) -> Result<Self, String> {
        let (path, list) = word
            .split_once('=')
            .ok_or_else(|| format!("'{word}' is not SECTION.KEY=V1,V2,… (no '=')"))?;
        // The key is checked as `--set` checks it, on the first value.
        let first = list.split(',').next().unwrap_or_default();
        let probe = Setting::parse(&format!("{path}={first}"))?;
        let mut values = Vec::new();
        for (i, text) in list.split(',').enumerate() {
            let text = text.trim();
            if text.is_empty() {
                return Err(format!(
                    "'{word}': value {} of the list is empty (write V1,V2,… without empty entries)",
                    i + 1
                ));
            }
            let value = parse_value(text);
            if values.contains(&value) {
                return Err(format!("'{word}': {text} is listed twice"));
            }
            values.push(value);
        }
        Ok(Self {
            section: probe.section,
            key: probe.key,
            values,
        })
    }

    /// `SECTION.KEY`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.section, self.key)
    }
}

/// Every combination of the values of `overs`, the last key varying fastest:
/// one list of settings per configuration.
pub fn grid(overs: &[Over]) -> Vec<Vec<Setting>> {
    let mut configs: Vec<Vec<Setting>> = vec![Vec::new()];
    for over in overs {
        configs = configs
            .into_iter()
            .flat_map(|prefix| {
                over.values.iter().map(move |v| {
                    let mut c = prefix.clone();
                    c.push(Setting {
                        section: over.section.clone(),
                        key: over.key.clone(),
                        value: v.clone(),
                    });
                    c
                })
            })
            .collect();
    }
    configs
}

/// A configuration as `key=value` pairs joined by spaces.
pub fn label(config: &[Setting]) -> String {
    config
        .iter()
        .map(|s| format!("{}.{}={}", s.section, s.key, s.value))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_lists_parse_as_toml_values() {
        let o = Over::parse("model.learning_rate=0.01, 0.1").unwrap();
        assert_eq!(o.name(), "model.learning_rate");
        assert_eq!(
            o.values,
            vec![toml::Value::Float(0.01), toml::Value::Float(0.1)]
        );
        let o = Over::parse("model.optimizer=adam,sgd").unwrap();
        assert_eq!(o.values[1], toml::Value::String("sgd".into()));
        for bad in [
            "model.learning_rate",
            "learning_rate=1,2",
            "model.learning_rate=",
            "model.learning_rate=1,,2",
            "model.learning_rate=1,2,1",
            "a.b.c=1",
        ] {
            assert!(Over::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_grid_is_every_combination_last_key_fastest() {
        let a = Over::parse("model.learning_rate=1,2").unwrap();
        let b = Over::parse("data.units_per_partition=3,4,5").unwrap();
        let g = grid(&[a, b]);
        assert_eq!(g.len(), 6);
        assert_eq!(
            label(&g[0]),
            "model.learning_rate=1 data.units_per_partition=3"
        );
        assert_eq!(
            label(&g[1]),
            "model.learning_rate=1 data.units_per_partition=4"
        );
        assert_eq!(
            label(&g[5]),
            "model.learning_rate=2 data.units_per_partition=5"
        );
        assert_eq!(grid(&[]), vec![Vec::<Setting>::new()]);
    }
}
