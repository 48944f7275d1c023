//! How a `static` replica's batches are priced when not pass by pass
//! (`replica.scheduler.pricing`, docs/serving-family.md): a `serving::StepCost` that the
//! replica's batches go to through the one step-cost seam, each batch's `StepWork` carrying its
//! expected routing (the prefill's summed per-expert load vectors and each decode pass's
//! load / prompt tokens, `serving::topic_affinity::BatchRouting`). The expected-routing models
//! are CAPS's (`serving_family::execution`), no host time (CAPS models none), built once per
//! validated cell ([`StaticCost::validate`]) from the replica GPU's analytic profile, a profile
//! file (`replica.scheduler.profile`) or a measured operation set (`replica.measured`):
//! `expected_routing` (`GroupedModel`: per layer the active experts as one grouped GEMM through
//! the one MoE entry point, `cost::moe_layer`, eager), `cv` (`CvModel`: caps.txt's base x (1 +
//! CV x sensitivity)) and `straggler` (`StragglerModel`: per layer the most loaded expert on the
//! expert curve); `constant` and `exponential` are the queueing references (`ConstantService`,
//! `ExponentialService`: one service time per batch, whatever it holds).

use super::config::StaticPricing;
use crate::cost::gpu::GpuSpec;
use crate::cost::measured_steps::PricingRecord;
use crate::cost::profile::{Profile, SourceKind};
use crate::cost::shape::MoeModelShape;
use crate::load_cache::LoadCache;
use crate::rng::SimRng;
use crate::serving::{CostSource, StepCost, StepTime, StepWork};
use crate::serving_family::execution::{
    ConstantService, CvModel, ExecutionModel, ExponentialService, GroupedModel, StragglerModel,
};
use crate::time::SimDuration;
use crate::validate::limits::MAX_SIM_SECONDS_CEILING;
use crate::validate::{FieldError, duration, field_error};
use std::path::Path;
use std::sync::Arc;

/// A static replica's validated pricing (any but `passes`).
#[derive(Clone, Debug)]
pub enum StaticCost {
    /// `expected_routing`, `cv` or `straggler`: the execution model, built once per cell and
    /// shared by its runs.
    Model(Arc<ExecutionModel>),
    /// Every batch takes this long (M/D/1).
    Constant(SimDuration),
    /// Batch times exponential with this mean (M/M/1).
    Exponential(SimDuration),
}

/// Cells are equal when they share the one model built for them.
impl PartialEq for StaticCost {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (StaticCost::Model(a), StaticCost::Model(b)) => Arc::ptr_eq(a, b),
            (StaticCost::Constant(a), StaticCost::Constant(b))
            | (StaticCost::Exponential(a), StaticCost::Exponential(b)) => a == b,
            _ => false,
        }
    }
}

/// Where an expected-routing model's curves come from, as the scenario names them.
pub struct ProfileSource<'s> {
    /// `{p}.scheduler.profile`: a calibration profile JSON (relative to the scenario file).
    pub file: Option<&'s str>,
    /// `{p}.measured`: a set of measured per-operation profiles of the replica's GPU.
    pub measured: Option<&'s str>,
}

impl StaticCost {
    /// The pricing of a static replica of `shape` on `gpu` (`p`: its table's path, for errors);
    /// `None` for `passes`. The analytic and file profiles are cached in `cache` by shape.
    #[allow(clippy::too_many_arguments)]
    pub fn validate(
        p: &str,
        pricing: StaticPricing,
        sensitivity: Option<f64>,
        service_ms: Option<f64>,
        shape: Option<&MoeModelShape>,
        gpu: &GpuSpec,
        source: ProfileSource<'_>,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<Option<StaticCost>, FieldError> {
        let service = || {
            let ms = service_ms.expect("static_pricing_keys requires service_ms");
            duration(
                &format!("{p}.scheduler.service_ms"),
                ms * 1e-3,
                MAX_SIM_SECONDS_CEILING,
            )
        };
        let shape = match pricing {
            StaticPricing::Passes => return Ok(None),
            StaticPricing::Constant => return Ok(Some(StaticCost::Constant(service()?))),
            StaticPricing::Exponential => return Ok(Some(StaticCost::Exponential(service()?))),
            _ => shape.expect("expected-routing pricing is validated to an MoE model"),
        };
        // A profile file or a measured set names its own device; the grouped model prices the
        // MoE layer on that device's datasheet (a CPU profile has none: `cv`, `straggler` only).
        let (profile, record, own_device) = match (source.file, source.measured) {
            (Some(_), Some(_)) => {
                return Err(field_error(
                    &format!("{p}.measured"),
                    format!("names a second cost source beside {p}.scheduler.profile; keep one"),
                ));
            }
            (Some(file), None) => {
                let field = format!("{p}.scheduler.profile");
                let profile = file_profile(&field, file, shape, base_dir, cache)?;
                (profile, None, Some(field))
            }
            (None, Some(name)) => {
                // One GPU: tensor parallelism 1.
                let (profile, record) = measured_profile(p, name, gpu, shape, 1, base_dir, cache)?;
                (profile, Some(record), Some(format!("{p}.measured")))
            }
            (None, None) => (analytic_profile(gpu, shape, cache), None, None),
        };
        let model = match pricing {
            StaticPricing::Cv => CvModel::new(&profile, shape, sensitivity).map(ExecutionModel::Cv),
            StaticPricing::Straggler => {
                StragglerModel::new(&profile, shape).map(ExecutionModel::Straggler)
            }
            _ => {
                let model_gpu = match &own_device {
                    Some(field) => GpuSpec::by_name(&profile.gpu)
                        .map_err(|e| field_error(field, e.to_string()))?,
                    None => gpu.clone(),
                };
                GroupedModel::new(&profile, shape, &model_gpu)
                    .map(|m| ExecutionModel::Grouped(Box::new(m)))
            }
        };
        let mut model =
            model.map_err(|e| field_error(&format!("{p}.scheduler.pricing"), e.to_string()))?;
        if let Some(record) = record {
            model = model.with_pricing(record);
        }
        Ok(Some(StaticCost::Model(Arc::new(model))))
    }

    /// The execution model, for the expected-routing pricings.
    pub fn model(&self) -> Option<&Arc<ExecutionModel>> {
        match self {
            StaticCost::Model(model) => Some(model),
            _ => None,
        }
    }

    /// The weight of a batch's load CV in the imbalance factor a replica reports: the `cv`
    /// model's sensitivity, 1 for the others (as caps.txt's factor reads without one).
    pub fn imbalance_sensitivity(&self) -> f64 {
        match self.model().map(|m| m.as_ref()) {
            Some(ExecutionModel::Cv(cv)) => cv.sensitivity(),
            _ => 1.0,
        }
    }

    /// The step cost of one replica's run; `exponential` draws its service times from
    /// `service`.
    pub fn step_cost<'a>(&self, service: SimRng) -> Box<dyn StepCost + 'a> {
        match self {
            StaticCost::Model(model) => Box::new(SharedModel(Arc::clone(model))),
            StaticCost::Constant(time) => Box::new(ConstantService(*time)),
            StaticCost::Exponential(mean) => Box::new(ExponentialService {
                mean: *mean,
                rng: service,
            }),
        }
    }

    /// Where the replica's batch prices come from, as results name a cell's cost model: the
    /// measured record's step source, a measured or analytic profile, or a queueing reference.
    pub fn cost_source(&self) -> CostSource {
        match self {
            StaticCost::Model(model) => match model.pricing() {
                Some(record) => record.sources().step_source(),
                None if model.source() == SourceKind::Measured.as_str() => CostSource::Measured,
                None => CostSource::Analytic,
            },
            StaticCost::Constant(_) | StaticCost::Exponential(_) => CostSource::Reference,
        }
    }

    /// How each operation was priced, when the model's profile was built from measured ones.
    pub fn pricing(&self) -> Option<&PricingRecord> {
        self.model().and_then(|m| m.pricing())
    }
}

/// An execution model shared by the runs of a cell (it reads only).
struct SharedModel(Arc<ExecutionModel>);

impl StepCost for SharedModel {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        self.0.step_time(work)
    }
}

/// The analytic roofline profile of `shape` on `gpu`, built once per shape and GPU.
fn analytic_profile(gpu: &GpuSpec, shape: &MoeModelShape, cache: &mut LoadCache) -> Arc<Profile> {
    // The whole shape is part of the key: a sweep over layers, experts or dtype needs its own.
    let key = format!(
        "analytic:{}:{}",
        gpu.name,
        serde_json::to_string(shape).expect("shapes serialize")
    );
    cache
        .profiles
        .entry(key)
        .or_insert_with(|| Arc::new(crate::cost::roofline::analytic_profile(gpu, shape)))
        .clone()
}

/// The profile file `path` (relative to `base_dir`), checked against `shape`.
pub(super) fn file_profile(
    field: &str,
    path: &str,
    shape: &MoeModelShape,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<Arc<Profile>, FieldError> {
    let resolved = crate::validate::resolve_profile(field, path, base_dir)?;
    let key = format!(
        "file:{}:{}",
        resolved.display(),
        serde_json::to_string(shape).expect("shapes serialize")
    );
    if let Some(profile) = cache.profiles.get(&key) {
        return Ok(profile.clone());
    }
    let profile = Profile::load(&resolved).map_err(|e| field_error(field, e.to_string()))?;
    profile
        .check_shape(shape)
        .map_err(|e| field_error(field, format!("{}: {e}", resolved.display())))?;
    let profile = Arc::new(profile);
    cache.profiles.insert(key, profile.clone());
    Ok(profile)
}

/// The curves of `shape` on `gpu` built from the measured set `name`
/// (`cost::measured_steps::moe`, the non-expert part at `tensor_parallel`), with their pricing
/// record.
pub(super) fn measured_profile(
    p: &str,
    name: &str,
    gpu: &GpuSpec,
    shape: &MoeModelShape,
    tensor_parallel: u32,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<(Arc<Profile>, Arc<PricingRecord>), FieldError> {
    let field = format!("{p}.measured");
    let set = crate::load_cache::measured_set(&field, name, base_dir, cache)?;
    crate::validate::measured_on(&field, &set, &format!("{p}.gpu"), gpu)?;
    let built = crate::cost::measured_steps::moe(&set, shape, tensor_parallel);
    Ok((Arc::new(built.profile), Arc::new(built.record)))
}
