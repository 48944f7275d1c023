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
//!
//! An MLA MoE model (ExpertWeave's base) is priced from a measured profile of its own widths
//! ([`MlaGemms`], `expertsim-calibrate --for-scenario`): its layers' attention and FFN
//! projections are not the per-layer curves' GQA layer, so each layer's dense part is one GEMM
//! of the layer's non-routed parameters over the step's rows (measured at that width,
//! `dense_gemm/out=W`, else the profile's dense GEMM scaled linearly in width), the head one GEMM
//! of the vocabulary over the emitting sequences, each GPU its 1 / TP share of the outputs; and
//! with adapters the rerouting kernel is the profile's own measured series
//! (`reroute/<variant>/adapters=N`, the count nearest the instance's), per MoE layer.

use super::config::{SchedulerTable, ServedModel};
use super::rerouting::Rerouting;
use super::static_pricing::{file_profile, measured_profile};
use crate::cost::curve::CostCurve;
use crate::cost::measured_steps::{OpSources, PricingRecord};
use crate::cost::moe_layer::{MoeLayerCost, SpeedFactors};
use crate::cost::profile::{MeasuredProfile, Profile, SourceKind};
use crate::cost::shape::{MlaMoeShape, MoeModelShape, WeightDtype};
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
    /// An MLA model's dense part and rerouting from the profile's measured rows, in place of
    /// the per-layer curves.
    pub mla: Option<MlaGemms>,
}

/// An MLA MoE model's steps from a profile measured for its widths: GEMMs over the hidden
/// size measured at their own output width (or the dense GEMM scaled linearly in width: one
/// pass over the weights per tile of output columns) and the rerouting kernel's series.
#[derive(Clone, Debug, PartialEq)]
pub struct MlaGemms {
    /// Tokens -> ns of one GEMM of `dense_width` output features (the profile's dense layer).
    dense: CostCurve,
    dense_width: u64,
    /// (width, tokens -> ns) of GEMMs measured at their own output width.
    gemms: Vec<(u64, CostCurve)>,
    /// Each layer's non-routed output width (its non-routed parameters over the hidden size).
    layer_widths: Vec<u64>,
    vocab: u64,
    /// (variant, adapters, tokens -> ns) of the measured rerouting series.
    reroute: Vec<(Rerouting, usize, CostCurve)>,
}

impl MlaGemms {
    /// The GEMMs of `shape` in `measured`; the error says what the profile lacks.
    pub fn of(measured: &MeasuredProfile, shape: &MlaMoeShape) -> Result<MlaGemms, String> {
        let profile = &measured.profile;
        let (hidden, ffn) = (shape.hidden as usize, shape.expert_ffn as usize);
        if profile.model.hidden != hidden {
            return Err(format!(
                "its dense GEMM is over hidden {}, the model's is {hidden}",
                profile.model.hidden
            ));
        }
        if profile
            .expert_entry(hidden, ffn, WeightDtype::Bf16)
            .is_none()
        {
            return Err(format!(
                "has no bf16 expert curve for hidden {hidden}, expert_ffn {ffn} (calibrate with \
                 --expert-ffn {ffn})"
            ));
        }
        let curve = |name: &str, points: &[[f64; 6]]| {
            CostCurve::new(points.iter().map(|p| (p[0], p[1])).collect())
                .map_err(|e| format!("measurement {name:?}: {e}"))
        };
        let (mut gemms, mut reroute) = (Vec::new(), Vec::new());
        for m in &measured.calibration.measurements {
            let bad = |what: &str| format!("measurement {:?}: bad {what}", m.name);
            if let Some(width) = m.name.strip_prefix("dense_gemm/out=") {
                let width = width.parse().map_err(|_| bad("width"))?;
                gemms.push((width, curve(&m.name, &m.points)?));
            } else if let Some(rest) = m.name.strip_prefix("reroute/") {
                let (variant, count) = match rest.split_once("/adapters=") {
                    Some(("fused", n)) => (Rerouting::Fused, n),
                    Some(("unfused", n)) => (Rerouting::Unfused, n),
                    _ => return Err(bad("rerouting series")),
                };
                let count = count.parse().map_err(|_| bad("adapter count"))?;
                reroute.push((variant, count, curve(&m.name, &m.points)?));
            }
        }
        Ok(MlaGemms {
            dense: profile.non_expert_prefill.clone(),
            dense_width: profile
                .model
                .dense_matmul_params_per_layer()
                .div_ceil(hidden as u64),
            gemms,
            layer_widths: (0..shape.n_layers)
                .map(|l| shape.layer_non_routed_params(l).div_ceil(shape.hidden))
                .collect(),
            vocab: shape.vocab,
            reroute,
        })
    }

    /// One GEMM of `width` output features over `tokens` rows: measured at that width, else
    /// the dense GEMM scaled linearly in width.
    pub fn gemm_ns(&self, width: u64, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        match self.gemms.iter().find(|(w, _)| *w == width) {
            Some((_, curve)) => curve.at(tokens as f64),
            None => self.dense.at(tokens as f64) * width as f64 / self.dense_width as f64,
        }
    }

    /// The measured rerouting series of `variant` with the adapter count nearest `adapters`,
    /// `None` when the profile has none of that variant.
    pub fn reroute(&self, variant: Rerouting, adapters: usize) -> Option<&CostCurve> {
        self.reroute
            .iter()
            .filter(|(v, _, _)| *v == variant)
            .min_by_key(|(_, a, _)| a.abs_diff(adapters))
            .map(|(_, _, curve)| curve)
    }

    /// One GPU's dense part of a step of `rows` token rows, `emitting` of them scored by the
    /// head, its 1 / `tensor_parallel` share of each GEMM's outputs.
    fn gpu_nanos(&self, rows: u64, emitting: u64, tensor_parallel: u64) -> DenseNanos {
        let shard = |width: u64| width.div_ceil(tensor_parallel.max(1));
        DenseNanos {
            layers_ns: self
                .layer_widths
                .iter()
                .map(|&w| self.gemm_ns(shard(w), rows))
                .sum(),
            head_ns: self.gemm_ns(shard(self.vocab), emitting),
        }
    }
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
            (ServedModel::Mla(mla), Some(file), None) => {
                return mla_pricing(p, file, mla, base_dir).map(Some);
            }
            (ServedModel::Moe(shape), _, _) => shape,
            // A dense model's measured set prices it by `MeasuredDenseStep`, its profile is a
            // dense-decode profile (`dense_profile`; config.rs validates both).
            (ServedModel::Dense(_), _, _) => return Ok(None),
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
                    mla: None,
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
                    mla: None,
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
        if let Some(mla) = &self.mla {
            let own = mla.gpu_nanos(prefill + decode, emitting, tensor_parallel as u64);
            return DenseNanos {
                layers_ns: own.layers_ns / speed.compute,
                head_ns: own.head_ns / speed.compute,
            };
        }
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

/// The pricing of an MLA model `shape` from the measured profile `file` (`{p}.scheduler.profile`,
/// relative to `base_dir`): its expert entry for the routed experts, [`MlaGemms`] for the rest.
fn mla_pricing(
    p: &str,
    file: &str,
    shape: &MlaMoeShape,
    base_dir: &Path,
) -> Result<CurvePricing, FieldError> {
    let field = format!("{p}.scheduler.profile");
    let path = crate::validate::resolve_profile(&field, file, base_dir)?;
    let measured = MeasuredProfile::load(&path).map_err(|e| field_error(&field, e.to_string()))?;
    let mla = MlaGemms::of(&measured, shape)
        .map_err(|e| field_error(&field, format!("{}: {e}", path.display())))?;
    Ok(CurvePricing {
        profile: Arc::new(measured.profile),
        record: None,
        non_expert_per_gpu: true,
        head_per_gpu: true,
        mla: Some(mla),
    })
}
