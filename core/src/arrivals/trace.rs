//! Trace replay: request arrival times (and optional token counts) read from a CSV file, such as
//! the BurstGPT trace or the Azure LLM inference traces, and replayed as an arrival process; and
//! the statistics of what a replay offers (rate, burstiness, length distributions).

use super::{Arrival, ArrivalProcess, check_n_topics, uniform_topic};
use crate::rng::SimRng;
use crate::time::SimTime;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Accepted headers of the required timestamp column (seconds, float).
/// (`arrived_at` is the Azure traces' column as Splitwise and Vidur publish them.)
const TIMESTAMP_HEADERS: [&str; 3] = ["Timestamp", "timestamp", "arrived_at"];
/// Accepted headers of the optional prompt-length column.
const PROMPT_TOKEN_HEADERS: [&str; 3] = ["Request tokens", "prompt_tokens", "num_prefill_tokens"];
/// Accepted headers of the optional output-length column.
const OUTPUT_TOKEN_HEADERS: [&str; 3] = ["Response tokens", "output_tokens", "num_decode_tokens"];

/// One request of a trace, as read from the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceRow {
    /// Arrival time in seconds, as written in the file (finite, non-negative).
    pub timestamp_s: f64,
    /// Prompt length in tokens, if the trace has such a column and the cell is not empty.
    pub prompt_tokens: Option<u32>,
    /// Output length in tokens, if the trace has such a column and the cell is not empty.
    pub output_tokens: Option<u32>,
}

/// A request trace loaded from CSV: at least one row, timestamps non-decreasing.
///
/// The file needs a header row. The timestamp column (`Timestamp` as in BurstGPT, or
/// `timestamp`) is required; `Request tokens` / `prompt_tokens` and `Response tokens` /
/// `output_tokens` are optional; every other column is ignored, so the BurstGPT layout
/// `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type` loads as it is.
/// Fields are trimmed; an empty token cell means "unknown", an empty timestamp is an error.
#[derive(Clone, Debug)]
pub struct Trace {
    path: PathBuf,
    rows: Vec<TraceRow>,
}

/// Why a trace could not be loaded or replayed. Every message names the file; a bad cell also
/// names its 1-based line and its column.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: cannot open trace file: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: cannot read trace: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    #[error("{}:{line}: column {column:?}: {message}", path.display())]
    BadCell {
        path: PathBuf,
        line: u64,
        column: String,
        message: String,
    },
    #[error(
        "{}: no timestamp column (expected a column named \"Timestamp\", \"timestamp\" or \
         \"arrived_at\"); the header is: {header}",
        path.display()
    )]
    NoTimestampColumn { path: PathBuf, header: String },
    #[error("{}: columns {first:?} and {second:?} both give the {what}; keep one", path.display())]
    AmbiguousColumns {
        path: PathBuf,
        first: String,
        second: String,
        what: &'static str,
    },
    #[error("{}: the trace has no requests (no rows after the header)", path.display())]
    Empty { path: PathBuf },
    #[error("trace replay: time_scale must be finite and positive, got {time_scale}")]
    InvalidTimeScale { time_scale: f64 },
    #[error(
        "{}: the replayed requests span {span_s} s after time_scale, more than simulated time can hold",
        path.display()
    )]
    TooLong { path: PathBuf, span_s: f64 },
}

impl Trace {
    /// Reads and checks the CSV trace at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        let path = path.as_ref();
        let file = crate::input::open_input(path).map_err(|source| TraceError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Trace::from_reader(io::BufReader::new(file), path)
    }

    /// Reads and checks a CSV trace from `reader`; `path` is the name error messages give it.
    pub fn from_reader(
        reader: impl io::Read,
        path: impl Into<PathBuf>,
    ) -> Result<Trace, TraceError> {
        let path = path.into();
        let mut csv_reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(reader);
        let read_error = |source| TraceError::Read {
            path: path.clone(),
            source,
        };
        let header: Vec<String> = csv_reader
            .byte_headers()
            .map_err(read_error)?
            .iter()
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect();
        let Some(timestamp_column) = find_column(&path, &header, &TIMESTAMP_HEADERS, "timestamp")?
        else {
            let header = if header.iter().all(String::is_empty) {
                "(empty)".to_string()
            } else {
                header.join(",")
            };
            return Err(TraceError::NoTimestampColumn { path, header });
        };
        let prompt_column = find_column(&path, &header, &PROMPT_TOKEN_HEADERS, "prompt tokens")?;
        let output_column = find_column(&path, &header, &OUTPUT_TOKEN_HEADERS, "output tokens")?;

        let mut rows = Vec::new();
        let mut previous: Option<(f64, u64)> = None;
        let mut record = csv::ByteRecord::new();
        while csv_reader
            .read_byte_record(&mut record)
            .map_err(read_error)?
        {
            let line = record.position().map_or(0, csv::Position::line);
            let bad_cell = |column: usize, message: String| TraceError::BadCell {
                path: path.clone(),
                line,
                column: header[column].clone(),
                message,
            };
            let timestamp_s = match cell(&record, timestamp_column) {
                None => {
                    return Err(bad_cell(
                        timestamp_column,
                        "missing value (expected a time in seconds)".into(),
                    ));
                }
                Some(text) => parse_timestamp(&text, previous)
                    .map_err(|message| bad_cell(timestamp_column, message))?,
            };
            let tokens = |column: Option<usize>| -> Result<Option<u32>, TraceError> {
                let Some(column) = column else {
                    return Ok(None);
                };
                cell(&record, column)
                    .map(|text| parse_tokens(&text).map_err(|message| bad_cell(column, message)))
                    .transpose()
            };
            let prompt_tokens = tokens(prompt_column)?;
            let output_tokens = tokens(output_column)?;
            previous = Some((timestamp_s, line));
            rows.push(TraceRow {
                timestamp_s,
                prompt_tokens,
                output_tokens,
            });
        }
        if rows.is_empty() {
            return Err(TraceError::Empty { path });
        }
        Ok(Trace { path, rows })
    }

    /// A trace of `rows` made in memory, `name` standing for its file in messages (the serving
    /// family's calibration sessions replay their drawn calls so). `None` when `rows` is empty
    /// or its timestamps are not finite, non-negative and non-decreasing.
    pub fn of_rows(name: impl Into<PathBuf>, rows: Vec<TraceRow>) -> Option<Trace> {
        let ordered = rows
            .windows(2)
            .all(|w| w[0].timestamp_s <= w[1].timestamp_s);
        let valid = rows
            .iter()
            .all(|r| r.timestamp_s.is_finite() && r.timestamp_s >= 0.0);
        (!rows.is_empty() && ordered && valid).then(|| Trace {
            path: name.into(),
            rows,
        })
    }

    /// The file the trace was read from (or the name given to [`Trace::from_reader`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The requests in file order (which is time order).
    pub fn rows(&self) -> &[TraceRow] {
        &self.rows
    }

    /// Number of requests; at least 1.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Always false: a loaded trace has at least one request.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Seconds from the first to the last request, as written in the file.
    pub fn span_s(&self) -> f64 {
        self.rows[self.rows.len() - 1].timestamp_s - self.rows[0].timestamp_s
    }

    /// What replaying the first `max_requests` rows (all when `None`) at `time_scale` offers.
    pub fn stats(&self, max_requests: Option<usize>, time_scale: f64) -> TraceStats {
        let rows = &self.rows[..max_requests.map_or(self.rows.len(), |n| n.min(self.rows.len()))];
        let span_s = match (rows.first(), rows.last()) {
            (Some(first), Some(last)) => (last.timestamp_s - first.timestamp_s) * time_scale,
            _ => 0.0,
        };
        let gaps: Vec<f64> = rows
            .windows(2)
            .map(|w| (w[1].timestamp_s - w[0].timestamp_s) * time_scale)
            .collect();
        let interarrival_cv = if gaps.len() < 2 {
            None
        } else {
            let n = gaps.len() as f64;
            let mean = gaps.iter().sum::<f64>() / n;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
            (mean > 0.0).then(|| var.sqrt() / mean)
        };
        let lengths = |pick: fn(&TraceRow) -> Option<u32>| {
            let mut values: Vec<u32> = rows.iter().filter_map(pick).collect();
            LengthStats::of(&mut values)
        };
        TraceStats {
            requests: rows.len(),
            span_s,
            mean_rate_per_s: (span_s > 0.0).then(|| (rows.len() - 1) as f64 / span_s),
            interarrival_cv,
            prompt_tokens: lengths(|r| r.prompt_tokens),
            output_tokens: lengths(|r| r.output_tokens),
        }
    }
}

/// What a trace replay offers: request count, span and mean rate after `time_scale`,
/// burstiness as the coefficient of variation of inter-arrival times (1 for Poisson arrivals,
/// above 1 for bursty ones), and the token-length distributions when the trace has them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceStats {
    pub requests: usize,
    /// Seconds from the first to the last replayed request.
    pub span_s: f64,
    /// (requests - 1) / span: None when every request arrives at once.
    pub mean_rate_per_s: Option<f64>,
    /// Sample standard deviation / mean of the gaps: None with fewer than 3 requests or no gap.
    pub interarrival_cv: Option<f64>,
    pub prompt_tokens: Option<LengthStats>,
    pub output_tokens: Option<LengthStats>,
}

/// Mean and nearest-rank percentiles of a token-length column (over the rows that give one).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LengthStats {
    /// Rows with a value.
    pub count: usize,
    pub mean: f64,
    pub p50: u32,
    pub p90: u32,
    pub p99: u32,
    pub max: u32,
}

impl LengthStats {
    fn of(values: &mut [u32]) -> Option<LengthStats> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let n = values.len();
        // Nearest rank: the smallest value with at least q of the rows at or below it.
        let rank = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(LengthStats {
            count: n,
            mean: values.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64,
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: values[n - 1],
        })
    }
}

impl std::fmt::Display for TraceStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} requests over {:.1} s", self.requests, self.span_s)?;
        if let Some(rate) = self.mean_rate_per_s {
            write!(f, ", mean rate {rate:.3} req/s")?;
        }
        if let Some(cv) = self.interarrival_cv {
            write!(f, ", inter-arrival CV {cv:.2}")?;
        }
        for (name, stats) in [
            ("prompt", &self.prompt_tokens),
            ("output", &self.output_tokens),
        ] {
            if let Some(l) = stats {
                write!(
                    f,
                    "; {name} tokens mean {:.0} p50 {} p90 {} p99 {} max {}",
                    l.mean, l.p50, l.p90, l.p99, l.max
                )?;
            }
        }
        Ok(())
    }
}

/// The index of the one header among `names`, None if absent, an error if several match.
fn find_column(
    path: &Path,
    header: &[String],
    names: &[&str],
    what: &'static str,
) -> Result<Option<usize>, TraceError> {
    let mut matches = header
        .iter()
        .enumerate()
        .filter(|(_, name)| names.contains(&name.as_str()));
    let first = matches.next();
    if let (Some((_, first)), Some((_, second))) = (first, matches.next()) {
        return Err(TraceError::AmbiguousColumns {
            path: path.to_path_buf(),
            first: first.clone(),
            second: second.clone(),
            what,
        });
    }
    Ok(first.map(|(index, _)| index))
}

/// The text of cell `column`, or None when the row is too short or the cell is empty.
fn cell(record: &csv::ByteRecord, column: usize) -> Option<String> {
    record
        .get(column)
        .filter(|bytes| !bytes.is_empty())
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
}

/// Parses a timestamp cell; `previous` is the previous row's time and line.
fn parse_timestamp(text: &str, previous: Option<(f64, u64)>) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("expected a number, got {text:?}"))?;
    if !value.is_finite() {
        return Err(format!("expected a finite number, got {text:?}"));
    }
    if value < 0.0 {
        return Err(format!("expected a non-negative time, got {text:?}"));
    }
    if let Some((previous_s, previous_line)) = previous
        && value < previous_s
    {
        return Err(format!(
            "timestamps must be non-decreasing, got {text:?} after {previous_s} on line {previous_line}"
        ));
    }
    // `+ 0.0` turns a written "-0" into 0.
    Ok(value + 0.0)
}

/// Parses a token-count cell.
fn parse_tokens(text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| format!("expected a non-negative integer token count, got {text:?}"))
}

/// Replays a [`Trace`] as an arrival process.
///
/// Times are shifted so the first request arrives at 0 and multiplied by `time_scale` (below 1
/// compresses the trace, i.e. raises the load; above 1 stretches it). Token counts are passed
/// through. Traces carry no topics, so each request draws one uniformly from `0..n_topics`, one
/// draw per arrival from `rng`. At most `max_requests` rows are replayed (all when `None`).
pub struct TraceReplay {
    trace: Arc<Trace>,
    next_row: usize,
    end_row: usize,
    first_s: f64,
    time_scale: f64,
    n_topics: u32,
    rng: SimRng,
}

impl TraceReplay {
    /// Takes the trace by value or as an `Arc<Trace>`, so parallel runs can share one copy.
    ///
    /// # Errors
    /// If `time_scale` is not finite and positive, or the replayed span would not fit in
    /// [`SimTime`].
    ///
    /// # Panics
    /// If `n_topics` is zero.
    pub fn new(
        trace: impl Into<Arc<Trace>>,
        max_requests: Option<usize>,
        time_scale: f64,
        n_topics: u32,
        rng: SimRng,
    ) -> Result<TraceReplay, TraceError> {
        check_n_topics("TraceReplay", n_topics);
        let trace = trace.into();
        if !(time_scale.is_finite() && time_scale > 0.0) {
            return Err(TraceError::InvalidTimeScale { time_scale });
        }
        let end_row = max_requests.map_or(trace.len(), |max| max.min(trace.len()));
        let first_s = trace.rows[0].timestamp_s;
        if end_row > 0 {
            let span_s = (trace.rows[end_row - 1].timestamp_s - first_s) * time_scale;
            // SimTime holds up to 2^64 ns, about 584 years.
            if !(span_s.is_finite() && span_s * 1e9 < u64::MAX as f64) {
                return Err(TraceError::TooLong {
                    path: trace.path.clone(),
                    span_s,
                });
            }
        }
        Ok(TraceReplay {
            trace,
            next_row: 0,
            end_row,
            first_s,
            time_scale,
            n_topics,
            rng,
        })
    }
}

impl ArrivalProcess for TraceReplay {
    fn next_arrival(&mut self) -> Option<Arrival> {
        if self.next_row >= self.end_row {
            return None;
        }
        let row = self.trace.rows[self.next_row];
        self.next_row += 1;
        Some(Arrival {
            time: SimTime::from_secs_f64((row.timestamp_s - self.first_s) * self.time_scale),
            topic: uniform_topic(&mut self.rng, self.n_topics),
            prompt_tokens: row.prompt_tokens,
            output_tokens: row.output_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_time_ordered, collect};
    use super::*;
    use crate::rng::stream;

    const SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/traces/burstgpt_layout_synthetic.csv"
    );

    fn parse(text: &str) -> Result<Trace, TraceError> {
        Trace::from_reader(text.as_bytes(), "traces/x.csv")
    }

    fn error_message(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    fn replay(trace: Trace, max: Option<usize>, time_scale: f64, seed: u64) -> Vec<Arrival> {
        let mut replay =
            TraceReplay::new(trace, max, time_scale, 8, stream(seed, "arrivals")).unwrap();
        collect(&mut replay)
    }

    #[test]
    fn burstgpt_layout_sample_loads_and_replays_from_zero() {
        let trace = Trace::load(SAMPLE).unwrap();
        assert_eq!(trace.len(), 200);
        // The sample's first and last rows, as written in the file.
        assert_eq!(
            trace.rows()[0],
            TraceRow {
                timestamp_s: 3602.947,
                prompt_tokens: Some(6460),
                output_tokens: Some(63),
            }
        );
        assert_eq!(trace.rows()[199].timestamp_s, 3746.4);
        assert!(trace.rows().iter().any(|row| row.output_tokens == Some(0)));

        let arrivals = replay(trace.clone(), None, 1.0, 1);
        assert_eq!(arrivals.len(), 200);
        assert_time_ordered(&arrivals);
        assert_eq!(arrivals[0].time, SimTime::ZERO);
        assert_eq!(arrivals[0].prompt_tokens, Some(6460));
        assert_eq!(arrivals[0].output_tokens, Some(63));
        assert_eq!(
            arrivals[1].time,
            SimTime::from_secs_f64(3607.578 - 3602.947)
        );
        assert_eq!(
            arrivals[199].time,
            SimTime::from_secs_f64(3746.4 - 3602.947)
        );
        assert!(arrivals.iter().all(|a| a.topic < 8));
    }

    #[test]
    fn time_scale_and_max_requests_are_applied() {
        let trace = Trace::load(SAMPLE).unwrap();
        let first = trace.rows()[0].timestamp_s;
        let fast = replay(trace.clone(), Some(50), 0.5, 1);
        assert_eq!(fast.len(), 50);
        for (arrival, row) in fast.iter().zip(trace.rows()) {
            let expected = SimTime::from_secs_f64((row.timestamp_s - first) * 0.5);
            assert_eq!(arrival.time, expected);
            assert_eq!(arrival.prompt_tokens, row.prompt_tokens);
        }
        let slow = replay(trace.clone(), Some(10_000), 2.0, 1);
        assert_eq!(slow.len(), 200);
        assert_eq!(slow[199].time, SimTime::from_secs_f64(trace.span_s() * 2.0));
        assert!(replay(trace, Some(0), 1.0, 1).is_empty());
    }

    #[test]
    fn same_seed_gives_the_same_topics() {
        let trace = Arc::new(Trace::load(SAMPLE).unwrap());
        let topics = |seed| -> Vec<u32> {
            let mut replay =
                TraceReplay::new(trace.clone(), None, 1.0, 8, stream(seed, "arrivals")).unwrap();
            collect(&mut replay).iter().map(|a| a.topic).collect()
        };
        assert_eq!(topics(11), topics(11));
        assert_ne!(topics(11), topics(12));
    }

    #[test]
    fn lowercase_layout_any_column_order_and_empty_token_cells() {
        let trace = parse(
            "request_id,output_tokens,timestamp,prompt_tokens\n\
             a,10,5.5,100\n\
             b,,6,\n\
             c,7,6,3\n",
        )
        .unwrap();
        let rows = trace.rows();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (
                rows[0].timestamp_s,
                rows[0].prompt_tokens,
                rows[0].output_tokens
            ),
            (5.5, Some(100), Some(10))
        );
        assert_eq!((rows[1].prompt_tokens, rows[1].output_tokens), (None, None));
        assert_eq!(rows[2].timestamp_s, 6.0);
        let arrivals = replay(trace, None, 1.0, 1);
        assert_eq!(arrivals[0].time, SimTime::ZERO);
        assert_eq!(arrivals[2].time, SimTime::from_secs_f64(0.5));
    }

    #[test]
    fn timestamp_only_trace_has_no_token_counts() {
        let trace = parse("Timestamp\n0\n1.25\n").unwrap();
        let arrivals = replay(trace, None, 1.0, 1);
        assert_eq!(arrivals.len(), 2);
        assert!(
            arrivals
                .iter()
                .all(|a| a.prompt_tokens.is_none() && a.output_tokens.is_none())
        );
    }

    #[test]
    fn bad_cells_name_file_line_and_column() {
        let header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
        let good_rows = "0,ChatGPT,1,2,3,API log\n".repeat(5);
        let with_row = |row: &str| format!("{header}{good_rows}{row}\n");
        assert_eq!(
            error_message(&with_row("abc,ChatGPT,1,2,3,API log")),
            r#"traces/x.csv:7: column "Timestamp": expected a number, got "abc""#
        );
        assert_eq!(
            error_message(&with_row("-1,ChatGPT,1,2,3,API log")),
            r#"traces/x.csv:7: column "Timestamp": expected a non-negative time, got "-1""#
        );
        assert_eq!(
            error_message(&with_row("inf,ChatGPT,1,2,3,API log")),
            r#"traces/x.csv:7: column "Timestamp": expected a finite number, got "inf""#
        );
        assert_eq!(
            error_message(&with_row(",ChatGPT,1,2,3,API log")),
            r#"traces/x.csv:7: column "Timestamp": missing value (expected a time in seconds)"#
        );
        assert_eq!(
            error_message(&with_row("1,ChatGPT,-3,2,3,API log")),
            r#"traces/x.csv:7: column "Request tokens": expected a non-negative integer token count, got "-3""#
        );
        assert_eq!(
            error_message(&with_row("1,ChatGPT,1,2.5,3,API log")),
            r#"traces/x.csv:7: column "Response tokens": expected a non-negative integer token count, got "2.5""#
        );
        // Ignored columns are not checked.
        assert!(parse(&with_row("1,ChatGPT,1,2,lots,")).is_ok());
    }

    #[test]
    fn decreasing_timestamps_are_rejected() {
        assert_eq!(
            error_message("timestamp\n1\n4\n3.5\n"),
            r#"traces/x.csv:4: column "timestamp": timestamps must be non-decreasing, got "3.5" after 4 on line 3"#
        );
    }

    #[test]
    fn missing_timestamp_column_lists_the_header() {
        assert_eq!(
            error_message("time,Model\n1,ChatGPT\n"),
            "traces/x.csv: no timestamp column (expected a column named \"Timestamp\", \
             \"timestamp\" or \"arrived_at\"); the header is: time,Model"
        );
        assert_eq!(
            error_message(""),
            "traces/x.csv: no timestamp column (expected a column named \"Timestamp\", \
             \"timestamp\" or \"arrived_at\"); the header is: (empty)"
        );
        assert_eq!(
            error_message("Timestamp,timestamp\n1,1\n"),
            "traces/x.csv: columns \"Timestamp\" and \"timestamp\" both give the timestamp; keep one"
        );
    }

    #[test]
    fn a_header_without_rows_is_an_empty_trace() {
        assert_eq!(
            error_message("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"),
            "traces/x.csv: the trace has no requests (no rows after the header)"
        );
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("nope.csv");
        let message = Trace::load(&path).unwrap_err().to_string();
        assert!(
            message.starts_with(&format!("{}: cannot open trace file: ", path.display())),
            "{message}"
        );
    }

    #[test]
    fn load_reads_a_file_and_names_it_in_errors() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("bad.csv");
        std::fs::write(&path, "Timestamp\n1\nx\n").unwrap();
        assert_eq!(
            Trace::load(&path).unwrap_err().to_string(),
            format!(
                "{}:3: column \"Timestamp\": expected a number, got \"x\"",
                path.display()
            )
        );
    }

    #[test]
    fn invalid_replay_settings_are_errors() {
        let trace = parse("Timestamp\n0\n100\n").unwrap();
        for time_scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let error = TraceReplay::new(trace.clone(), None, time_scale, 4, stream(1, "a"))
                .err()
                .unwrap();
            assert!(
                matches!(error, TraceError::InvalidTimeScale { .. }),
                "{error}"
            );
        }
        let error = TraceReplay::new(trace.clone(), None, 1e300, 4, stream(1, "a"))
            .err()
            .unwrap();
        assert!(matches!(error, TraceError::TooLong { .. }), "{error}");
        // The span check covers only the replayed rows.
        assert!(TraceReplay::new(trace, Some(1), 1e300, 4, stream(1, "a")).is_ok());
    }
}

#[cfg(test)]
mod stats_tests {
    use super::*;

    fn parse(text: &str) -> Trace {
        Trace::from_reader(text.as_bytes(), "t.csv").unwrap()
    }

    /// Hand-worked: gaps 1, 1, 4 s -> mean 2, sample sd sqrt(((1-2)^2*2 + (4-2)^2)/2) = sqrt(3);
    /// CV = sqrt(3)/2; at time_scale 0.5 the span halves and the rate doubles, the CV stays.
    #[test]
    fn hand_worked_stats() {
        let t = parse(
            "arrived_at,num_prefill_tokens,num_decode_tokens\n\
             10,100,1\n11,200,2\n12,300,3\n16,400,\n",
        );
        let s = t.stats(None, 1.0);
        assert_eq!(s.requests, 4);
        assert_eq!(s.span_s, 6.0);
        assert_eq!(s.mean_rate_per_s, Some(0.5));
        assert!((s.interarrival_cv.unwrap() - 3f64.sqrt() / 2.0).abs() < 1e-12);
        let p = s.prompt_tokens.unwrap();
        assert_eq!(
            (p.count, p.mean, p.p50, p.p90, p.max),
            (4, 250.0, 200, 400, 400)
        );
        // The last row has no output length: three values.
        assert_eq!(s.output_tokens.unwrap().count, 3);
        let fast = t.stats(None, 0.5);
        assert_eq!(fast.span_s, 3.0);
        assert_eq!(fast.mean_rate_per_s, Some(1.0));
        assert!((fast.interarrival_cv.unwrap() - s.interarrival_cv.unwrap()).abs() < 1e-12);
        // The first two requests only.
        assert_eq!(t.stats(Some(2), 1.0).mean_rate_per_s, Some(1.0));
        assert_eq!(t.stats(Some(2), 1.0).interarrival_cv, None);
    }

    /// The committed Azure traces (Splitwise, via Vidur) load in their own layout. Their
    /// statistics, computed independently (Python's statistics.stdev over the same gaps): the
    /// conversation trace is 19,366 requests at 5.53 req/s with inter-arrival CV 1.094, close
    /// to Poisson; the code trace 8,819 at 2.57 req/s with CV 13.15, very bursty.
    #[test]
    fn azure_traces_load_with_their_statistics() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/traces");
        let conv = Trace::load(dir.join("azure_conv_2023.csv"))
            .unwrap()
            .stats(None, 1.0);
        assert_eq!(conv.requests, 19_366);
        assert!(
            (conv.mean_rate_per_s.unwrap() - 5.5301).abs() < 1e-3,
            "{conv}"
        );
        assert!(
            (conv.interarrival_cv.unwrap() - 1.0942).abs() < 1e-3,
            "{conv}"
        );
        assert!(conv.prompt_tokens.is_some() && conv.output_tokens.is_some());
        let code = Trace::load(dir.join("azure_code_2023.csv"))
            .unwrap()
            .stats(None, 1.0);
        assert_eq!(code.requests, 8_819);
        assert!(
            (code.mean_rate_per_s.unwrap() - 2.5664).abs() < 1e-3,
            "{code}"
        );
        assert!(
            (code.interarrival_cv.unwrap() - 13.152).abs() < 1e-2,
            "{code}"
        );
    }
}
