//! Scenario errors that name the file, line, column and field, and the span index that maps a
//! field path (`arrival.rate_per_s`, `figure[0].x`) to where it is written in the TOML text.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// Where in the input a problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A position in the scenario file (1-based line and column).
    File { line: usize, column: usize },
    /// A `--set` override given on the command line.
    CommandLine,
    /// Nowhere more precise than the file itself.
    Unknown,
}

/// A problem with a scenario: one line, naming file, line and field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: PathBuf,
    pub location: Location,
    pub field: Option<String>,
    pub message: String,
}

impl Location {
    /// The top of the file, where the top-level keys go.
    pub fn top() -> Location {
        Location::File { line: 1, column: 1 }
    }

    /// This location, or the top of the file when it is unknown.
    pub fn or_top(self) -> Location {
        match self {
            Location::Unknown => Location::top(),
            known => known,
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", printable(&self.file.display().to_string()))?;
        match &self.location {
            Location::File { line, column } => write!(f, ":{line}:{column}")?,
            Location::CommandLine => write!(f, " (--set)")?,
            Location::Unknown => {}
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{}`", printable(field))?;
        }
        write!(f, ": {}", one_line(&self.message))
    }
}

/// `text` on one line (runs of whitespace, line breaks included, become one space) with every
/// other control character escaped: what a user wrote is echoed, never a terminal escape.
pub fn one_line(text: &str) -> String {
    printable(&text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `text` with each control character written as an escape (`\u{1b}`), so that bytes from an
/// input file or the command line never reach the terminal raw.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl std::error::Error for ScenarioError {}

/// Field path -> (line, column) of its key in the text, for every key and array element.
#[derive(Clone, Debug, Default)]
pub struct SpanIndex {
    positions: HashMap<String, (usize, usize)>,
    line_starts: Vec<usize>,
}

impl SpanIndex {
    /// Indexes `text`; returns a syntax error (with its position) when it is not valid TOML.
    pub fn build(file: &Path, text: &str) -> Result<SpanIndex, ScenarioError> {
        let mut index = SpanIndex {
            positions: HashMap::new(),
            line_starts: line_starts(text),
        };
        let table = DeTable::parse(text).map_err(|err| {
            let location = err
                .span()
                .map(|s| index.location_of(s.start))
                .unwrap_or(Location::Unknown);
            // Name the key of a duplicate-key error: the text the span covers.
            let key = err
                .span()
                .and_then(|s| text.get(s))
                .map(|k| k.trim().trim_matches(['[', ']']).trim())
                .filter(|k| !k.is_empty() && !k.contains('\n'));
            let message = match key {
                Some(key) if err.message().contains("duplicate key") => {
                    format!("invalid TOML: duplicate key `{key}`")
                }
                _ => format!("invalid TOML: {}", err.message()),
            };
            ScenarioError {
                file: file.to_path_buf(),
                location,
                field: None,
                message,
            }
        })?;
        index.walk_table("", table.get_ref());
        Ok(index)
    }

    fn walk_table(&mut self, prefix: &str, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            let position = self.position(key.span().start);
            self.positions.insert(path.clone(), position);
            self.walk_value(&path, value.get_ref());
        }
    }

    fn walk_value(&mut self, path: &str, value: &DeValue<'_>) {
        match value {
            DeValue::Table(table) => self.walk_table(path, table),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    let position = self.position(item.span().start);
                    self.positions.entry(item_path.clone()).or_insert(position);
                    self.walk_value(&item_path, item.get_ref());
                }
            }
            _ => {}
        }
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let column = offset - self.line_starts[line - 1] + 1;
        (line, column)
    }

    /// The location of byte `offset`.
    pub fn location_of(&self, offset: usize) -> Location {
        let (line, column) = self.position(offset);
        Location::File { line, column }
    }

    /// The field whose key or value starts last on the line of byte `offset`, at or before it:
    /// the field a value error at `offset` belongs to.
    pub fn field_at(&self, offset: usize) -> Option<String> {
        let (line, column) = self.position(offset);
        self.positions
            .iter()
            .filter(|&(_, &(l, c))| l == line && c <= column)
            .max_by_key(|&(path, &(_, c))| (c, path.len()))
            .map(|(path, _)| path.clone())
    }

    /// The location of `path`, or of its longest written prefix (a missing field is reported at
    /// the table that lacks it).
    pub fn locate(&self, path: &str) -> Location {
        let mut candidate = path;
        loop {
            if let Some(&(line, column)) = self.positions.get(candidate) {
                return Location::File { line, column };
            }
            match candidate.rfind(['.', '[']) {
                Some(cut) => candidate = &candidate[..cut],
                None => return Location::Unknown,
            }
        }
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_keys_nested_tables_and_array_items() {
        let text = "name = \"x\"\n[arrival]\nrate_per_s = 5\n\n[[figure]]\nx = \"a\"\n";
        let index = SpanIndex::build(Path::new("s.toml"), text).unwrap();
        assert_eq!(index.locate("name"), Location::File { line: 1, column: 1 });
        assert_eq!(
            index.locate("arrival.rate_per_s"),
            Location::File { line: 3, column: 1 }
        );
        assert_eq!(
            index.locate("figure[0].x"),
            Location::File { line: 6, column: 1 }
        );
        // A field that is not written is reported at the nearest written ancestor.
        assert_eq!(
            index.locate("arrival.bursty.mean_burst_s"),
            index.locate("arrival")
        );
        assert_eq!(index.locate("nothing"), Location::Unknown);
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let err = SpanIndex::build(Path::new("s.toml"), "a = 1\nb = = 2\n").unwrap_err();
        assert!(
            matches!(err.location, Location::File { line: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().starts_with("s.toml:2:"), "{err}");
    }

    #[test]
    fn control_bytes_are_escaped_and_value_errors_find_their_field() {
        let err = ScenarioError {
            file: "a.toml".into(),
            location: Location::CommandLine,
            field: Some("work\u{1b}[31mload".into()),
            message: "unknown field `work\u{1b}[31mload`".into(),
        };
        let shown = err.to_string();
        assert!(!shown.contains('\u{1b}'), "{shown}");
        assert!(shown.contains("work\\u{1b}[31mload"), "{shown}");
        let text = "seeds = [1]\n[workload]\nn_requests = 9223372036854775808\n";
        let index = SpanIndex::build(Path::new("s.toml"), text).unwrap();
        let value_at = text.find("9223").unwrap();
        assert_eq!(
            index.field_at(value_at).as_deref(),
            Some("workload.n_requests")
        );
        assert_eq!(index.field_at(9).as_deref(), Some("seeds[0]"));
    }

    #[test]
    fn display_is_one_line() {
        let err = ScenarioError {
            file: "a.toml".into(),
            location: Location::File { line: 3, column: 7 },
            field: Some("arrival.rate_per_s".into()),
            message: "must be > 0\n(got -1)".into(),
        };
        assert_eq!(
            err.to_string(),
            "a.toml:3:7: field `arrival.rate_per_s`: must be > 0 (got -1)"
        );
    }
}
