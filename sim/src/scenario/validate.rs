//! Stage two of loading: cross-field checks that turn a `ScenarioFile` into a runnable
//! `Scenario`, each failure naming the field it is about.

use super::file::{ArrivalPattern, ExecutionModelKind, Family, ScenarioFile};
use crate::arrivals::{BurstyParams, Trace};
use crate::batch::BatchSelectorConfig;
use crate::caps_server::SchedulerParams;
use crate::cost::profile::Profile;
use crate::execution::{CvModel, ExecutionModel, StragglerModel};
use crate::model_shape::MoeModelShape;
use crate::time::SimDuration;
use crate::workload::TokenDistribution;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A field-level problem found by validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

fn field_error(path: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// A validated, runnable scenario (one sweep cell).
#[derive(Clone, Debug)]
pub struct Scenario {
    pub family: Family,
    pub shape: MoeModelShape,
    pub workload: WorkloadSpec,
    pub arrival: ArrivalSpec,
    pub scheduler: SchedulerParams,
    pub selector: BatchSelectorConfig,
    pub execution: ExecutionSpec,
    pub queue_sample_interval: SimDuration,
    pub per_request_csv: bool,
}

#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub n_requests: u64,
    pub n_topics: usize,
    pub affinity_concentration: f64,
    pub topic_purity: f64,
    pub prediction_noise: f64,
    pub prompt_tokens: TokenDistribution,
    pub output_tokens: TokenDistribution,
}

#[derive(Clone, Debug)]
pub enum ArrivalSpec {
    Poisson {
        rate_per_s: f64,
    },
    Bursty {
        rate_per_s: f64,
        params: BurstyParams,
    },
    Offline,
    Trace {
        trace: Arc<Trace>,
        time_scale: f64,
    },
}

#[derive(Clone, Debug)]
pub enum ExecutionSpec {
    /// The `cv` or `straggler` model, built once per cell from its profile and shared by the runs.
    CostModel(Arc<ExecutionModel>),
    Constant {
        service: SimDuration,
    },
    Exponential {
        mean: SimDuration,
    },
}

/// Files a sweep's cells share, loaded once.
#[derive(Default)]
pub struct LoadCache {
    traces: HashMap<PathBuf, Arc<Trace>>,
    profiles: HashMap<String, Arc<Profile>>,
}

fn positive(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(field_error(
            path,
            format!("must be a positive number, got {value}"),
        ))
    }
}

fn at_least_one(path: &str, value: usize) -> Result<usize, FieldError> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(field_error(path, "must be at least 1, got 0"))
    }
}

fn token_distribution(
    path: &str,
    dist: &TokenDistribution,
) -> Result<TokenDistribution, FieldError> {
    positive(&format!("{path}.median"), dist.median)?;
    if !(dist.sigma.is_finite() && dist.sigma >= 0.0) {
        return Err(field_error(
            &format!("{path}.sigma"),
            format!("must be finite and >= 0, got {}", dist.sigma),
        ));
    }
    at_least_one(&format!("{path}.max"), dist.max as usize)?;
    Ok(dist.clone())
}

/// Validates `file`; relative paths in it are resolved against `base_dir`.
pub fn validate(
    file: &ScenarioFile,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<Scenario, FieldError> {
    if file.seeds.is_empty() {
        return Err(field_error("seeds", "needs at least one seed"));
    }

    let mut shape = MoeModelShape::preset(&file.model.preset)
        .map_err(|e| field_error("model.preset", e.to_string()))?;
    if let Some(n) = file.model.n_layers {
        shape.n_layers = at_least_one("model.n_layers", n)?;
    }
    if let Some(n) = file.model.n_experts {
        shape.n_experts = at_least_one("model.n_experts", n)?;
    }
    if let Some(k) = file.model.top_k {
        shape.top_k = at_least_one("model.top_k", k)?;
    }
    if shape.top_k > shape.n_experts {
        let path = if file.model.top_k.is_some() {
            "model.top_k"
        } else {
            "model.n_experts"
        };
        return Err(field_error(
            path,
            format!(
                "top_k = {} exceeds the number of routed experts ({})",
                shape.top_k, shape.n_experts
            ),
        ));
    }

    let w = &file.workload;
    let workload = WorkloadSpec {
        n_requests: {
            at_least_one(
                "workload.n_requests",
                w.n_requests.min(usize::MAX as u64) as usize,
            )?;
            w.n_requests
        },
        n_topics: at_least_one("workload.n_topics", w.n_topics)?,
        affinity_concentration: positive(
            "workload.affinity_concentration",
            w.affinity_concentration,
        )?,
        topic_purity: if (0.0..=1.0).contains(&w.topic_purity) {
            w.topic_purity
        } else {
            return Err(field_error(
                "workload.topic_purity",
                format!("must lie in [0, 1], got {}", w.topic_purity),
            ));
        },
        prediction_noise: if w.prediction_noise.is_finite() && w.prediction_noise >= 0.0 {
            w.prediction_noise
        } else {
            return Err(field_error(
                "workload.prediction_noise",
                format!("must be finite and >= 0, got {}", w.prediction_noise),
            ));
        },
        prompt_tokens: token_distribution("workload.prompt_tokens", &w.prompt_tokens)?,
        output_tokens: token_distribution("workload.output_tokens", &w.output_tokens)?,
    };

    let a = &file.arrival;
    let rate = |pattern: &str| -> Result<f64, FieldError> {
        let rate = a.rate_per_s.ok_or_else(|| {
            field_error(
                "arrival.rate_per_s",
                format!("is required for pattern \"{pattern}\""),
            )
        })?;
        positive("arrival.rate_per_s", rate)
    };
    let unused = |present: bool, field: &str, pattern: &str| -> Result<(), FieldError> {
        if present {
            Err(field_error(
                &format!("arrival.{field}"),
                format!("does not apply to pattern \"{pattern}\""),
            ))
        } else {
            Ok(())
        }
    };
    let arrival = match a.pattern {
        ArrivalPattern::Poisson => {
            unused(a.bursty.is_some(), "bursty", "poisson")?;
            unused(a.trace.is_some(), "trace", "poisson")?;
            ArrivalSpec::Poisson {
                rate_per_s: rate("poisson")?,
            }
        }
        ArrivalPattern::Bursty => {
            unused(a.trace.is_some(), "trace", "bursty")?;
            let params = a.bursty.unwrap_or_default();
            params
                .validate()
                .map_err(|e| field_error(&format!("arrival.bursty.{}", e.field), e.to_string()))?;
            ArrivalSpec::Bursty {
                rate_per_s: rate("bursty")?,
                params,
            }
        }
        ArrivalPattern::Offline => {
            unused(a.rate_per_s.is_some(), "rate_per_s", "offline")?;
            unused(a.bursty.is_some(), "bursty", "offline")?;
            unused(a.trace.is_some(), "trace", "offline")?;
            ArrivalSpec::Offline
        }
        ArrivalPattern::Trace => {
            unused(a.rate_per_s.is_some(), "rate_per_s", "trace")?;
            unused(a.bursty.is_some(), "bursty", "trace")?;
            let trace_file = a.trace.as_ref().ok_or_else(|| {
                field_error(
                    "arrival.trace",
                    "pattern \"trace\" needs a [arrival.trace] table with a `path`",
                )
            })?;
            let time_scale = positive("arrival.trace.time_scale", trace_file.time_scale)?;
            let path = base_dir.join(&trace_file.path);
            let trace = match cache.traces.get(&path) {
                Some(trace) => trace.clone(),
                None => {
                    let trace = Arc::new(
                        Trace::load(&path)
                            .map_err(|e| field_error("arrival.trace.path", e.to_string()))?,
                    );
                    cache.traces.insert(path, trace.clone());
                    trace
                }
            };
            // Replaying checks what only the trace's contents can tell (its span in simulated time).
            let n = usize::try_from(w.n_requests).unwrap_or(usize::MAX);
            crate::arrivals::TraceReplay::new(
                trace.clone(),
                Some(n),
                time_scale,
                1,
                crate::rng::stream(0, "validate"),
            )
            .map_err(|e| field_error("arrival.trace", e.to_string()))?;
            ArrivalSpec::Trace { trace, time_scale }
        }
    };

    let s = &file.scheduler;
    let max_batch_size = at_least_one("scheduler.max_batch_size", s.max_batch_size)?;
    if s.window_size < max_batch_size {
        return Err(field_error(
            "scheduler.window_size",
            format!(
                "must be at least max_batch_size ({max_batch_size}), got {}",
                s.window_size
            ),
        ));
    }
    let scheduler = SchedulerParams {
        max_batch_size,
        window_size: s.window_size,
        min_batch_trigger: at_least_one("scheduler.min_batch_trigger", s.min_batch_trigger)?,
        scheduling_interval: SimDuration::from_millis_f64(positive(
            "scheduler.scheduling_interval_ms",
            s.scheduling_interval_ms,
        )?),
        seed_with_oldest: s.seed_with_oldest,
    };
    if let BatchSelectorConfig::PowerOfD { samples }
    | BatchSelectorConfig::PowerOfDDot { samples } = &s.selector
    {
        at_least_one("scheduler.selector.samples", *samples)?;
    }

    let execution = validate_execution(file, &shape, base_dir, cache)?;

    let interval = file.metrics.queue_sample_interval_ms;
    if !(interval.is_finite() && interval >= 0.0) {
        return Err(field_error(
            "metrics.queue_sample_interval_ms",
            format!("must be finite and >= 0, got {interval}"),
        ));
    }

    Ok(Scenario {
        family: file.family,
        shape,
        workload,
        arrival,
        scheduler,
        selector: s.selector.clone(),
        execution,
        queue_sample_interval: SimDuration::from_millis_f64(interval),
        per_request_csv: file.output.per_request_csv,
    })
}

fn validate_execution(
    file: &ScenarioFile,
    shape: &MoeModelShape,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<ExecutionSpec, FieldError> {
    let e = &file.execution;
    let not_for = |present: bool, field: &str| -> Result<(), FieldError> {
        if present {
            Err(field_error(
                &format!("execution.{field}"),
                format!("does not apply to model \"{}\"", kind_name(e.model)),
            ))
        } else {
            Ok(())
        }
    };
    let service = || -> Result<SimDuration, FieldError> {
        let ms = e.service_ms.ok_or_else(|| {
            field_error(
                "execution.service_ms",
                format!("is required for model \"{}\"", kind_name(e.model)),
            )
        })?;
        Ok(SimDuration::from_millis_f64(positive(
            "execution.service_ms",
            ms,
        )?))
    };
    match e.model {
        ExecutionModelKind::Constant | ExecutionModelKind::Exponential => {
            not_for(e.profile.is_some(), "profile")?;
            not_for(e.sensitivity.is_some(), "sensitivity")?;
            let duration = service()?;
            Ok(if e.model == ExecutionModelKind::Constant {
                ExecutionSpec::Constant { service: duration }
            } else {
                ExecutionSpec::Exponential { mean: duration }
            })
        }
        ExecutionModelKind::Cv | ExecutionModelKind::Straggler => {
            not_for(e.service_ms.is_some(), "service_ms")?;
            if e.model == ExecutionModelKind::Straggler {
                not_for(e.sensitivity.is_some(), "sensitivity")?;
            }
            if let Some(sensitivity) = e.sensitivity
                && !(sensitivity.is_finite() && sensitivity >= 0.0)
            {
                return Err(field_error(
                    "execution.sensitivity",
                    format!("must be finite and >= 0, got {sensitivity}"),
                ));
            }
            let profile = load_profile(e.profile.as_deref(), &e.gpu, shape, base_dir, cache)?;
            let model = match e.model {
                ExecutionModelKind::Cv => {
                    CvModel::new(&profile, shape, e.sensitivity).map(ExecutionModel::Cv)
                }
                _ => StragglerModel::new(&profile, shape).map(ExecutionModel::Straggler),
            };
            let model = model.map_err(|err| field_error("execution", err.to_string()))?;
            Ok(ExecutionSpec::CostModel(Arc::new(model)))
        }
    }
}

fn kind_name(kind: ExecutionModelKind) -> &'static str {
    match kind {
        ExecutionModelKind::Cv => "cv",
        ExecutionModelKind::Straggler => "straggler",
        ExecutionModelKind::Constant => "constant",
        ExecutionModelKind::Exponential => "exponential",
    }
}

fn load_profile(
    path: Option<&str>,
    gpu: &str,
    shape: &MoeModelShape,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<Arc<Profile>, FieldError> {
    // The whole shape is part of the key: a sweep over layers, experts or dtype needs its own profile.
    let shape_key = serde_json::to_string(shape).expect("shapes serialize");
    let key = match path {
        Some(p) => format!("file:{}:{shape_key}", base_dir.join(p).display()),
        None => format!("analytic:{gpu}:{shape_key}"),
    };
    if let Some(profile) = cache.profiles.get(&key) {
        return Ok(profile.clone());
    }
    let profile = match path {
        Some(p) => {
            let profile = Profile::load(&base_dir.join(p))
                .map_err(|e| field_error("execution.profile", e.to_string()))?;
            profile.check_shape(shape).map_err(|e| {
                field_error(
                    "execution.profile",
                    format!("{}: {e}", base_dir.join(p).display()),
                )
            })?;
            profile
        }
        None => {
            let spec = crate::cost::gpu::GpuSpec::by_name(gpu)
                .map_err(|e| field_error("execution.gpu", e.to_string()))?;
            crate::cost::roofline::analytic_profile(&spec, shape)
        }
    };
    let profile = Arc::new(profile);
    cache.profiles.insert(key, profile.clone());
    Ok(profile)
}
