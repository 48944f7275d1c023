//! The steps of every replica as a Chrome trace-event file (the JSON object format of the Trace
//! Event Format: `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`, which
//! Perfetto and chrome://tracing open): one track (thread) per replica, one complete event
//! (`"ph": "X"`, `ts` and `dur` in microseconds) per step with its sequences and prefill,
//! decode and context tokens and its time by kernel class (linear, element-wise, attention,
//! routed experts, head, communication, host; microseconds) as `args`, and a counter (`"ph": "C"`) of the replica's KV blocks
//! in use at each step's start. Events stream to disk as steps start; past `MAX_EVENTS` events
//! a run writes no more and says how many it left out (`otherData.events_dropped`), so a file
//! stays under about 40 MB. Written through a temporary file and renamed into place by `finish`.

use crate::serving::{StepBreakdown, StepWork};
use crate::time::{SimDuration, SimTime};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most events one file holds (step slices and KV counters together; about 200 bytes each).
pub const MAX_EVENTS: u64 = 200_000;

/// What a step's slice shows: its sequences and tokens (copied from its `StepWork`, which
/// borrows the replica while the step is being set up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCounts {
    pub sequences: u64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub context_tokens: u64,
}

impl StepCounts {
    pub fn of(work: &StepWork<'_>) -> StepCounts {
        StepCounts {
            sequences: work.requests,
            prefill_tokens: work.prefill_tokens,
            decode_tokens: work.decode_tokens,
            context_tokens: work.context_tokens,
        }
    }
}

/// A trace-event file being written.
pub struct TraceEvents {
    writer: std::io::BufWriter<std::fs::File>,
    tmp: PathBuf,
    path: PathBuf,
    written: u64,
    dropped: u64,
    error: Option<String>,
}

/// A part of a step's time, ns, as microseconds with nanosecond digits (rounded to the ns).
fn part(nanos: f64) -> String {
    micros(nanos.max(0.0).round() as u64)
}

/// Microseconds with nanosecond digits.
fn micros(nanos: u64) -> String {
    format!("{}.{:03}", nanos / 1000, nanos % 1000)
}

impl TraceEvents {
    /// Creates `path` (through a temporary file) for `replicas` replicas of the run `label`.
    pub fn create(path: &Path, label: &str, replicas: usize) -> Result<TraceEvents, String> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = path.with_extension("json.tmp");
        let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut events = TraceEvents {
            writer: std::io::BufWriter::new(file),
            tmp,
            path: path.to_path_buf(),
            written: 0,
            dropped: 0,
            error: None,
        };
        let name = serde_json::to_string(label).expect("a string serializes");
        events.raw(&format!(
            "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n\
             {{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{{\"name\":{name}}}}}"
        ));
        for r in 0..replicas {
            events.raw(&format!(
                ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":{r},\"args\":{{\"name\":\"replica {r}\"}}}}"
            ));
        }
        Ok(events)
    }

    fn raw(&mut self, text: &str) {
        if self.error.is_none()
            && let Err(e) = self.writer.write_all(text.as_bytes())
        {
            self.error = Some(format!("{}: {e}", self.tmp.display()));
        }
    }

    /// Whether one more event fits under `MAX_EVENTS` (and counts it either way).
    fn admit(&mut self) -> bool {
        if self.written < MAX_EVENTS {
            self.written += 1;
            true
        } else {
            self.dropped += 1;
            false
        }
    }

    /// Replica `replica` runs a step of `work` from `start` for `duration` (its time by kernel
    /// class in `breakdown`), with `kv_blocks` KV blocks in use once it is scheduled.
    pub fn step(
        &mut self,
        replica: usize,
        start: SimTime,
        duration: SimDuration,
        work: StepCounts,
        kv_blocks: u64,
        breakdown: &StepBreakdown,
    ) {
        let kind = match (work.prefill_tokens > 0, work.decode_tokens > 0) {
            (true, true) => "mixed",
            (true, false) => "prefill",
            _ => "decode",
        };
        if self.admit() {
            self.raw(&format!(
                ",\n{{\"name\":\"{kind}\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":0,\"tid\":{replica},\"args\":{{\"sequences\":{},\"prefill_tokens\":{},\"decode_tokens\":{},\"context_tokens\":{},\"linear_us\":{},\"elementwise_us\":{},\"attention_us\":{},\"experts_us\":{},\"head_us\":{},\"communication_us\":{},\"host_us\":{}}}}}",
                micros(start.0),
                micros(duration.0),
                work.sequences,
                work.prefill_tokens,
                work.decode_tokens,
                work.context_tokens,
                part(breakdown.parts.linear_ns),
                part(breakdown.parts.elementwise_ns),
                part(breakdown.parts.attention_ns),
                part(breakdown.moe_ns),
                part(breakdown.parts.head_ns),
                part(breakdown.communication_ns),
                part(breakdown.parts.host_ns),
            ));
        }
        if self.admit() {
            self.raw(&format!(
                ",\n{{\"name\":\"kv blocks, replica {replica}\",\"ph\":\"C\",\"ts\":{},\"pid\":0,\"tid\":{replica},\"args\":{{\"used\":{kv_blocks}}}}}",
                micros(start.0),
            ));
        }
    }

    /// Closes the array, states the cap and what was left out, and moves the file into place;
    /// on an earlier write error removes it instead.
    pub fn finish(mut self) -> Result<(), String> {
        let tail = format!(
            "\n],\"otherData\":{{\"max_events\":{MAX_EVENTS},\"events_written\":{},\"events_dropped\":{}}}}}\n",
            self.written, self.dropped
        );
        self.raw(&tail);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_trace_event_json_with_one_track_per_replica() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let mut events = TraceEvents::create(&path, "run \"a\"", 2).unwrap();
        let work = StepCounts::of(&StepWork {
            requests: 3,
            prefill_tokens: 512,
            decode_tokens: 2,
            context_tokens: 1500,
            ..StepWork::default()
        });
        let breakdown = StepBreakdown {
            moe_ns: 250.4,
            parts: crate::serving::StepParts {
                linear_ns: 1_000_000.0,
                host_ns: 1_000_000.0,
                ..Default::default()
            },
            ..StepBreakdown::default()
        };
        events.step(
            1,
            SimTime(1_500),
            SimDuration(2_000_250),
            work,
            40,
            &breakdown,
        );
        events.finish().unwrap();
        assert!(!dir.path().join("t.json.tmp").exists());
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc["displayTimeUnit"], "ms");
        let events = doc["traceEvents"].as_array().unwrap();
        // Process name, two thread names, the step, its KV counter.
        assert_eq!(events.len(), 5);
        assert_eq!(events[0]["args"]["name"], "run \"a\"");
        assert_eq!(events[2]["args"]["name"], "replica 1");
        let step = &events[3];
        assert_eq!(step["ph"], "X");
        assert_eq!(step["name"], "mixed");
        assert_eq!(step["tid"], 1);
        assert_eq!(step["ts"].as_f64().unwrap(), 1.5);
        assert_eq!(step["dur"].as_f64().unwrap(), 2000.25);
        assert_eq!(step["args"]["prefill_tokens"], 512);
        // The parts, in microseconds, add up to the duration.
        let parts: f64 = [
            "linear_us",
            "elementwise_us",
            "attention_us",
            "experts_us",
            "head_us",
            "communication_us",
            "host_us",
        ]
        .iter()
        .map(|k| step["args"][k].as_f64().unwrap())
        .sum();
        assert!((parts - 2000.25).abs() < 1e-9, "{parts}");
        assert_eq!(events[4]["ph"], "C");
        assert_eq!(events[4]["args"]["used"], 40);
        assert_eq!(doc["otherData"]["events_dropped"], 0);
    }

    #[test]
    fn past_the_cap_events_are_counted_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let mut events = TraceEvents::create(&path, "cap", 1).unwrap();
        let work = StepCounts {
            sequences: 1,
            decode_tokens: 1,
            ..StepCounts::default()
        };
        let steps = MAX_EVENTS / 2 + 10;
        for i in 0..steps {
            events.step(
                0,
                SimTime(i * 10),
                SimDuration(10),
                work,
                1,
                &StepBreakdown::default(),
            );
        }
        events.finish().unwrap();
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc["otherData"]["events_written"], MAX_EVENTS);
        assert_eq!(doc["otherData"]["events_dropped"], 20);
        assert_eq!(
            doc["traceEvents"].as_array().unwrap().len() as u64,
            MAX_EVENTS + 2
        );
    }
}
