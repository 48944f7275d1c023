//! The ExpertWeave family's scenario tables (`ExpertWeaveConfig`: model, device, adapters,
//! memory manager, arrivals, workload, cost, serving limits) and their validation into an
//! `ExpertWeaveScenario`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profile_cost::EwProfile;
use crate::arrivals::{ArrivalSpec, ArrivalTable};
use crate::cost::gpu::GpuSpec;
use crate::cost::profile::MeasuredProfile;
use crate::cost::shape::MlaMoeShape;
use crate::distributions::{Uniform, Zipf};
use crate::load_cache::LoadCache;
use crate::policies::memory::MemoryConfig;
use crate::policies::memory::adapters::EsftAdapter;
use crate::policies::memory::device::{DeviceMemory, GIB};
use crate::time::SimTime;
use crate::validate::limits::{Demand, Quantity};
use crate::validate::{FieldError, at_least_one, field_error, positive};

/// The family's tables of a scenario file (everything but the common keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertWeaveConfig {
    /// Base model preset: `"esft-vanilla-16b"` (DeepSeek-V2-Lite shape), or `"live-tiny-mla"`
    /// (scaled down for live mode on the CPU).
    #[serde(default = "default_model")]
    pub model: String,
    /// Keep only the model's first `model_layers` layers (its dense ones and at least one MoE
    /// layer): a model of the preset's widths but fewer layers, as live mode runs real shapes
    /// on one device. Absent: every layer of the preset.
    #[serde(default)]
    pub model_layers: Option<u64>,
    pub device: DeviceConfig,
    pub adapters: AdaptersConfig,
    pub memory: MemoryConfig,
    /// `[arrival]`: when requests arrive (`sim::arrivals`: poisson, bursty or a replayed trace,
    /// cut at `workload.horizon_s`; or offline, `workload.n_requests` present at t = 0); each
    /// request's adapter is drawn from the shares.
    pub arrival: ArrivalTable,
    pub workload: WorkloadConfig,
    #[serde(default)]
    pub cost: CostConfig,
    #[serde(default)]
    pub serving: ServingConfig,
}

fn default_model() -> String {
    "esft-vanilla-16b".into()
}

/// `[device]`: the budget of one serving instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Memory of one device in GiB (the paper's NPUs: 64).
    pub capacity_gib: f64,
    /// vLLM's `gpu_memory_utilization`, in (0, 1].
    pub utilization: f64,
    /// Per-device memory that is neither weights nor KV cache, in GiB.
    #[serde(default)]
    pub runtime_reserve_gib: f64,
    /// Devices per instance.
    #[serde(default = "one")]
    pub n_devices: u64,
    /// Tensor-parallel degree of attention (MLA's latent KV is replicated on each TP rank).
    #[serde(default = "one")]
    pub tensor_parallel: u64,
    /// Tokens per KV block.
    #[serde(default = "default_block")]
    pub kv_block_tokens: u64,
}

fn one() -> u64 {
    1
}

fn default_block() -> u64 {
    128
}

/// `[workload]`: the adapters' request shares (a power law of shape `alpha`), the arrival
/// horizon (or, offline, the batch) and the length distributions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Skew shape in (0, 1]: 1 is uniform, smaller is heavier skew (see `adapter_shares`).
    #[serde(default = "one_f64")]
    pub alpha: f64,
    /// Requests arriving in [0, horizon_s) are served; the run lasts until every one finishes.
    /// Required for every arrival pattern but `offline`, refused for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon_s: Option<f64>,
    /// Offline (`arrival.pattern = "offline"`) only, and required there: the requests present
    /// at t = 0, served together (Section 5.3's decode microbenchmark at batch size B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_requests: Option<usize>,
    /// Mean prompt length (tokens), where the arrivals carry none.
    pub prompt_tokens: u64,
    /// Mean output length (tokens), where the arrivals carry none.
    pub output_tokens: u64,
    /// Lengths are uniform on mean x [1 - spread, 1 + spread]; spread in [0, 1).
    #[serde(default)]
    pub length_spread: f64,
}

fn one_f64() -> f64 {
    1.0
}

pub use crate::serving_family::adapters::{
    AdaptersConfig, adapter_draw, adapter_shares, resolve_adapters, validate_memory,
};
pub use crate::serving_family::rerouting::Rerouting;

/// `[cost]`: the device the roofline prices (a name of the GPU catalogue) and the rerouting and
/// routing assumptions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostConfig {
    /// The device, a `cost::gpu` catalogue name (the paper's: Ascend NPUs, "Ascend-910B").
    #[serde(default = "default_gpu")]
    pub gpu: String,
    /// Fused or unfused rerouting.
    #[serde(default = "default_rerouting")]
    pub rerouting: Rerouting,
    /// Operators the unfused rerouting chains per layer (broadcast, offset, add, gather, copy).
    #[serde(default = "default_unfused_ops")]
    pub unfused_ops: u64,
    /// Zipf exponent of a domain's expert popularity over its relevance ranking.
    #[serde(default = "default_zipf")]
    pub expert_zipf_s: f64,
    /// A measured profile (path relative to the scenario file) to price steps from instead of
    /// the roofline: its expert curve, dense GEMM and rerouting series (docs/fidelity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

fn default_gpu() -> String {
    "Ascend-910B".into()
}
fn default_rerouting() -> Rerouting {
    Rerouting::Fused
}
fn default_unfused_ops() -> u64 {
    5
}
fn default_zipf() -> f64 {
    1.0
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            gpu: default_gpu(),
            rerouting: default_rerouting(),
            unfused_ops: default_unfused_ops(),
            expert_zipf_s: default_zipf(),
            profile: None,
        }
    }
}

/// `[serving]`: the engine's per-step limits (vLLM's `max_num_batched_tokens`, `max_num_seqs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingConfig {
    #[serde(default = "default_batch_tokens")]
    pub max_batch_tokens: u64,
    #[serde(default = "default_seqs")]
    pub max_num_seqs: u64,
}

fn default_batch_tokens() -> u64 {
    8192
}
fn default_seqs() -> u64 {
    256
}

impl Default for ServingConfig {
    fn default() -> Self {
        ServingConfig {
            max_batch_tokens: default_batch_tokens(),
            max_num_seqs: default_seqs(),
        }
    }
}

/// A validated ExpertWeave scenario.
#[derive(Clone, Debug)]
pub struct ExpertWeaveScenario {
    pub shape: MlaMoeShape,
    /// The device `cost.gpu` names.
    pub gpu: GpuSpec,
    pub device: DeviceMemory,
    /// Tensor-parallel degree of the attention and dense layers (`device.tensor_parallel`).
    pub tensor_parallel: u64,
    pub adapters: Vec<EsftAdapter>,
    pub memory: MemoryConfig,
    /// When requests arrive (cut at `horizon`).
    pub arrival: ArrivalSpec,
    /// Arrivals at or after it are not served: `workload.horizon_s`, or `SimTime::MAX` offline.
    pub horizon: SimTime,
    /// Requests the arrivals offer before the horizon: the trace's rows replayed before it,
    /// `workload.n_requests` offline, or unbounded (`usize::MAX`) for a rate.
    pub max_arrivals: usize,
    pub workload: WorkloadConfig,
    pub cost: CostConfig,
    pub serving: ServingConfig,
    /// Each request's adapter: Zipf over the adapters with exponent `1 / alpha - 1`.
    pub adapter_draw: Zipf,
    /// Each adapter's share of the requests (sums to 1; `adapter_draw`'s probabilities).
    pub shares: Vec<f64>,
    /// Prompt and output lengths where the arrivals carry none (rounded, at least 1).
    pub prompt_lengths: Uniform,
    pub output_lengths: Uniform,
    /// The measured profile `cost.profile` names, when it names one.
    pub profile: Option<EwProfile>,
}

/// Uniform lengths on `mean x [1 - spread, 1 + spread]`.
fn lengths(mean: u64, spread: f64) -> Uniform {
    let mean = mean as f64;
    Uniform::new(mean * (1.0 - spread), mean * (1.0 + spread))
        .expect("validated: a positive mean and spread in [0, 1)")
}

/// The requests `arrival` offers before `horizon`: a replayed trace's rows whose replayed time
/// falls before it; unbounded (`usize::MAX`) for a rate.
fn arrivals_before(arrival: &ArrivalSpec, horizon: SimTime) -> usize {
    match arrival {
        ArrivalSpec::Trace { trace, time_scale } => {
            let rows = trace.rows();
            let first = rows[0].timestamp_s;
            rows.partition_point(|r| {
                SimTime::from_secs_f64((r.timestamp_s - first) * time_scale) < horizon
            })
        }
        _ => usize::MAX,
    }
}

/// Validates `[arrival]` with the workload's horizon or batch: a rate or a trace arrives over
/// `workload.horizon_s` (`workload.n_requests` refused); offline, `workload.n_requests` requests
/// are present at t = 0 (`workload.horizon_s` refused). Returns the arrivals, the horizon and the
/// most requests they offer before it.
fn validate_arrivals(
    table: &ArrivalTable,
    w: &WorkloadConfig,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<(ArrivalSpec, SimTime, usize), FieldError> {
    if table.pattern == crate::arrivals::ArrivalPattern::Offline {
        if w.horizon_s.is_some() {
            return Err(field_error(
                "workload.horizon_s",
                "does not apply to arrival.pattern = \"offline\": every request is present at \
                 t = 0; give workload.n_requests",
            ));
        }
        let n = w.n_requests.ok_or_else(|| {
            field_error(
                "workload.n_requests",
                "is required for arrival.pattern = \"offline\" (the requests present at t = 0)",
            )
        })?;
        at_least_one("workload.n_requests", n)?;
        // The count sizes the run's request table: held to its ceiling first.
        cache.limits.check(&[Demand::new(
            Quantity::Requests,
            n as f64,
            "workload.n_requests",
        )])?;
        let arrival = table.validate(n, base_dir, &mut cache.traces)?;
        return Ok((arrival, SimTime::MAX, n));
    }
    if w.n_requests.is_some() {
        return Err(field_error(
            "workload.n_requests",
            "applies to arrival.pattern = \"offline\" only: the other patterns serve the \
             requests arriving before workload.horizon_s",
        ));
    }
    let horizon_s = w.horizon_s.ok_or_else(|| {
        field_error(
            "workload.horizon_s",
            "is required: requests arrive over it (or set arrival.pattern = \"offline\" with \
             workload.n_requests)",
        )
    })?;
    let horizon = crate::validate::duration(
        "workload.horizon_s",
        horizon_s,
        crate::validate::limits::MAX_SIM_SECONDS_CEILING,
    )?;
    let arrival = table.validate(usize::MAX, base_dir, &mut cache.traces)?;
    arrival.check_span(horizon_s)?;
    let horizon = SimTime::ZERO + horizon;
    let max_arrivals = arrivals_before(&arrival, horizon);
    if max_arrivals == 0 {
        return Err(field_error(
            "workload.horizon_s",
            format!("{horizon_s} s ends before the trace's first request arrives"),
        ));
    }
    Ok((arrival, horizon, max_arrivals))
}

impl ExpertWeaveScenario {
    /// The routing popularity of the scenario's adapters' domains (`cost.expert_zipf_s`).
    pub fn popularity(&self) -> crate::serving_family::popularity::Popularity {
        crate::serving_family::popularity::Popularity::of(
            &self.shape,
            &self.adapters,
            self.cost.expert_zipf_s,
        )
    }
}

impl ExpertWeaveConfig {
    /// Checks every table and resolves the model, the adapters, the device budget and the
    /// arrivals (a trace path resolves against `base_dir`, loaded once per sweep through `cache`).
    pub fn validate(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ExpertWeaveScenario, FieldError> {
        let mut shape =
            MlaMoeShape::preset(&self.model).map_err(|e| field_error("model", e.to_string()))?;
        if let Some(layers) = self.model_layers {
            if layers <= shape.first_k_dense || layers > shape.n_layers {
                return Err(field_error(
                    "model_layers",
                    format!(
                        "{layers}: must keep at least one MoE layer after the {} dense one(s) and \
                         at most the preset's {} layers",
                        shape.first_k_dense, shape.n_layers
                    ),
                ));
            }
            if layers < shape.n_layers {
                shape.name = format!(
                    "{} (first {layers} of {} layers)",
                    shape.name, shape.n_layers
                );
                shape.n_layers = layers;
            }
        }
        let d = &self.device;
        let capacity = positive("device.capacity_gib", d.capacity_gib)?;
        let utilization = positive("device.utilization", d.utilization)?;
        if utilization > 1.0 {
            return Err(field_error(
                "device.utilization",
                format!("must be at most 1, got {utilization}"),
            ));
        }
        if !(d.runtime_reserve_gib.is_finite() && d.runtime_reserve_gib >= 0.0) {
            return Err(field_error(
                "device.runtime_reserve_gib",
                format!(
                    "must be a non-negative number, got {}",
                    d.runtime_reserve_gib
                ),
            ));
        }
        at_least_one("device.n_devices", d.n_devices as usize)?;
        at_least_one("device.tensor_parallel", d.tensor_parallel as usize)?;
        at_least_one("device.kv_block_tokens", d.kv_block_tokens as usize)?;
        if d.tensor_parallel > d.n_devices {
            return Err(field_error(
                "device.tensor_parallel",
                format!(
                    "({}) exceeds device.n_devices ({})",
                    d.tensor_parallel, d.n_devices
                ),
            ));
        }
        let device = DeviceMemory {
            capacity_bytes: (capacity * GIB as f64).round() as u64,
            utilization,
            runtime_reserve_bytes: (d.runtime_reserve_gib * GIB as f64).round() as u64,
            n_devices: d.n_devices,
            kv_block_tokens: d.kv_block_tokens,
            kv_replication: d.tensor_parallel,
        };
        let adapters = resolve_adapters(&self.adapters, &shape, "adapters", &cache.limits)?;
        validate_memory(&self.memory, &adapters, "memory")?;
        let w = &self.workload;
        let alpha = positive("workload.alpha", w.alpha)?;
        if alpha > 1.0 {
            return Err(field_error(
                "workload.alpha",
                format!("must be in (0, 1] (1 is uniform), got {alpha}"),
            ));
        }
        let (arrival, horizon, max_arrivals) =
            validate_arrivals(&self.arrival, w, base_dir, cache)?;
        at_least_one("workload.prompt_tokens", w.prompt_tokens as usize)?;
        at_least_one("workload.output_tokens", w.output_tokens as usize)?;
        if !(w.length_spread.is_finite() && (0.0..1.0).contains(&w.length_spread)) {
            return Err(field_error(
                "workload.length_spread",
                format!("must be in [0, 1), got {}", w.length_spread),
            ));
        }
        let c = &self.cost;
        let gpu = GpuSpec::by_name(&c.gpu).map_err(|e| field_error("cost.gpu", e.to_string()))?;
        positive("cost.expert_zipf_s", c.expert_zipf_s)?;
        at_least_one("cost.unfused_ops", c.unfused_ops as usize)?;
        at_least_one(
            "serving.max_batch_tokens",
            self.serving.max_batch_tokens as usize,
        )?;
        at_least_one("serving.max_num_seqs", self.serving.max_num_seqs as usize)?;
        let profile = match &c.profile {
            None => None,
            Some(file) => {
                let path = crate::validate::resolve_profile("cost.profile", file, base_dir)?;
                let measured = MeasuredProfile::load(&path)
                    .map_err(|e| field_error("cost.profile", e.to_string()))?;
                let profile = EwProfile::from_measured(
                    &measured,
                    shape.hidden as usize,
                    shape.expert_ffn as usize,
                    c.rerouting,
                )
                .map_err(|e| field_error("cost.profile", format!("{}: {e}", path.display())))?;
                Some(profile)
            }
        };
        Ok(ExpertWeaveScenario {
            shape,
            gpu,
            tensor_parallel: d.tensor_parallel,
            device,
            memory: self.memory.clone(),
            arrival,
            horizon,
            max_arrivals,
            workload: w.clone(),
            cost: c.clone(),
            serving: self.serving.clone(),
            adapter_draw: adapter_draw(adapters.len(), alpha),
            shares: adapter_shares(adapters.len(), alpha),
            prompt_lengths: lengths(w.prompt_tokens, w.length_spread),
            output_lengths: lengths(w.output_tokens, w.length_spread),
            adapters,
            profile,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[device]
capacity_gib = 64
utilization = 0.9
[adapters]
names = ["gate-math", "gate-intent"]
[memory]
kind = "virtual_weight_tensor"
[arrival]
pattern = "poisson"
rate_per_s = 2.0
[workload]
horizon_s = 10
prompt_tokens = 256
output_tokens = 64
"#;

    fn config(text: &str) -> ExpertWeaveConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn minimal_config_validates() {
        let scenario = config(MINIMAL)
            .validate(Path::new("."), &mut LoadCache::default())
            .unwrap();
        assert_eq!(scenario.adapters.len(), 2);
        assert_eq!(scenario.device.capacity_bytes, 64 * GIB);
        assert!((scenario.shares.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn shares_follow_the_paper_skew() {
        assert_eq!(adapter_shares(4, 1.0), vec![0.25; 4]);
        let skewed = adapter_shares(2, 0.3);
        assert!((0.8..0.85).contains(&skewed[0]), "{skewed:?}");
        let heavy = adapter_shares(2, 0.2);
        assert!((0.93..0.96).contains(&heavy[0]), "{heavy:?}");
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (
                "utilization = 0.9",
                "utilization = 1.2",
                "device.utilization",
            ),
            (
                "rate_per_s = 2.0",
                "rate_per_s = -1.0",
                "arrival.rate_per_s",
            ),
            // Offline: a batch at t = 0, not a horizon.
            (
                "pattern = \"poisson\"\nrate_per_s = 2.0",
                "pattern = \"offline\"",
                "workload.horizon_s",
            ),
            (
                "horizon_s = 10",
                "horizon_s = 10\nn_requests = 8",
                "workload.n_requests",
            ),
            ("horizon_s = 10", "", "workload.horizon_s"),
            ("horizon_s = 10", "horizon_s = 1e300", "workload.horizon_s"),
            ("horizon_s = 10", "horizon_s = 1e-300", "workload.horizon_s"),
            ("horizon_s = 10", "horizon_s = 1e9", "workload.horizon_s"),
            (
                "names = [\"gate-math\", \"gate-intent\"]",
                "names = [\"nope\"]",
                "adapters.names",
            ),
            (
                "kind = \"virtual_weight_tensor\"",
                "kind = \"padding\"\ne_max = 3",
                "memory",
            ),
            (
                "horizon_s = 10",
                "horizon_s = 10\nalpha = 2.0",
                "workload.alpha",
            ),
        ];
        for (from, to, path) in cases {
            let error = config(&MINIMAL.replace(from, to))
                .validate(Path::new("."), &mut LoadCache::default())
                .unwrap_err();
            assert_eq!(error.path, path, "{to}: {}", error.message);
        }
        assert!(toml::from_str::<ExpertWeaveConfig>(&format!("{MINIMAL}\nbogus = 1")).is_err());
    }

    /// Offline: `workload.n_requests` requests at t = 0, no horizon; the count is required,
    /// at least 1 and within `[limits] max_requests`, each refusal naming it.
    #[test]
    fn offline_takes_a_batch_and_refuses_a_bad_count() {
        let offline = |n_requests: &str| {
            MINIMAL
                .replace(
                    "pattern = \"poisson\"\nrate_per_s = 2.0",
                    "pattern = \"offline\"",
                )
                .replace("horizon_s = 10", n_requests)
        };
        let mut cache = LoadCache::default();
        let scenario = config(&offline("n_requests = 32"))
            .validate(Path::new("."), &mut cache)
            .unwrap();
        assert_eq!(scenario.max_arrivals, 32);
        assert_eq!(scenario.horizon, SimTime::MAX);
        assert!(matches!(scenario.arrival, ArrivalSpec::Offline));
        for (n_requests, message) in [
            ("", "is required"),
            ("n_requests = 0", "at least 1"),
            ("n_requests = 1000001", "max_requests"),
        ] {
            let error = config(&offline(n_requests))
                .validate(Path::new("."), &mut cache)
                .unwrap_err();
            assert_eq!(error.path, "workload.n_requests", "{}", error.message);
            assert!(error.message.contains(message), "{}", error.message);
        }
    }

    /// Every scenario under scenarios/expertweave/ loads through the real loader in every
    /// sweep cell.
    #[test]
    fn shipped_scenarios_validate_in_every_cell() {
        crate::shipped_scenarios::load_all("expertweave", 2);
    }
}
