//! A continuous MoE replica priced from a calibration profile (`replica.scheduler.profile`) or
//! a measured operation set (`replica.measured`, its curves built by
//! `cost::measured_steps::moe` at the replica's tensor parallelism): the dense part of a step
//! is the profile's per-layer `non_expert_prefill` curve on the step's prefill rows plus its
//! `non_expert_decode` curve on its decoding rows, times the MoE layers, plus the `head` curve
//! on the sequences that emit a token. Each GPU runs its tensor-parallel share (1 / the
//! degree, unless the curves were measured as one GPU's shard) at its own compute factor
//! (prefill: GEMMs, compute-bound at the counts that matter) or bandwidth factor (decode and
//! head: weight and KV streaming), and the slowest GPU sets the pace. A measured profile's
//! expert entry prices the routed experts (`MoeLayerCost::with_profile`), else the kernel model
//! does. `ReplicaStepCost` calls this in place of the roofline's kernel classes.

use super::config::{SchedulerTable, ServedModel};
use super::static_pricing::{file_profile, measured_profile};
use crate::cost::measured_steps::{OpSources, PricingRecord};
use crate::cost::moe_layer::{MoeLayerCost, SpeedFactors};
use crate::cost::profile::{Profile, SourceKind};
use crate::cost::shape::MoeModelShape;
use crate::load_cache::LoadCache;
use crate::serving::CostSource;
use crate::validate::{FieldError, field_error};
use std::path::Path;
use std::sync::Arc;

/// A continuous MoE replica's profile pricing, validated with the replica.
#[derive(Clone, Debug)]
pub struct CurvePricing {
    pub profile: Arc<Profile>,
    /// With `replica.measured`: how each operation was priced.
    pub record: Option<Arc<PricingRecord>>,
    /// Whether the non-expert curves are already one GPU's share of the tensor-parallel layer
    /// (built from operations measured at that degree, or a profile measured as one GPU's
    /// shard) rather than the whole layer's.
    pub non_expert_per_gpu: bool,
    /// Whether the head curve is one GPU's shard too (a profile measured as one).
    pub head_per_gpu: bool,
}

/// Cells are equal when they share the one pricing built for them.
impl PartialEq for CurvePricing {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.profile, &other.profile)
    }
}

/// One GPU's dense part of a step, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DenseNanos {
    /// The MoE layers' non-expert part (attention, shared experts, router, norms).
    pub layers_ns: f64,
    /// The output head.
    pub head_ns: f64,
}

impl DenseNanos {
    pub fn nanos(&self) -> f64 {
        self.layers_ns + self.head_ns
    }
}

impl CurvePricing {
    /// The profile pricing of replica table `p` (`None` when it names no profile and no
    /// measured set, or is `static`, whose pricing reads them itself): `scheduler` its
    /// scheduler table, `measured` its `replica.measured`, `tensor_parallel` its degree.
    #[allow(clippy::too_many_arguments)]
    pub fn validate(
        p: &str,
        model: &ServedModel,
        scheduler: &SchedulerTable,
        measured: Option<&str>,
        gpu: &crate::cost::gpu::GpuSpec,
        tensor_parallel: usize,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<Option<CurvePricing>, FieldError> {
        if matches!(scheduler, SchedulerTable::Static { .. }) {
            return Ok(None);
        }
        let file = scheduler.continuous_profile();
        let shape = match (model, file, measured) {
            (_, None, None) => return Ok(None),
            (ServedModel::Moe(shape), _, _) => shape,
            // A dense model's measured set prices it by `MeasuredDenseStep` (config.rs).
            (ServedModel::Dense(_), None, Some(_)) => return Ok(None),
            (_, Some(_), _) => {
                return Err(field_error(
                    &format!("{p}.scheduler.profile"),
                    format!(
                        "prices a continuous MoE replica from a calibration profile's curves; \
                         {} is not an MoE model with such a profile",
                        model.name()
                    ),
                ));
            }
            (_, None, Some(_)) => {
                return Err(field_error(
                    &format!("{p}.measured"),
                    format!(
                        "not yet for {} (a latent-attention MoE model): its curves are not \
                         built from measured operations",
                        model.name()
                    ),
                ));
            }
        };
        match (file, measured) {
            (Some(_), Some(_)) => Err(field_error(
                &format!("{p}.measured"),
                format!("names a second cost source beside {p}.scheduler.profile; keep one"),
            )),
            (None, Some(name)) => {
                // The non-expert part is one GPU's share at the replica's tensor parallelism.
                let (profile, record) =
                    measured_profile(p, name, gpu, shape, tensor_parallel as u32, base_dir, cache)?;
                Ok(Some(CurvePricing {
                    head_per_gpu: profile.tensor_parallel > 1,
                    profile,
                    record: Some(record),
                    non_expert_per_gpu: true,
                }))
            }
            (Some(file), None) => {
                let field = format!("{p}.scheduler.profile");
                let profile = file_profile(&field, file, shape, base_dir, cache)?;
                let tp = profile.tensor_parallel as usize;
                if tp != 1 && tp != tensor_parallel {
                    return Err(field_error(
                        &field,
                        format!(
                            "{file}: its non-expert curves are one GPU's shard at tensor \
                             parallelism {tp}, but the replica shards over {tensor_parallel} \
                             GPUs (calibrate with --tensor-parallel {tensor_parallel}, or 1 for \
                             the whole layer)"
                        ),
                    ));
                }
                Ok(Some(CurvePricing {
                    non_expert_per_gpu: tp > 1,
                    head_per_gpu: tp > 1,
                    profile,
                    record: None,
                }))
            }
            (None, None) => unreachable!("returned above"),
        }
    }

    /// The routed experts' layer: refined by the profile's expert entry where the profile was
    /// measured (its fixed part once per layer plus each active expert's GEMM pair, where it
    /// splits the layer), `layer` (the kernel model) for an analytic profile.
    pub fn expert_layer(&self, layer: MoeLayerCost, shape: &MoeModelShape) -> MoeLayerCost {
        if self.profile.source.kind == SourceKind::AnalyticRoofline {
            return layer;
        }
        match self
            .profile
            .expert_entry(shape.hidden, shape.expert_ffn, shape.weight_dtype)
        {
            Some(expert) => layer.with_profile(expert),
            None => layer,
        }
    }

    /// How each operation was priced, from a measured set.
    pub fn op_sources(&self) -> Option<OpSources> {
        self.record.as_ref().map(|r| r.sources())
    }

    /// What priced the steps, as results name a cell's cost model.
    pub fn source(&self) -> CostSource {
        match self.profile.source.kind {
            SourceKind::Measured => CostSource::Measured,
            SourceKind::AnalyticRoofline => CostSource::Analytic,
            SourceKind::MeasuredOperations => self
                .op_sources()
                .map_or(CostSource::Analytic, |s| s.step_source()),
        }
    }

    /// One GPU's dense part of a step of `prefill` prompt rows and `decode` decoding rows over
    /// `layers` MoE layers, `emitting` sequences scored by the head, at `speed`, its share of
    /// `tensor_parallel`.
    pub fn gpu_nanos(
        &self,
        prefill: u64,
        decode: u64,
        emitting: u64,
        layers: usize,
        tensor_parallel: usize,
        speed: SpeedFactors,
    ) -> DenseNanos {
        let p = &self.profile;
        let at = |curve: &crate::cost::curve::CostCurve, n: u64| {
            if n > 0 { curve.at(n as f64) } else { 0.0 }
        };
        let g = tensor_parallel.max(1) as f64;
        let layer = at(&p.non_expert_prefill, prefill) / speed.compute
            + at(&p.non_expert_decode, decode) / speed.bandwidth;
        let layer = if self.non_expert_per_gpu {
            layer
        } else {
            layer / g
        };
        let head = at(&p.head, emitting) / speed.bandwidth;
        DenseNanos {
            layers_ns: layers as f64 * layer,
            head_ns: if self.head_per_gpu { head } else { head / g },
        }
    }
}
