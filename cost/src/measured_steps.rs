//! Steps priced from measured operations: a named set of measured op and network profiles of
//! one GPU (`profiles/<name>/`, e.g. `vidur/a100`), the cost curves of an MoE model (the
//! `Profile` GEM and CAPS read) and the step of a dense model (Chimera's engines) built from it
//! through `cost::measured_ops`, and the record of which operation was measured, scaled or
//! analytic: per step (`OpSources`, in the step's breakdown) and per run (`PricingRecord`, in
//! its results). The attention kernels, the MoE router and the output head are not in the data:
//! the roofline prices them, and the record says so. Derivation: docs/cost-model.md, "Pricing
//! from measured operations".

use super::source::CostSource;
use crate::curve::CostCurve;
use crate::gpu::GpuSpec;
use crate::measured_ops::{Collectives, LayerShape, MeasuredOps, OpClass, PricedClass};
use crate::op_profile::{NetworkProfile, OpProfile};
use crate::profile::{
    ExpertExecution, ExpertFfnCurve, PROFILE_FORMAT_VERSION, Profile, ProfileSource, SourceKind,
    decode_step_nanos,
};
use crate::roofline::{
    OpTime, ProfileCurves, RooflineParams, StepPrice, StepRoofline, StepTokens, TensorParallel,
};
use crate::shape::{DenseModelShape, MoeModelShape};
use expertsim_core::validate::{FieldError, field_error};
use serde::{Serialize, Serializer};
use std::path::{Path, PathBuf};

/// An operation of a step, as the pricing record names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOperation {
    /// The routed experts' GEMMs (one expert's MLP each).
    RoutedExperts,
    /// A dense model's MLP, or an MoE layer's shared experts.
    Mlp,
    /// The QKV and attention-output GEMMs.
    AttentionProjections,
    /// Norms, rotary embedding, residual add.
    Elementwise,
    /// The attention kernel (scores and values over the KV cache): not in the data.
    Attention,
    /// The MoE router GEMM and top-k: not in the data.
    Router,
    /// Final norm, `lm_head` and sampling: not in the data.
    Head,
    /// The tensor-parallel all-reduces.
    AllReduce,
    /// The expert-parallel all-to-alls.
    AllToAll,
}

impl StepOperation {
    pub const ALL: [StepOperation; 9] = [
        StepOperation::RoutedExperts,
        StepOperation::Mlp,
        StepOperation::AttentionProjections,
        StepOperation::Elementwise,
        StepOperation::Attention,
        StepOperation::Router,
        StepOperation::Head,
        StepOperation::AllReduce,
        StepOperation::AllToAll,
    ];

    /// The name in results and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            StepOperation::RoutedExperts => "routed_experts",
            StepOperation::Mlp => "mlp",
            StepOperation::AttentionProjections => "attention_projections",
            StepOperation::Elementwise => "elementwise",
            StepOperation::Attention => "attention",
            StepOperation::Router => "router",
            StepOperation::Head => "head",
            StepOperation::AllReduce => "all_reduce",
            StepOperation::AllToAll => "all_to_all",
        }
    }

    fn index(self) -> usize {
        StepOperation::ALL
            .iter()
            .position(|&op| op == self)
            .expect("every operation is in ALL")
    }

    /// Whether measured profiles can hold the operation (the others are always analytic).
    fn in_the_data(self) -> bool {
        !matches!(
            self,
            StepOperation::Attention | StepOperation::Router | StepOperation::Head
        )
    }
}

/// Which source priced each operation of a step; an operation the step does not run is absent.
/// Copied into every step's breakdown, so it stays a few bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpSources([Option<CostSource>; 9]);

impl OpSources {
    /// Records that `source` priced `operation`.
    pub fn set(&mut self, operation: StepOperation, source: CostSource) {
        self.0[operation.index()] = Some(source);
    }

    /// What priced `operation`, if the step ran it.
    pub fn get(&self, operation: StepOperation) -> Option<CostSource> {
        self.0[operation.index()]
    }

    /// The source of the step as a whole: the least measured of the operations measured
    /// profiles can hold (analytic if any is, else scaled if any is, else measured); the
    /// attention, router and head, never in the data, are named in the sources but do not
    /// decide it. Analytic when the step runs no such operation.
    pub fn step_source(&self) -> CostSource {
        let held: Vec<CostSource> = StepOperation::ALL
            .iter()
            .filter(|op| op.in_the_data())
            .filter_map(|&op| self.get(op))
            .collect();
        if held.is_empty() || held.contains(&CostSource::Analytic) {
            CostSource::Analytic
        } else if held.contains(&CostSource::Scaled) {
            CostSource::Scaled
        } else {
            CostSource::Measured
        }
    }
}

impl Serialize for OpSources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let present: Vec<(StepOperation, CostSource)> = StepOperation::ALL
            .iter()
            .filter_map(|&op| self.get(op).map(|s| (op, s)))
            .collect();
        let mut map = serializer.serialize_map(Some(present.len()))?;
        for (op, source) in present {
            map.serialize_entry(op.as_str(), &source)?;
        }
        map.end()
    }
}

/// How one operation of a run was priced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperationRecord {
    pub operation: StepOperation,
    /// The source inside the measured range.
    pub source: CostSource,
    /// The measured model, operations and degree it was priced from, or the roofline.
    pub priced_from: String,
    /// Token counts (or message bytes) inside which `source` holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_range: Option<[u64; 2]>,
    /// What prices it outside that range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_the_range: Option<String>,
}

/// Which measured set priced a run, and how each of its step's operations was priced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PricingRecord {
    /// The measured set's name (`[...] measured = "..."`).
    pub measured: String,
    pub gpu: String,
    /// The op profiles (and the network profile) of the set, as files.
    pub files: Vec<String>,
    /// Tensor parallelism the non-expert operations were priced at.
    pub tensor_parallel: u32,
    pub operations: Vec<OperationRecord>,
}

impl PricingRecord {
    /// The in-range source of every recorded operation.
    pub fn sources(&self) -> OpSources {
        let mut sources = OpSources::default();
        for op in &self.operations {
            sources.set(op.operation, op.source);
        }
        sources
    }

    fn class(&mut self, operation: StepOperation, priced: &PricedClass) {
        let names: Vec<&str> = priced
            .class
            .operations()
            .iter()
            .map(|op| op.as_str())
            .collect();
        let priced_from = match (&priced.from, priced.source) {
            (Some((model, degree)), CostSource::Measured) => {
                format!("{model} {} at TP {degree}", names.join(" + "))
            }
            (Some((model, degree)), _) => format!(
                "{model} {} at TP {degree}, times the roofline's ratio of this shape to that one",
                names.join(" + ")
            ),
            (None, _) => "roofline: no op profile of this GPU measured these operations".into(),
        };
        let range = priced.measured_range();
        self.operations.push(OperationRecord {
            operation,
            source: priced.source,
            priced_from,
            measured_range: range.map(|(a, b)| [a, b]),
            outside_the_range: range.map(|(_, last)| {
                format!(
                    "past {last} tokens: the {last}-token measurement times the roofline's \
                     growth from there (scaled), never extrapolated from the measurements"
                )
            }),
        });
    }

    fn analytic(&mut self, operation: StepOperation, why: &str) {
        self.operations.push(OperationRecord {
            operation,
            source: CostSource::Analytic,
            priced_from: format!("roofline: {why}"),
            measured_range: None,
            outside_the_range: None,
        });
    }
}

/// A named set of measured profiles of one GPU: every op profile of `profiles/<name>/` and the
/// network profile of its sibling `network/` folder whose topology starts with the folder's
/// name (`vidur/a100` reads `vidur/network/a100_dgx.json`).
#[derive(Clone, Debug)]
pub struct MeasuredSet {
    pub name: String,
    pub ops: MeasuredOps,
    pub network: Option<NetworkProfile>,
    /// The files read, as given to `load`.
    pub files: Vec<String>,
}

impl MeasuredSet {
    /// The folder of the set named `name`: `$EXPERTSIM_PROFILE_DIR/<name>`, then
    /// `profiles/<name>` under the working directory, then under each folder above the
    /// scenario's `base_dir` (a scenario inside the repository finds the repository's
    /// `profiles/` from any working directory).
    pub fn find(name: &str, base_dir: &Path) -> Result<PathBuf, String> {
        let component_ok = |c: &str| !c.is_empty() && c != "." && c != "..";
        if name.starts_with('/') || !name.split('/').all(component_ok) {
            return Err(format!(
                "`{name}` is not a measured set's name (folders under profiles/, e.g. \"vidur/a100\")"
            ));
        }
        let mut roots: Vec<PathBuf> = std::env::var_os("EXPERTSIM_PROFILE_DIR")
            .map(Into::into)
            .into_iter()
            .collect();
        roots.push("profiles".into());
        for folder in base_dir.ancestors().skip(1) {
            let root = folder.join("profiles");
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        for root in &roots {
            let dir = root.join(name);
            if dir.is_dir() {
                return Ok(dir);
            }
        }
        let looked: Vec<String> = roots
            .iter()
            .map(|r| r.join(name).display().to_string())
            .collect();
        Err(format!(
            "no measured profile set `{name}` (looked for the folder {})",
            looked.join(", ")
        ))
    }

    /// Reads the set in `dir` (see [`MeasuredSet::find`]): at least one op profile, all
    /// measured on one GPU of the catalogue. Every error names the file.
    pub fn load(name: &str, dir: &Path) -> Result<MeasuredSet, String> {
        let json_files = |dir: &Path| -> Result<Vec<PathBuf>, String> {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            Ok(files)
        };
        let files = json_files(dir)?;
        let profiles: Vec<OpProfile> = files
            .iter()
            .map(|p| OpProfile::load(p).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let Some(first) = profiles.first() else {
            return Err(format!(
                "{}: no op profile (*.json) in the folder",
                dir.display()
            ));
        };
        if let Some((p, path)) = profiles
            .iter()
            .zip(&files)
            .find(|(p, _)| p.gpu != first.gpu)
        {
            return Err(format!(
                "{}: measured on {}, but {} was measured on {}: a set is one GPU's",
                path.display(),
                p.gpu,
                files[0].display(),
                first.gpu
            ));
        }
        let gpu = GpuSpec::by_name(&first.gpu)
            .map_err(|e| format!("{}: field gpu: {e}", files[0].display()))?;
        let mut read: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        let folder = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let network_dir = dir.parent().map(|p| p.join("network"));
        let network_file = match network_dir {
            Some(d) if d.is_dir() => json_files(&d)?.into_iter().find(|p| {
                p.file_stem()
                    .is_some_and(|s| s.to_string_lossy().starts_with(&format!("{folder}_")))
            }),
            _ => None,
        };
        let network = match network_file {
            Some(path) => {
                read.push(path.display().to_string());
                Some(NetworkProfile::load(&path).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        Ok(MeasuredSet {
            name: name.to_string(),
            ops: MeasuredOps::new(&gpu, &profiles),
            network,
            files: read,
        })
    }

    fn record(&self, tensor_parallel: u32) -> PricingRecord {
        PricingRecord {
            measured: self.name.clone(),
            gpu: self.ops.gpu.name.clone(),
            files: self.files.clone(),
            tensor_parallel,
            operations: Vec::new(),
        }
    }
}

/// Checks that the measured set `set` (named by `field`) was measured on `gpu`, the GPU the
/// scenario's `gpu_field` names: a measured set prices only its own GPU.
pub fn measured_on(
    field: &str,
    set: &MeasuredSet,
    gpu_field: &str,
    gpu: &GpuSpec,
) -> Result<(), FieldError> {
    if set.ops.gpu.name == gpu.name {
        return Ok(());
    }
    Err(field_error(
        field,
        format!(
            "`{}` was measured on {}, but {gpu_field} is {}; name that GPU or another set",
            set.name, set.ops.gpu.name, gpu.name
        ),
    ))
}

/// An MoE model's cost curves built from measured operations, and how each was priced.
#[derive(Clone, Debug)]
pub struct MeasuredMoe {
    /// The curves (`source.kind` = `measured-operations`). With `tensor_parallel` > 1 the
    /// non-expert curves are one GPU's share of a layer whose non-expert part is
    /// tensor-parallel over that many GPUs; the head stays the whole head.
    pub profile: Profile,
    pub tensor_parallel: u32,
    pub record: PricingRecord,
}

/// The shape `class` prices in `shape`'s layers, with `ffn` as the MLP's width.
fn moe_layer_shape(shape: &MoeModelShape, ffn: usize) -> LayerShape {
    LayerShape {
        hidden: shape.hidden as u64,
        ffn: ffn as u64,
        gated: true,
        n_heads: shape.n_attention_heads as u64,
        n_kv_heads: shape.n_kv_heads as u64,
        head_dim: shape.head_dim as u64,
        bytes_per_param: shape.weight_dtype.bytes_per_param(),
    }
}

/// `base` with every token count of `extra` added, ascending, without duplicates.
fn merged(base: Vec<u64>, extra: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut points = base;
    points.extend(extra);
    points.sort_unstable();
    points.dedup();
    points.retain(|&n| n > 0);
    points
}

fn curve(points: &[u64], cost: impl Fn(u64) -> f64) -> CostCurve {
    CostCurve::new(points.iter().map(|&n| (n as f64, cost(n))).collect())
        .expect("measured and roofline times are finite and positive at increasing counts")
}

/// The cost curves of `shape` on the set's GPU, its non-expert operations tensor-parallel over
/// `tensor_parallel` GPUs. Per layer: the routed expert is one gated MLP of `hidden x
/// expert_ffn` (tensor parallelism 1: experts are whole on their GPU); the non-expert part is
/// the attention projections, the element-wise kernels and the shared experts (measured or
/// scaled), plus the router GEMM and top-k (2 launches) and the attention kernel (1 launch, its
/// KV split over the KV heads' ranks and FLOPs over all), which the roofline prices. The head
/// is the analytic profile's. Curves are sampled where the analytic profile samples and at
/// every measured token count, so interpolating them reproduces the measurements', plus two
/// points (2x and 4x the last measured count) priced past the measured range.
pub fn moe(set: &MeasuredSet, shape: &MoeModelShape, tensor_parallel: u32) -> MeasuredMoe {
    let tp = tensor_parallel.max(1);
    let params = RooflineParams::default();
    let ops = &set.ops;
    let roofline = ops.roofline;
    let analytic = ProfileCurves::new(&ops.gpu, shape, &params);
    let non_expert = StepRoofline::moe_non_expert(shape, roofline, &params);

    let expert = ops.class(OpClass::Mlp, &moe_layer_shape(shape, shape.expert_ffn), 1);
    let layer = moe_layer_shape(shape, shape.expert_ffn);
    let projections = ops.class(OpClass::AttentionProjections, &layer, tp);
    let elementwise = ops.class(OpClass::Elementwise, &layer, tp);
    let shared = (shape.n_shared_experts > 0).then(|| {
        let width = shape.n_shared_experts * shape.shared_expert_ffn;
        ops.class(OpClass::Mlp, &moe_layer_shape(shape, width), tp)
    });
    let router_params = shape.router_params_per_layer() as f64;
    let router = |n: u64| {
        roofline.group_nanos(
            2,
            router_params * shape.weight_dtype.bytes_per_param(),
            2.0 * router_params * roofline.padded(n) as f64,
        )
    };
    let kv_split = f64::from(tp).min(shape.n_kv_heads as f64).max(1.0);
    let attention = |_rows: u64, context: u64| {
        let a = &non_expert.attention;
        let context = context as f64;
        let t = roofline.op(
            context * a.kv_bytes_per_token / kv_split,
            context * a.decode_flops_per_pair / f64::from(tp),
        );
        roofline.launch_ns + t.nanos()
    };
    let layer_nanos = |n: u64, context: u64| {
        projections.nanos(n)
            + elementwise.nanos(n)
            + shared.as_ref().map_or(0.0, |s| s.nanos(n))
            + router(n)
            + attention(n, context)
    };

    let past = |class: &PricedClass| {
        class
            .measured_range()
            .map(|(_, last)| [2 * last, 4 * last])
            .into_iter()
            .flatten()
    };
    let expert_tokens = merged(
        analytic.token_sample_points(),
        expert.measured_tokens().into_iter().chain(past(&expert)),
    );
    let expert_curve = curve(&expert_tokens, |n| expert.nanos(n));
    let layer_tokens = merged(
        analytic.token_sample_points(),
        [&projections, &elementwise]
            .into_iter()
            .flat_map(|c| c.measured_tokens().into_iter().chain(past(c))),
    );
    let non_expert_prefill = curve(&layer_tokens, |n| layer_nanos(n, 0));
    let batches = analytic.batch_sample_points();
    let max_batch = batches.last().copied().unwrap_or(1);
    let decode_batches = merged(
        batches.clone(),
        projections
            .measured_tokens()
            .into_iter()
            .filter(|&b| b <= max_batch),
    );
    let context = u64::from(params.decode_context_tokens);
    let non_expert_decode = curve(&decode_batches, |b| layer_nanos(b, b * context));
    let head = curve(&batches, |b| analytic.head_nanos(b));
    let decode_step = curve(&decode_batches, |b| {
        decode_step_nanos(shape, b, &non_expert_decode, &head, |assignments| {
            expert_curve.at(assignments as f64 / shape.n_experts as f64)
        })
    });

    let mut record = set.record(tp);
    record.class(StepOperation::RoutedExperts, &expert);
    record.class(StepOperation::AttentionProjections, &projections);
    record.class(StepOperation::Elementwise, &elementwise);
    if let Some(shared) = &shared {
        record.class(StepOperation::Mlp, shared);
    }
    record.analytic(
        StepOperation::Router,
        "the router GEMM and top-k are not in the data",
    );
    record.analytic(
        StepOperation::Attention,
        "attention kernels are not in the data (KV bytes and score/value FLOPs)",
    );
    record.analytic(
        StepOperation::Head,
        "lm_head and sampling are not in the data",
    );

    let profile = Profile {
        format_version: PROFILE_FORMAT_VERSION,
        gpu: ops.gpu.name.clone(),
        source: ProfileSource {
            kind: SourceKind::MeasuredOperations,
            tool_version: crate::profile::TOOL_VERSION.to_string(),
            date: None,
            notes: format!(
                "built from the measured operations of {} at tensor parallelism {tp}; each \
                 operation measured, scaled or analytic as the pricing record says \
                 (docs/cost-model.md, \"Pricing from measured operations\")",
                set.name
            ),
        },
        model: shape.clone(),
        decode_context_tokens: params.decode_context_tokens,
        expert_ffn: vec![ExpertFfnCurve {
            hidden: shape.hidden,
            expert_ffn: shape.expert_ffn,
            dtype: shape.weight_dtype,
            curve: expert_curve,
            split: None,
        }],
        non_expert_prefill,
        non_expert_decode,
        head,
        decode_step,
        expert_execution: ExpertExecution::Concurrent,
        tensor_parallel: 1,
    };
    MeasuredMoe {
        profile,
        tensor_parallel: tp,
        record,
    }
}

/// A dense model's step priced from measured operations: per layer its MLP, attention
/// projections and element-wise kernels (measured or scaled, at the model's tensor
/// parallelism) plus the attention kernel (the roofline's KV reads and score/value FLOPs, no
/// launch: CUDA graphs, as in `StepRoofline::dense`); the head by the roofline; the host
/// overhead; with tensor parallelism two all-reduces of the rows' hidden states per layer,
/// from the set's network profile where it has that many workers.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredDenseStep {
    /// The roofline of the same model, for the attention, the head and the host overhead.
    roofline: StepRoofline,
    mlp: PricedClass,
    projections: PricedClass,
    elementwise: PricedClass,
    collectives: Collectives,
    n_layers: f64,
    all_reduce_bytes_per_row: f64,
    degree: u32,
    pub record: PricingRecord,
}

impl MeasuredDenseStep {
    /// `shape` on the set's GPU, tensor-parallel as `parallel` says, with `host_overhead_ns`
    /// per step.
    pub fn new(
        set: &MeasuredSet,
        shape: &DenseModelShape,
        parallel: TensorParallel,
        host_overhead_ns: f64,
    ) -> MeasuredDenseStep {
        let tp = parallel.degree.max(1);
        let roofline = StepRoofline::dense(shape, set.ops.roofline, parallel, host_overhead_ns);
        let layer = LayerShape {
            hidden: shape.hidden,
            ffn: shape.intermediate,
            gated: true,
            n_heads: shape.n_heads,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            bytes_per_param: 2.0,
        };
        let mlp = set.ops.class(OpClass::Mlp, &layer, tp);
        let projections = set.ops.class(OpClass::AttentionProjections, &layer, tp);
        let elementwise = set.ops.class(OpClass::Elementwise, &layer, tp);
        let mut record = set.record(tp);
        record.class(StepOperation::Mlp, &mlp);
        record.class(StepOperation::AttentionProjections, &projections);
        record.class(StepOperation::Elementwise, &elementwise);
        record.analytic(
            StepOperation::Attention,
            "attention kernels are not in the data (KV bytes and score/value FLOPs)",
        );
        record.analytic(
            StepOperation::Head,
            "lm_head and sampling are not in the data",
        );
        let collectives = Collectives {
            network: set.network.clone(),
            link: parallel.link,
        };
        if tp > 1 {
            let (source, from) = match &set.network {
                Some(n)
                    if n.series(crate::op_profile::Collective::AllReduce, tp, tp)
                        .is_some() =>
                {
                    (
                        CostSource::Measured,
                        format!("{} all_reduce among {tp} GPUs of one node", n.topology),
                    )
                }
                _ => (
                    CostSource::Analytic,
                    format!(
                        "roofline: ring all-reduce on the link (no measured all-reduce among {tp} GPUs)"
                    ),
                ),
            };
            record.operations.push(OperationRecord {
                operation: StepOperation::AllReduce,
                source,
                priced_from: from,
                measured_range: None,
                outside_the_range: (source == CostSource::Measured).then(|| {
                    "outside the measured message sizes: the nearest measured size times the \
                     ring model's growth (scaled)"
                        .to_string()
                }),
            });
        }
        MeasuredDenseStep {
            roofline,
            mlp,
            projections,
            elementwise,
            collectives,
            n_layers: shape.n_layers as f64,
            all_reduce_bytes_per_row: shape.hidden as f64 * 2.0,
            degree: tp,
            record,
        }
    }

    /// `work` by kernel class (the measured MLP and attention projections as `linear_ns`, the
    /// measured element-wise kernels, the roofline's attention and head, the all-reduces; no
    /// host time) and what priced each of its operations.
    pub fn parts(&self, work: &StepTokens) -> (MeasuredParts, OpSources) {
        let mut sources = OpSources::default();
        let mut parts = MeasuredParts::default();
        for (operation, class) in [
            (StepOperation::Mlp, &self.mlp),
            (StepOperation::AttentionProjections, &self.projections),
            (StepOperation::Elementwise, &self.elementwise),
        ] {
            let (nanos, source) = class.price(work.rows);
            if operation == StepOperation::Elementwise {
                parts.elementwise_ns = self.n_layers * nanos;
            } else {
                parts.linear_ns += self.n_layers * nanos;
            }
            sources.set(operation, source);
        }
        let attention = self.roofline.attention(work);
        parts.attention = OpTime {
            memory_ns: self.n_layers * attention.memory_ns,
            compute_ns: self.n_layers * attention.compute_ns,
            nanos: self.n_layers * attention.nanos,
        };
        sources.set(StepOperation::Attention, CostSource::Analytic);
        if work.sequences > 0 {
            sources.set(StepOperation::Head, CostSource::Analytic);
            parts.head = self.roofline.head(work.sequences);
        }
        if self.degree > 1 {
            let bytes = work.rows as f64 * self.all_reduce_bytes_per_row;
            let (one, source) = self.collectives.all_reduce(bytes, self.degree);
            sources.set(StepOperation::AllReduce, source);
            parts.communication_ns = 2.0 * self.n_layers * one;
        }
        (parts, sources)
    }

    /// The step over `work` and what priced each of its operations. The measured kernels have
    /// no memory/compute split: `memory_ns` and `compute_ns` hold the roofline-priced parts
    /// (attention, head) only; `nanos` is the whole step, the host overhead included.
    pub fn price(&self, work: &StepTokens) -> (StepPrice, OpSources) {
        let (parts, sources) = self.parts(work);
        let overhead = self.roofline.host_overhead_ns;
        let price = StepPrice {
            memory_ns: parts.attention.memory_ns + parts.head.memory_ns,
            compute_ns: parts.attention.compute_ns + parts.head.compute_ns,
            communication_ns: parts.communication_ns,
            overhead_ns: overhead,
            nanos: parts.nanos() + overhead,
        };
        (price, sources)
    }
}

/// A step priced from measured operations by kernel class, ns (`MeasuredDenseStep::parts`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MeasuredParts {
    /// The measured MLP (its activation included) and attention projections.
    pub linear_ns: f64,
    /// The measured norms, rotary embedding and residual add.
    pub elementwise_ns: f64,
    /// The roofline's attention kernels.
    pub attention: OpTime,
    /// The roofline's output head.
    pub head: OpTime,
    /// The tensor-parallel all-reduces.
    pub communication_ns: f64,
}

impl MeasuredParts {
    /// The GPU's time: every class one after another.
    pub fn nanos(&self) -> f64 {
        self.linear_ns
            + self.elementwise_ns
            + self.attention.nanos
            + self.head.nanos
            + self.communication_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::LinkSpec;
    use crate::op_profile::Operation;

    fn vidur_dir(set: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../profiles")
            .join(set)
    }

    fn a100() -> MeasuredSet {
        MeasuredSet::load("vidur/a100", &vidur_dir("vidur/a100")).unwrap()
    }

    #[test]
    fn the_a100_set_reads_both_models_and_the_dgx_network() {
        let set = a100();
        assert_eq!(set.ops.gpu.name, "A100-80GB");
        assert_eq!(set.ops.profiles.len(), 2);
        assert_eq!(set.network.as_ref().unwrap().topology, "a100_dgx");
        assert!(set.files.last().unwrap().ends_with("network/a100_dgx.json"));
        // The A40 folder has no network profile beside it.
        let a40 = MeasuredSet::load("vidur/a40", &vidur_dir("vidur/a40")).unwrap();
        assert!(a40.network.is_none());
    }

    #[test]
    fn bad_sets_are_named() {
        let err = MeasuredSet::find("vidur/b200", Path::new("scenarios/gem")).unwrap_err();
        assert!(
            err.contains("no measured profile set `vidur/b200`"),
            "{err}"
        );
        assert!(
            MeasuredSet::find("../etc", Path::new("."))
                .unwrap_err()
                .contains("not a measured set")
        );
        // Two GPUs' profiles in one folder.
        let dir = tempfile::tempdir().unwrap();
        for gpu in ["a100", "h100"] {
            std::fs::copy(
                vidur_dir(&format!("vidur/{gpu}/Llama-2-7b-hf.json")),
                dir.path().join(format!("{gpu}.json")),
            )
            .unwrap();
        }
        let err = MeasuredSet::load("mixed", dir.path()).unwrap_err();
        assert!(
            err.contains("h100.json") && err.contains("one GPU"),
            "{err}"
        );
        let empty = tempfile::tempdir().unwrap();
        let err = MeasuredSet::load("empty", empty.path()).unwrap_err();
        assert!(err.contains("no op profile"), "{err}");
    }

    #[test]
    fn mixtral_on_the_a100_is_priced_from_the_llama3_rows() {
        let set = a100();
        let shape = MoeModelShape::mixtral_8x7b();
        let built = moe(&set, &shape, 1);
        built.profile.check_shape(&shape).unwrap();
        assert_eq!(built.profile.source.kind, SourceKind::MeasuredOperations);
        let sources = built.record.sources();
        for (op, source) in [
            (StepOperation::RoutedExperts, CostSource::Measured),
            (StepOperation::AttentionProjections, CostSource::Measured),
            (StepOperation::Elementwise, CostSource::Measured),
            (StepOperation::Router, CostSource::Analytic),
            (StepOperation::Attention, CostSource::Analytic),
            (StepOperation::Head, CostSource::Analytic),
        ] {
            assert_eq!(sources.get(op), Some(source), "{}", op.as_str());
        }
        assert_eq!(
            sources.get(StepOperation::Mlp),
            None,
            "Mixtral has no shared expert"
        );
        assert_eq!(sources.step_source(), CostSource::Measured);

        // The expert curve is the measured staircase: exact at measured counts (13 and 100 are
        // not measured: 8 -> 16 and 96 -> 104 interpolate).
        let llama3 = &set.ops.profiles[1];
        assert_eq!(llama3.model, "meta-llama/Meta-Llama-3-8B");
        let mlp = |n: u64| -> f64 {
            Operation::MLP
                .iter()
                .map(|&op| llama3.series(op, 1).unwrap().nanos_at(n).unwrap())
                .sum()
        };
        let curve = built
            .profile
            .expert_curve(4096, 14336, shape.weight_dtype)
            .unwrap();
        for n in [1u64, 8, 13, 64, 100, 1024, 32_768] {
            assert!((curve.at(n as f64) - mlp(n)).abs() < 1e-6, "{n} tokens");
        }
        // Past 32,768 tokens: the last measurement times the roofline's growth.
        let roofline = |n| {
            crate::measured_ops::roofline_nanos(
                &set.ops.roofline,
                OpClass::Mlp,
                &moe_layer_shape(&shape, 14336),
                1,
                n,
            )
        };
        let expected = mlp(32_768) * roofline(65_536) / roofline(32_768);
        assert!((curve.at(65_536.0) - expected).abs() < 1e-6);

        // One layer's non-expert prefill over 64 tokens: the measured projections and
        // element-wise kernels, plus the router (2 launches + 4096 x 8 bf16 weights, memory-
        // bound) and the attention kernel's launch (no context in a prefill curve).
        let measured_at = |ops: &[Operation], n: u64| -> f64 {
            ops.iter()
                .map(|&op| llama3.series(op, 1).unwrap().nanos_at(n).unwrap())
                .sum()
        };
        let projections = measured_at(&[Operation::AttnPreProj, Operation::AttnPostProj], 64);
        let elementwise = measured_at(
            &[
                Operation::InputLayernorm,
                Operation::AttnRope,
                Operation::PostAttentionLayernorm,
                Operation::Add,
            ],
            64,
        );
        let r = set.ops.roofline;
        let router =
            2.0 * r.launch_ns + r.op(4096.0 * 8.0 * 2.0, 2.0 * 4096.0 * 8.0 * 64.0).nanos();
        let by_hand = projections + elementwise + router + r.launch_ns;
        let prefill = built.profile.non_expert_prefill.at(64.0);
        assert!((prefill - by_hand).abs() < 1e-6, "{prefill} vs {by_hand}");

        // At tensor parallelism 4 the projections are the TP-4 rows.
        let tp4 = moe(&set, &shape, 4);
        let record = &tp4.record.operations[1];
        assert_eq!(record.operation, StepOperation::AttentionProjections);
        assert!(
            record.priced_from.ends_with("at TP 4"),
            "{}",
            record.priced_from
        );
    }

    #[test]
    fn a_dense_step_from_measured_operations_by_hand() {
        // Llama-3.1-8B has Llama-3-8B's layer: every operation class is measured on the A100.
        let set = a100();
        let shape = DenseModelShape::preset("llama-3.1-8b-instruct").unwrap();
        let link = LinkSpec {
            bandwidth_bytes_per_s: 300e9,
            latency_ns: 10_000.0,
        };
        let step = MeasuredDenseStep::new(&set, &shape, TensorParallel { degree: 1, link }, 2e6);
        let llama3 = &set.ops.profiles[1];
        let layer_ops: f64 = Operation::ALL[1..]
            .iter()
            .map(|&op| llama3.series(op, 1).unwrap().nanos_at(8).unwrap())
            .sum();
        // 8 sequences of 1,000 cached tokens: 8,000 x 2 x 2 B x 8 x 128 = 32.8 MB of KV per
        // layer against 4 x 4096 x 8,000 FLOPs, one kernel group on the A100's rates; the head,
        // 128,256 x 4096 bf16 against 64 padded rows, another.
        let work = StepTokens {
            rows: 8,
            sequences: 8,
            context_tokens: 8_000,
            prefill_square: 0.0,
        };
        let (price, sources) = step.price(&work);
        let r = set.ops.roofline;
        let attention = r.op(8_000.0 * 4096.0, 4.0 * 4096.0 * 8_000.0).nanos();
        let head = r
            .op(128_256.0 * 4096.0 * 2.0, 2.0 * 128_256.0 * 4096.0 * 64.0)
            .nanos();
        let expected = 32.0 * (layer_ops + attention) + head + 2e6;
        assert!(
            (price.nanos - expected).abs() < 1e-3,
            "{} vs {expected}",
            price.nanos
        );
        assert_eq!(sources.get(StepOperation::Mlp), Some(CostSource::Measured));
        assert_eq!(
            sources.get(StepOperation::Attention),
            Some(CostSource::Analytic)
        );
        assert_eq!(sources.get(StepOperation::AllReduce), None);
        assert_eq!(sources.step_source(), CostSource::Measured);

        // At TP 2 each layer adds two all-reduces of 8 x 4096 x 2 B = 64 KiB from the DGX
        // A100 profile (2 GPUs of one node).
        let tp2 = MeasuredDenseStep::new(&set, &shape, TensorParallel { degree: 2, link }, 2e6);
        let (price, sources) = tp2.price(&work);
        let all_reduce = set
            .network
            .as_ref()
            .unwrap()
            .series(crate::op_profile::Collective::AllReduce, 2, 2)
            .unwrap()
            .nanos_at(65_536)
            .unwrap();
        assert!((price.communication_ns - 64.0 * all_reduce).abs() < 1e-6);
        assert_eq!(
            sources.get(StepOperation::AllReduce),
            Some(CostSource::Measured)
        );
    }

    #[test]
    fn ministral_fits_the_attention_and_scales_the_mlp() {
        // Ministral-8B: hidden 4096, 32 heads, 8 KV heads of 128 (Llama-3-8B's attention) but
        // an intermediate of 12288, which no profile holds: scaled from the nearest (Llama-2's
        // 11008, 1.12x smaller, against Llama-3's 14336, 1.17x larger).
        let set = a100();
        let shape = DenseModelShape::preset("ministral-8b-instruct-2410").unwrap();
        let step = MeasuredDenseStep::new(
            &set,
            &shape,
            TensorParallel {
                degree: 1,
                link: LinkSpec::PCIE4_X16,
            },
            0.0,
        );
        let by_operation: Vec<(StepOperation, CostSource, &str)> = step
            .record
            .operations
            .iter()
            .map(|o| (o.operation, o.source, o.priced_from.as_str()))
            .collect();
        assert_eq!(by_operation[0].0, StepOperation::Mlp);
        assert_eq!(by_operation[0].1, CostSource::Scaled);
        assert!(by_operation[0].2.starts_with("meta-llama/Llama-2-7b-hf"));
        assert_eq!(by_operation[1].1, CostSource::Measured);
        assert!(by_operation[1].2.starts_with("meta-llama/Meta-Llama-3-8B"));
        assert_eq!(by_operation[2].1, CostSource::Measured);
    }

    #[test]
    fn op_sources_name_the_step() {
        let mut s = OpSources::default();
        assert_eq!(s.step_source(), CostSource::Analytic);
        s.set(StepOperation::Attention, CostSource::Analytic);
        s.set(StepOperation::RoutedExperts, CostSource::Measured);
        assert_eq!(s.step_source(), CostSource::Measured);
        s.set(StepOperation::Elementwise, CostSource::Scaled);
        assert_eq!(s.step_source(), CostSource::Scaled);
        s.set(StepOperation::AllReduce, CostSource::Analytic);
        assert_eq!(s.step_source(), CostSource::Analytic);
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["routed_experts"], "measured");
        assert_eq!(json["attention"], "analytic");
        assert!(json.get("head").is_none());
    }
}
