//! Expert-utilization traces (GEM step 1): tokens routed to each expert of each layer at each
//! engine step. A synthetic generator (consistent experts, correlated temporal expert groups,
//! per-layer popularity) and a text file format for recorded traces. A trace is split into the
//! observed steps a mapper may read (its window is a prefix of them) and the unseen steps the
//! serving simulation replays. `TraceSpec` is a scenario's trace (generated per seed from
//! `(seed, "gem/trace")`, or loaded once); the gem family and the serving family's
//! `experts.trace` route by it (docs/serving-family.md, "Expert traces").

use crate::memo::{ExactKey, Memo};
use crate::rng::SimRng;
use rand::RngExt;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, LogNormal};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Tokens per (step, layer, expert).
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertTrace {
    n_layers: usize,
    n_experts: usize,
    n_steps: usize,
    /// `[layer][step][expert]`, so one layer's window is one slice.
    counts: Vec<f32>,
}

/// A trace file that cannot be read or does not describe a trace; names the file and line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("trace {}:{line}: {message}", path.display())]
    Format {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("cannot write trace {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The first line of a trace file.
pub const TRACE_HEADER: &str = "# expertsim expert trace v1";

impl ExpertTrace {
    /// A trace from `[layer][step][expert]` counts.
    pub fn from_counts(
        n_layers: usize,
        n_experts: usize,
        n_steps: usize,
        counts: Vec<f32>,
    ) -> ExpertTrace {
        assert_eq!(
            counts.len(),
            n_layers * n_steps * n_experts,
            "trace counts are not layers x steps x experts"
        );
        ExpertTrace {
            n_layers,
            n_experts,
            n_steps,
            counts,
        }
    }
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }
    pub fn n_experts(&self) -> usize {
        self.n_experts
    }
    pub fn n_steps(&self) -> usize {
        self.n_steps
    }
    /// Tokens of each expert of `layer` at `step`.
    pub fn step(&self, layer: usize, step: usize) -> &[f32] {
        let start = (layer * self.n_steps + step) * self.n_experts;
        &self.counts[start..start + self.n_experts]
    }
    /// Steps `steps` of `layer`, row-major (step, expert).
    pub fn window(&self, layer: usize, steps: std::ops::Range<usize>) -> &[f32] {
        let base = layer * self.n_steps * self.n_experts;
        &self.counts[base + steps.start * self.n_experts..base + steps.end * self.n_experts]
    }
    /// Largest per-step total of any layer (the most tokens one GPU can receive).
    pub fn max_step_total(&self) -> f64 {
        self.counts
            .chunks_exact(self.n_experts.max(1))
            .map(|row| row.iter().map(|&x| f64::from(x)).sum::<f64>())
            .fold(0.0, f64::max)
    }

    /// One GPU's even share of the routed rows of the workload's mean MoE layer step (the
    /// first `observed_steps` steps, every layer, over `n_gpus` GPUs): the load at which a
    /// throughput speed factor is calibrated (`gpu_costs::throughput_speed`).
    pub fn mean_tokens_per_gpu(&self, observed_steps: usize, n_gpus: usize) -> u64 {
        let steps = observed_steps.clamp(1, self.n_steps());
        let total: f64 = (0..self.n_layers())
            .map(|l| {
                self.window(l, 0..steps)
                    .iter()
                    .map(|&x| f64::from(x))
                    .sum::<f64>()
            })
            .sum();
        let per_step = total / (steps * self.n_layers().max(1)) as f64;
        (per_step / n_gpus.max(1) as f64).round().max(1.0) as u64
    }

    /// The text form: a header, `layers N`, `experts E`, then one line per (step, layer):
    /// `step layer count_0 ... count_{E-1}`, steps from 0, every layer of a step.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{TRACE_HEADER}\nlayers {}\nexperts {}\n",
            self.n_layers, self.n_experts
        );
        for step in 0..self.n_steps {
            for layer in 0..self.n_layers {
                out.push_str(&format!("{step} {layer}"));
                for &c in self.step(layer, step) {
                    out.push_str(&format!(" {c}"));
                }
                out.push('\n');
            }
        }
        out
    }

    pub fn save(&self, path: &Path) -> Result<(), TraceError> {
        std::fs::write(path, self.to_text()).map_err(|source| TraceError::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn load(path: &Path) -> Result<ExpertTrace, TraceError> {
        let text = crate::input::read_input_text(path).map_err(|source| TraceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ExpertTrace::parse(&text, path)
    }

    /// Parses the text form; `path` only names the file in errors. Blank lines and lines
    /// starting with `#` are skipped; fields are separated by spaces, tabs or commas.
    pub fn parse(text: &str, path: &Path) -> Result<ExpertTrace, TraceError> {
        let error = |line: usize, message: String| TraceError::Format {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut n_layers = None;
        let mut n_experts = None;
        let mut rows: Vec<(usize, usize, Vec<f32>)> = Vec::new();
        let mut last_line = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            last_line = line;
            let content = raw.trim();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = content
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|f| !f.is_empty())
                .collect();
            let header_value = |name: &str| -> Result<usize, TraceError> {
                if fields.len() != 2 {
                    return Err(error(line, format!("expected `{name} <count>`")));
                }
                match fields[1].parse::<usize>() {
                    Ok(v) if v > 0 => Ok(v),
                    _ => Err(error(
                        line,
                        format!("`{name}` needs a positive integer, got {:?}", fields[1]),
                    )),
                }
            };
            match fields[0] {
                "layers" => n_layers = Some(header_value("layers")?),
                "experts" => n_experts = Some(header_value("experts")?),
                _ => {
                    let (Some(layers), Some(experts)) = (n_layers, n_experts) else {
                        return Err(error(
                            line,
                            "data before the `layers` and `experts` header lines".into(),
                        ));
                    };
                    if fields.len() != experts + 2 {
                        return Err(error(
                            line,
                            format!(
                                "expected step, layer and {experts} expert counts ({} fields), found {} fields",
                                experts + 2,
                                fields.len()
                            ),
                        ));
                    }
                    let int = |s: &str, what: &str| {
                        s.parse::<usize>().map_err(|_| {
                            error(line, format!("{what} {s:?} is not a non-negative integer"))
                        })
                    };
                    let step = int(fields[0], "step")?;
                    let layer = int(fields[1], "layer")?;
                    if layer >= layers {
                        return Err(error(
                            line,
                            format!(
                                "layer {layer} is out of range (the trace has {layers} layers)"
                            ),
                        ));
                    }
                    let expected = (rows.len() / layers, rows.len() % layers);
                    if (step, layer) != expected {
                        return Err(error(
                            line,
                            format!(
                                "expected step {} layer {} (steps from 0, every layer of a step in order), found step {step} layer {layer}",
                                expected.0, expected.1
                            ),
                        ));
                    }
                    let mut counts = Vec::with_capacity(experts);
                    for (i, f) in fields[2..].iter().enumerate() {
                        match f.parse::<f32>() {
                            Ok(v) if v.is_finite() && v >= 0.0 => counts.push(v),
                            _ => {
                                return Err(error(
                                    line,
                                    format!(
                                        "count of expert {i} is {f:?}, not a finite number >= 0"
                                    ),
                                ));
                            }
                        }
                    }
                    rows.push((step, layer, counts));
                }
            }
        }
        let (Some(layers), Some(experts)) = (n_layers, n_experts) else {
            return Err(error(
                last_line.max(1),
                "missing `layers` or `experts` header line".into(),
            ));
        };
        if rows.is_empty() || !rows.len().is_multiple_of(layers) {
            return Err(error(
                last_line.max(1),
                format!(
                    "the last step is incomplete or there is no step: {} rows for {layers} layers",
                    rows.len()
                ),
            ));
        }
        let n_steps = rows.len() / layers;
        let mut counts = vec![0.0f32; layers * n_steps * experts];
        for (step, layer, row) in rows {
            let start = (layer * n_steps + step) * experts;
            counts[start..start + experts].copy_from_slice(&row);
        }
        Ok(ExpertTrace::from_counts(layers, experts, n_steps, counts))
    }
}

fn d_observed() -> usize {
    256
}
fn d_unseen() -> usize {
    256
}
fn d_tokens() -> usize {
    2048
}
fn d_popularity() -> f64 {
    0.4
}
fn d_consistent_fraction() -> f64 {
    3.0 / 16.0
}
fn d_consistent_activity() -> f64 {
    0.85
}
fn d_consistent_boost() -> f64 {
    2.0
}
fn d_temporal_fraction() -> f64 {
    3.0 / 16.0
}
fn d_group_size() -> usize {
    2
}
fn d_temporal_activity() -> f64 {
    0.17
}
fn d_temporal_boost() -> f64 {
    6.0
}
fn d_correlation() -> f64 {
    0.88
}
fn d_step_noise() -> f64 {
    0.15
}

/// `[trace]`: the synthetic trace generator's parameters, or a recorded trace's `path`.
/// Parameters of the synthetic trace generator. Defaults follow gem.txt section 3.1-3.2:
/// Figure 6 (16 experts of Llama-4-Scout layer 43: 3 consistent experts active in 85 % of the
/// steps, 3 temporal experts active in 17 % of the steps carrying about 3x the consistent
/// experts' tokens) and Figure 8 (temporal experts 0 and 3 correlated at r = 0.88).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceParams {
    /// A recorded trace file (relative to the scenario file); its first `observed_steps` steps
    /// are observable and the rest unseen, and the generator's other fields are ignored.
    #[serde(default)]
    pub path: Option<String>,
    /// Steps a mapper may read (its window is a prefix).
    #[serde(default = "d_observed")]
    pub observed_steps: usize,
    /// Steps after the observed ones, replayed by the serving simulation.
    #[serde(default = "d_unseen")]
    pub unseen_steps: usize,
    /// Tokens per trace step (each routed to `top_k` experts).
    #[serde(default = "d_tokens")]
    pub tokens_per_step: usize,
    /// Log-normal sigma of each layer's base expert popularity.
    #[serde(default = "d_popularity")]
    pub popularity_sigma: f64,
    /// Fraction of each layer's experts that are consistent.
    #[serde(default = "d_consistent_fraction")]
    pub consistent_fraction: f64,
    /// Probability that a consistent expert is active (boosted) in a step.
    #[serde(default = "d_consistent_activity")]
    pub consistent_activity: f64,
    /// Weight multiplier of an active consistent expert.
    #[serde(default = "d_consistent_boost")]
    pub consistent_boost: f64,
    /// Fraction of each layer's experts that are temporal (grouped).
    #[serde(default = "d_temporal_fraction")]
    pub temporal_fraction: f64,
    /// Experts per correlated temporal group.
    #[serde(default = "d_group_size")]
    pub temporal_group_size: usize,
    /// Probability that a temporal group is active in a step.
    #[serde(default = "d_temporal_activity")]
    pub temporal_activity: f64,
    /// Weight multiplier of an active temporal expert.
    #[serde(default = "d_temporal_boost")]
    pub temporal_boost: f64,
    /// Pearson correlation of the activity of two experts of one group.
    #[serde(default = "d_correlation")]
    pub temporal_correlation: f64,
    /// Log-normal sigma of per-step, per-expert jitter.
    #[serde(default = "d_step_noise")]
    pub step_noise: f64,
}

impl Default for TraceParams {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

/// An invalid generator parameter: (field name, message).
pub type ParamError = (&'static str, String);

impl TraceParams {
    pub fn check(&self) -> Result<(), ParamError> {
        let unit = |name: &'static str, v: f64| {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err((name, format!("must be in [0, 1], got {v}")))
            }
        };
        let non_negative = |name: &'static str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err((name, format!("must be finite and >= 0, got {v}")))
            }
        };
        let positive = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err((name, format!("must be a positive number, got {v}")))
            }
        };
        if self.observed_steps == 0 {
            return Err(("observed_steps", "must be at least 1".into()));
        }
        if self.unseen_steps == 0 {
            return Err(("unseen_steps", "must be at least 1".into()));
        }
        if self.tokens_per_step == 0 {
            return Err(("tokens_per_step", "must be at least 1".into()));
        }
        if self.temporal_group_size == 0 {
            return Err(("temporal_group_size", "must be at least 1".into()));
        }
        non_negative("popularity_sigma", self.popularity_sigma)?;
        non_negative("step_noise", self.step_noise)?;
        unit("consistent_fraction", self.consistent_fraction)?;
        unit("temporal_fraction", self.temporal_fraction)?;
        if self.consistent_fraction + self.temporal_fraction > 1.0 {
            return Err((
                "temporal_fraction",
                "consistent_fraction + temporal_fraction exceeds 1".into(),
            ));
        }
        unit("consistent_activity", self.consistent_activity)?;
        unit("temporal_activity", self.temporal_activity)?;
        unit("temporal_correlation", self.temporal_correlation)?;
        positive("consistent_boost", self.consistent_boost)?;
        positive("temporal_boost", self.temporal_boost)?;
        Ok(())
    }

    /// Total steps generated.
    pub fn n_steps(&self) -> usize {
        self.observed_steps + self.unseen_steps
    }
}

/// The role of each expert of one layer in a synthetic trace.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRoles {
    /// Base popularity weight of each expert.
    pub base: Vec<f64>,
    pub consistent: Vec<usize>,
    /// Correlated temporal groups.
    pub temporal_groups: Vec<Vec<usize>>,
}

/// Generates a synthetic trace of `params.n_steps()` steps for a model with `n_layers` layers
/// of `n_experts` experts, `top_k` per token. Per layer: a random log-normal base popularity,
/// random consistent experts, random temporal groups. Per step: each consistent expert is
/// active with probability `consistent_activity`; each temporal group switches on with
/// probability `temporal_activity`, and each member follows the group's state with probability
/// sqrt(`temporal_correlation`), else draws its own (so two members' activities have Pearson
/// correlation `temporal_correlation`). Weights are base x activity boost x jitter, turned into
/// routing fractions capped at 1 / top_k (a token uses an expert at most once), and counts are
/// `tokens_per_step x top_k x fraction`, rounded.
pub fn generate(
    params: &TraceParams,
    n_layers: usize,
    n_experts: usize,
    top_k: usize,
    rng: &mut SimRng,
) -> (ExpertTrace, Vec<LayerRoles>) {
    let n_steps = params.n_steps();
    let mut counts = vec![0.0f32; n_layers * n_steps * n_experts];
    let mut roles = Vec::with_capacity(n_layers);
    let popularity =
        LogNormal::new(0.0, params.popularity_sigma).expect("validated popularity sigma");
    let jitter = LogNormal::new(0.0, params.step_noise).expect("validated step noise");
    let follow = follow_probability(params);
    let routed = (params.tokens_per_step * top_k) as f64;
    let cap = 1.0 / top_k as f64;
    let mut weights = vec![0.0f64; n_experts];
    let mut fractions = vec![0.0f64; n_experts];
    for layer in 0..n_layers {
        let base: Vec<f64> = (0..n_experts).map(|_| popularity.sample(rng)).collect();
        let mut order: Vec<usize> = (0..n_experts).collect();
        order.shuffle(rng);
        let n_consistent =
            ((n_experts as f64 * params.consistent_fraction).round() as usize).min(n_experts);
        let n_temporal = ((n_experts as f64 * params.temporal_fraction).round() as usize)
            .min(n_experts - n_consistent);
        let consistent = order[..n_consistent].to_vec();
        let temporal_groups: Vec<Vec<usize>> = order[n_consistent..n_consistent + n_temporal]
            .chunks(params.temporal_group_size)
            .map(<[usize]>::to_vec)
            .collect();
        for step in 0..n_steps {
            for (w, &b) in weights.iter_mut().zip(&base) {
                *w = b * jitter.sample(rng);
            }
            for &e in &consistent {
                if rng.random_bool(params.consistent_activity) {
                    weights[e] *= params.consistent_boost;
                }
            }
            for group in &temporal_groups {
                let group_on = rng.random_bool(params.temporal_activity);
                for &e in group {
                    let on = if rng.random_bool(follow) {
                        group_on
                    } else {
                        rng.random_bool(params.temporal_activity)
                    };
                    if on {
                        weights[e] *= params.temporal_boost;
                    }
                }
            }
            capped_fractions(&weights, cap, &mut fractions);
            let start = (layer * n_steps + step) * n_experts;
            for (c, &f) in counts[start..start + n_experts].iter_mut().zip(&fractions) {
                *c = (routed * f).round() as f32;
            }
        }
        roles.push(LayerRoles {
            base,
            consistent,
            temporal_groups,
        });
    }
    (
        ExpertTrace::from_counts(n_layers, n_experts, n_steps, counts),
        roles,
    )
}

/// The probability that a temporal expert follows its group's state, chosen so that two
/// members' weights `J (1 + (B - 1) s)` (J the log-normal jitter, B the boost, s the activity)
/// have Pearson correlation `temporal_correlation`. With activities following the group with
/// probability q, Cov(s_i, s_j) = q^2 p (1 - p), so
/// corr = E[J]^2 (B - 1)^2 q^2 p (1 - p) / Var(J (1 + (B - 1) s)); solved for q and capped at 1
/// (the jitter bounds the reachable correlation). Per-step normalization and rounding lower
/// the correlation of the counts slightly (a test bounds it).
pub fn follow_probability(params: &TraceParams) -> f64 {
    let p = params.temporal_activity;
    let b = params.temporal_boost;
    if p <= 0.0 || p >= 1.0 || b == 1.0 {
        return params.temporal_correlation.sqrt();
    }
    let s2 = params.step_noise * params.step_noise;
    let m1 = 1.0 + (b - 1.0) * p;
    let m2 = 1.0 + (2.0 * (b - 1.0) + (b - 1.0).powi(2)) * p;
    let variance = (2.0 * s2).exp() * m2 - s2.exp() * m1 * m1;
    let signal = s2.exp() * (b - 1.0).powi(2) * p * (1.0 - p);
    (params.temporal_correlation * variance / signal)
        .min(1.0)
        .sqrt()
}

/// Normalizes `weights` into fractions summing to 1 with none above `cap` (water-filling:
/// capped entries are fixed and the rest re-normalized until none exceeds the cap).
fn capped_fractions(weights: &[f64], cap: f64, out: &mut [f64]) {
    let n = weights.len();
    if cap * n as f64 <= 1.0 {
        out.iter_mut().for_each(|f| *f = 1.0 / n as f64);
        return;
    }
    let mut capped = vec![false; n];
    loop {
        let free_mass = 1.0 - cap * capped.iter().filter(|&&c| c).count() as f64;
        let free_weight: f64 = weights
            .iter()
            .zip(&capped)
            .filter(|(_, c)| !**c)
            .map(|(w, _)| w)
            .sum();
        let mut changed = false;
        for i in 0..n {
            out[i] = if capped[i] {
                cap
            } else if free_weight > 0.0 {
                weights[i] / free_weight * free_mass
            } else {
                0.0
            };
            if !capped[i] && out[i] > cap {
                capped[i] = true;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// Token-expert assignments one synthetic trace step may route: its f32 counts are exact to 2^24.
const MAX_TRACE_ASSIGNMENTS: f64 = 16_777_216.0;

/// Where a scenario's utilization trace comes from.
#[derive(Clone, Debug)]
pub enum TraceSpec {
    /// Generated per run from the run's seed.
    Synthetic(TraceParams),
    /// Loaded once; steps `0..observed_steps` are observable, the rest unseen.
    Recorded {
        trace: Arc<ExpertTrace>,
        observed_steps: usize,
    },
}

/// The synthetic traces `TraceSpec::build` generated, by `trace_key` (everything the generator
/// reads): the runs of one model and seed (GEM's cells of every variability, mapper and
/// request length) replay one trace, generated once. It keeps the 12 most recently used (a
/// Qwen3-30B-A3B trace of 512 steps is about 13 MB, so about 160 MB at most): two threads each
/// running a cell's five seeds.
static GENERATED: Memo<ExactKey, ExpertTrace> = Memo::new(12);

/// Everything `generate` reads for `TraceSpec::build`: every generator parameter (each float by
/// its bits), the model's shape and the seed. The destructuring names every field, so a new
/// parameter does not compile until it is keyed.
fn trace_key(
    params: &TraceParams,
    n_layers: usize,
    n_experts: usize,
    top_k: usize,
    seed: u64,
) -> ExactKey {
    let TraceParams {
        path,
        observed_steps,
        unseen_steps,
        tokens_per_step,
        popularity_sigma,
        consistent_fraction,
        consistent_activity,
        consistent_boost,
        temporal_fraction,
        temporal_group_size,
        temporal_activity,
        temporal_boost,
        temporal_correlation,
        step_noise,
    } = params;
    let mut key = ExactKey::new();
    key.str(path.as_deref().unwrap_or(""));
    for n in [
        *observed_steps,
        *unseen_steps,
        *tokens_per_step,
        *temporal_group_size,
        n_layers,
        n_experts,
        top_k,
    ] {
        key.usize(n);
    }
    for x in [
        *popularity_sigma,
        *consistent_fraction,
        *consistent_activity,
        *consistent_boost,
        *temporal_fraction,
        *temporal_activity,
        *temporal_boost,
        *temporal_correlation,
        *step_noise,
    ] {
        key.f64(x);
    }
    key.u64(seed);
    key
}

impl TraceSpec {
    /// The trace of `params` for a model of `n_layers` layers of `n_experts` experts, `top_k`
    /// per token: the generator's (its fields checked), or the recorded file `params.path`
    /// (relative to `base_dir`), which must have the model's layers and experts and leave an
    /// unseen step. An error is `(field of the trace table, message)`.
    pub fn resolve(
        params: &TraceParams,
        n_layers: usize,
        n_experts: usize,
        top_k: usize,
        base_dir: &Path,
    ) -> Result<TraceSpec, (&'static str, String)> {
        params.check()?;
        // The trace holds each step's routed tokens per expert as f32, exact to 2^24: a step
        // routing more assignments than that cannot be recorded (and would only slow the run).
        let assignments = params.tokens_per_step as f64 * top_k as f64;
        if assignments > MAX_TRACE_ASSIGNMENTS {
            return Err((
                "tokens_per_step",
                format!(
                    "= {} routes {assignments} token-expert assignments per step at top-{top_k}, \
                     above the {MAX_TRACE_ASSIGNMENTS} a trace step records exactly (f32 counts)",
                    params.tokens_per_step
                ),
            ));
        }
        let Some(relative) = &params.path else {
            return Ok(TraceSpec::Synthetic(TraceParams {
                path: None,
                ..params.clone()
            }));
        };
        let path = base_dir.join(relative);
        let trace = ExpertTrace::load(&path).map_err(|e| ("path", e.to_string()))?;
        for (what, has, needs) in [
            ("experts per layer", trace.n_experts(), n_experts),
            ("layers", trace.n_layers(), n_layers),
        ] {
            if has != needs {
                return Err((
                    "path",
                    format!(
                        "{} has {has} {what} but the model has {needs}",
                        path.display()
                    ),
                ));
            }
        }
        if params.observed_steps >= trace.n_steps() {
            return Err((
                "observed_steps",
                format!(
                    "= {} leaves no unseen step in {} ({} steps)",
                    params.observed_steps,
                    path.display(),
                    trace.n_steps()
                ),
            ));
        }
        Ok(TraceSpec::Recorded {
            trace: Arc::new(trace),
            observed_steps: params.observed_steps,
        })
    }

    /// The run's trace and its observed steps: generated from `(seed, "gem/trace")` for a
    /// model of `n_layers` layers of `n_experts` experts, `top_k` per token, or the recorded
    /// one.
    pub fn build(
        &self,
        n_layers: usize,
        n_experts: usize,
        top_k: usize,
        seed: u64,
    ) -> (Arc<ExpertTrace>, usize) {
        match self {
            TraceSpec::Synthetic(params) => {
                let key = trace_key(params, n_layers, n_experts, top_k, seed);
                let trace = GENERATED.get_or_compute(&key, || {
                    generate(
                        params,
                        n_layers,
                        n_experts,
                        top_k,
                        &mut crate::rng::stream(seed, "gem/trace"),
                    )
                    .0
                });
                (trace, params.observed_steps)
            }
            TraceSpec::Recorded {
                trace,
                observed_steps,
            } => (Arc::clone(trace), *observed_steps),
        }
    }
}

/// Pearson correlation of two equally long series (0 when either is constant).
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()) as f64;
    if n < 2.0 {
        return 0.0;
    }
    let ma = a.iter().sum::<f64>() / n;
    let mb = b.iter().sum::<f64>() / n;
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        cov += (x - ma) * (y - mb);
        va += (x - ma).powi(2);
        vb += (y - mb).powi(2);
    }
    if va == 0.0 || vb == 0.0 {
        0.0
    } else {
        cov / (va * vb).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synthetic_trace_is_generated_once_per_seed_and_shape() {
        let params = TraceParams {
            observed_steps: 4,
            unseen_steps: 4,
            ..TraceParams::default()
        };
        let spec = TraceSpec::Synthetic(params.clone());
        let (first, observed) = spec.build(2, 16, 2, 11);
        assert_eq!(observed, 4);
        assert!(Arc::ptr_eq(&first, &spec.build(2, 16, 2, 11).0));
        let (fresh, _) = generate(&params, 2, 16, 2, &mut crate::rng::stream(11, "gem/trace"));
        assert_eq!(*first, fresh);
        assert_ne!(*spec.build(2, 16, 2, 12).0, fresh);
        assert_ne!(*spec.build(2, 16, 1, 11).0, fresh);
    }
    use crate::rng::stream;

    #[test]
    fn text_round_trip_and_errors_name_file_and_line() {
        let trace = ExpertTrace::from_counts(2, 3, 2, (0..12).map(|x| x as f32).collect());
        let text = trace.to_text();
        let path = Path::new("t.trace");
        assert_eq!(ExpertTrace::parse(&text, path).unwrap(), trace);
        let bad = text.replacen("0 1 6 7 8", "0 1 6 7", 1);
        let message = ExpertTrace::parse(&bad, path).unwrap_err().to_string();
        assert!(message.starts_with("trace t.trace:5:"), "{message}");
        assert!(message.contains("3 expert counts"), "{message}");
        let negative = text.replacen("0 1 6 7 8", "0 1 6 -7 8", 1);
        let message = ExpertTrace::parse(&negative, path).unwrap_err().to_string();
        assert!(
            message.contains(":5:") && message.contains("expert 1"),
            "{message}"
        );
        let order = text.replacen("1 0 3 4 5", "1 1 3 4 5", 1);
        let message = ExpertTrace::parse(&order, path).unwrap_err().to_string();
        assert!(
            message.contains(":6:") && message.contains("expected step 1 layer 0"),
            "{message}"
        );
        let truncated: String = text.lines().take(6).map(|l| format!("{l}\n")).collect();
        let message = ExpertTrace::parse(&truncated, path)
            .unwrap_err()
            .to_string();
        assert!(message.contains("incomplete"), "{message}");
        assert_eq!(
            ExpertTrace::parse(&text.replace(' ', ","), path).unwrap(),
            trace
        );
        let missing = ExpertTrace::load(Path::new("/nonexistent/x.trace")).unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/x.trace"));
    }

    #[test]
    fn capped_fractions_sum_to_one_under_the_cap() {
        let mut out = vec![0.0; 4];
        capped_fractions(&[10.0, 1.0, 1.0, 1.0], 0.5, &mut out);
        assert!((out.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(out[0], 0.5);
        assert!((out[1] - 0.5 / 3.0).abs() < 1e-12);
        capped_fractions(&[1.0, 1.0], 0.5, &mut out[..2]);
        assert_eq!(&out[..2], &[0.5, 0.5]);
    }

    #[test]
    fn synthetic_trace_has_consistent_and_correlated_temporal_experts() {
        let params = TraceParams {
            observed_steps: 1500,
            unseen_steps: 500,
            ..TraceParams::default()
        };
        params.check().unwrap();
        let (trace, roles) = generate(&params, 2, 64, 1, &mut stream(7, "trace"));
        assert_eq!(
            (trace.n_layers(), trace.n_experts(), trace.n_steps()),
            (2, 64, 2000)
        );
        for (layer, r) in roles.iter().enumerate() {
            let series = |e: usize| -> Vec<f64> {
                (0..trace.n_steps())
                    .map(|t| f64::from(trace.step(layer, t)[e]))
                    .collect()
            };
            assert_eq!(r.consistent.len(), 12);
            assert_eq!(r.temporal_groups.iter().map(Vec::len).sum::<usize>(), 12);
            // Members of the pair are correlated near the set value; other experts are not.
            let pair = &r.temporal_groups[0];
            let within = pearson(&series(pair[0]), &series(pair[1]));
            assert!(
                (within - 0.88).abs() < 0.12,
                "layer {layer}: within-group r = {within}"
            );
            let loner = r.temporal_groups[1][0];
            let across = pearson(&series(pair[0]), &series(loner));
            assert!(across.abs() < 0.1, "across groups r = {across}");
            // A temporal expert is heavy in a minority of steps; a consistent one is busy.
            let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
            let t = series(pair[0]);
            let heavy = t.iter().filter(|&&x| x > 2.0 * mean(&t)).count() as f64;
            assert!(heavy / t.len() as f64 > 0.08 && heavy / (t.len() as f64) < 0.3);
            for t in 0..trace.n_steps() {
                let total: f32 = trace.step(layer, t).iter().sum();
                assert!((total - 2048.0).abs() <= 8.0, "{total}");
            }
        }
        // Per-layer popularity: the two layers differ.
        assert_ne!(roles[0].consistent, roles[1].consistent);
    }

    #[test]
    fn top_k_caps_each_expert_at_the_token_count() {
        let params = TraceParams {
            observed_steps: 50,
            unseen_steps: 50,
            temporal_boost: 50.0,
            ..TraceParams::default()
        };
        let (trace, _) = generate(&params, 1, 8, 2, &mut stream(1, "trace"));
        for t in 0..trace.n_steps() {
            assert!(trace.step(0, t).iter().all(|&c| c <= 2048.0 + 0.5));
        }
    }
}
