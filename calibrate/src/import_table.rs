//! The CSV reading and the error type every importer shares (`import-vidur`, `import-h200`): a
//! table read whole with each record's line, so that every refused cell names the file, the
//! 1-based line and the column.

use std::path::{Path, PathBuf};

/// An import that failed: one line naming the file (and line and column where there is one).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}:{line}: column {column:?}: {message}", path.display())]
    Cell {
        path: PathBuf,
        line: u64,
        column: String,
        message: String,
    },
    #[error("{0}")]
    Write(#[from] expertsim_scenario::cost::op_profile::OpProfileError),
}

pub fn file_error(path: &Path, message: impl Into<String>) -> ImportError {
    ImportError::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A CSV read whole, with its header and each record's line, so a cell error can be located.
pub struct Table {
    pub path: PathBuf,
    pub header: Vec<String>,
    pub rows: Vec<(u64, csv::StringRecord)>,
}

impl Table {
    pub fn read(path: &Path) -> Result<Table, ImportError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .trim(csv::Trim::All)
            .from_path(path)
            .map_err(|e| file_error(path, format!("cannot read: {e}")))?;
        let header = reader
            .headers()
            .map_err(|e| file_error(path, format!("cannot read the header: {e}")))?
            .iter()
            .map(str::to_string)
            .collect();
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| file_error(path, format!("cannot read: {e}")))?;
            let line = record.position().map_or(0, csv::Position::line);
            rows.push((line, record));
        }
        if rows.is_empty() {
            return Err(file_error(path, "no rows after the header"));
        }
        Ok(Table {
            path: path.to_path_buf(),
            header,
            rows,
        })
    }

    pub fn column(&self, name: &str) -> Result<usize, ImportError> {
        self.header.iter().position(|h| h == name).ok_or_else(|| {
            file_error(
                &self.path,
                format!(
                    "no column {name:?} (the header has {} columns)",
                    self.header.len()
                ),
            )
        })
    }

    pub fn cell<T: std::str::FromStr>(
        &self,
        row: usize,
        column: usize,
        what: &str,
    ) -> Result<T, ImportError> {
        let (line, record) = &self.rows[row];
        let text = record.get(column).unwrap_or("");
        text.parse().map_err(|_| ImportError::Cell {
            path: self.path.clone(),
            line: *line,
            column: self.header[column].clone(),
            message: format!("expected {what}, got {text:?}"),
        })
    }

    /// A refusal of the cell at (`row`, `column`).
    pub fn refuse(&self, row: usize, column: usize, message: impl Into<String>) -> ImportError {
        ImportError::Cell {
            path: self.path.clone(),
            line: self.rows[row].0,
            column: self.header[column].clone(),
            message: message.into(),
        }
    }

    /// A finite, positive number (`what` names it in the refusal).
    pub fn positive(&self, row: usize, column: usize, what: &str) -> Result<f64, ImportError> {
        let value: f64 = self.cell(row, column, what)?;
        if !(value.is_finite() && value > 0.0) {
            return Err(self.refuse(
                row,
                column,
                format!("{what} must be finite and positive, got {value}"),
            ));
        }
        Ok(value)
    }

    pub fn millis(&self, row: usize, column: usize) -> Result<f64, ImportError> {
        let ms = self.positive(row, column, "a time in milliseconds")?;
        // Milliseconds to nanoseconds, rounded to the picosecond so that 0.072 ms is 72000 ns
        // and not 72000.00000000001.
        Ok((ms * 1e9).round() / 1e3)
    }
}
