//! Per-request records in one schema for every family that serves requests
//! (`--per-request-csv`, docs/metrics.md): the common columns, then the family's own. Records
//! stream to disk as requests finish, so a run keeps none of them in memory.

use crate::time::SimTime;
use std::path::{Path, PathBuf};

/// The columns every family's per-request CSV starts with.
pub const COMMON_COLUMNS: &[&str] = &[
    "family",
    "request_id",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "e2e_ms",
];

/// A family-specific value of a record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Extra<'a> {
    Count(u64),
    Time(SimTime),
    Millis(f64),
    Text(&'a str),
}

/// One finished request. `first_token` is `None` where the family does not model token timing
/// (a CAPS batch finishes all its requests at once); its CSV cell is then empty.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord<'a> {
    pub id: u64,
    pub arrival: SimTime,
    pub first_token: Option<SimTime>,
    pub finish: SimTime,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Values of the family's own columns, in the order `CsvRecords::create` was given.
    pub extra: &'a [Extra<'a>],
}

/// Receives each request as it finishes.
pub trait RecordSink {
    fn record(&mut self, record: &RequestRecord<'_>);
}

/// A sink that drops every record.
pub struct DiscardRecords;

impl RecordSink for DiscardRecords {
    fn record(&mut self, _: &RequestRecord<'_>) {}
}

/// Streams records to a CSV file, renamed into place by `finish` (a failed run leaves no file).
pub struct CsvRecords {
    family: &'static str,
    n_extra: usize,
    writer: csv::Writer<std::io::BufWriter<std::fs::File>>,
    tmp: PathBuf,
    path: PathBuf,
    error: Option<String>,
}

impl CsvRecords {
    /// Creates `path` (through a temporary file) with the common columns and `extra_columns`.
    pub fn create(
        path: &Path,
        family: &'static str,
        extra_columns: &[&str],
    ) -> Result<CsvRecords, String> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = path.with_extension("csv.tmp");
        let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut writer = csv::Writer::from_writer(std::io::BufWriter::new(file));
        writer
            .write_record(COMMON_COLUMNS.iter().chain(extra_columns))
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(CsvRecords {
            family,
            n_extra: extra_columns.len(),
            writer,
            tmp,
            path: path.to_path_buf(),
            error: None,
        })
    }

    /// Flushes and moves the file into place; on an earlier write error removes it instead.
    pub fn finish(mut self) -> Result<(), String> {
        if let Some(error) = self.error.take() {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(error);
        }
        self.writer
            .flush()
            .map_err(|e| format!("{}: {e}", self.tmp.display()))?;
        drop(self.writer);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

fn seconds(t: SimTime) -> String {
    format!("{:.9}", t.as_secs_f64())
}

impl RecordSink for CsvRecords {
    fn record(&mut self, r: &RequestRecord<'_>) {
        if self.error.is_some() {
            return;
        }
        assert_eq!(
            r.extra.len(),
            self.n_extra,
            "a record's extra values match the family's columns"
        );
        let mut row = vec![
            self.family.to_string(),
            r.id.to_string(),
            seconds(r.arrival),
            r.first_token.map(seconds).unwrap_or_default(),
            seconds(r.finish),
            r.prompt_tokens.to_string(),
            r.output_tokens.to_string(),
            format!("{:.6}", r.finish.since(r.arrival).as_millis_f64()),
        ];
        row.extend(r.extra.iter().map(|extra| match *extra {
            Extra::Count(n) => n.to_string(),
            Extra::Time(t) => seconds(t),
            Extra::Millis(ms) => format!("{ms:.6}"),
            Extra::Text(s) => s.to_string(),
        }));
        if let Err(e) = self.writer.write_record(&row) {
            self.error = Some(format!("{}: {e}", self.tmp.display()));
        }
    }
}

/// Runs `simulate` with records streamed to `csv` when given (and discarded otherwise); the file
/// appears only if the run and the writes succeed.
pub fn with_csv<T>(
    csv: Option<&Path>,
    family: &'static str,
    extra_columns: &[&str],
    simulate: impl FnOnce(&mut dyn RecordSink) -> T,
) -> Result<T, String> {
    match csv {
        Some(path) => {
            let mut sink = CsvRecords::create(path, family, extra_columns)?;
            let out = simulate(&mut sink);
            sink.finish()?;
            Ok(out)
        }
        None => Ok(simulate(&mut DiscardRecords)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_share_the_common_columns_and_leave_unmodelled_cells_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        with_csv(Some(&path), "demo", &["adapter"], |sink| {
            sink.record(&RequestRecord {
                id: 7,
                arrival: SimTime(1_000_000_000),
                first_token: None,
                finish: SimTime(1_250_000_000),
                prompt_tokens: 128,
                output_tokens: 16,
                extra: &[Extra::Text("law")],
            });
        })
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "family,request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,e2e_ms,adapter"
        );
        assert_eq!(
            lines[1],
            "demo,7,1.000000000,,1.250000000,128,16,250.000000,law"
        );
        assert!(!dir.path().join("r.csv.tmp").exists());
    }
}
