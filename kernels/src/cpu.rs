//! The `cpu` backend: runs the CPU references (single-threaded, deterministic results) and
//! times them with the monotonic wall clock. As the CUDA backend does with the GPU's L2, the
//! timed runs rotate over copies of the workload's weights whose total exceeds twice the
//! core's L2 cache (at most [`MAX_CPU_WEIGHT_COPIES`]), so no run finds its weights in the
//! caches closest to the core: a layer of many experts streams its weights from further out,
//! and one expert timed alone must too, or the two would not add up.

use crate::backend::{Backend, BackendError, BackendKind, DeviceInfo, Output, Workload};
use crate::decode::decode_step_cpu;
use crate::moe::moe_layer_cpu;
use crate::reroute::{RerouteVariant, reroute_fused_cpu, reroute_unfused_cpu};
use std::sync::Arc;
use std::time::Instant;

/// The most weight copies a timed workload rotates over on the CPU.
pub const MAX_CPU_WEIGHT_COPIES: usize = 256;

/// The L2 cache of core 0 from sysfs (`/sys/devices/system/cpu/cpu0/cache/index*/`), or 1 MiB
/// when it cannot be read.
fn l2_bytes() -> usize {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let read = |index: usize, file: &str| {
        std::fs::read_to_string(dir.join(format!("index{index}")).join(file)).ok()
    };
    (0..8)
        .find(|&i| read(i, "level").is_some_and(|l| l.trim() == "2"))
        .and_then(|i| read(i, "size"))
        .and_then(|size| cache_size_bytes(size.trim()))
        .unwrap_or(1 << 20)
}

/// Bytes of a sysfs cache size such as `1024K` or `2M`.
fn cache_size_bytes(text: &str) -> Option<usize> {
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let value: usize = digits.parse().ok()?;
    match unit {
        "K" => Some(value << 10),
        "M" => Some(value << 20),
        "G" => Some(value << 30),
        _ => None,
    }
}

/// The weights a workload reads, in a fixed order (none for rerouting).
fn weights_of(workload: &Workload) -> Vec<crate::Weights> {
    match workload {
        Workload::Moe(p) => vec![p.w13.clone(), p.w2.clone()],
        Workload::Decode(p) => vec![p.w.clone()],
        Workload::Reroute(..) => vec![],
    }
}

/// Points `workload` at `weights` (in the order of [`weights_of`]).
fn set_weights(workload: &mut Workload, weights: &[crate::Weights]) {
    match workload {
        Workload::Moe(p) => {
            p.w13 = weights[0].clone();
            p.w2 = weights[1].clone();
        }
        Workload::Decode(p) => p.w = weights[0].clone(),
        Workload::Reroute(..) => {}
    }
}

/// The most weight allocations whose rotation copies the backend keeps.
const KEPT_ROTATIONS: usize = 32;

/// Copies of weights of `bytes` whose total exceeds twice an L2 of `l2` bytes, between 1 and
/// [`MAX_CPU_WEIGHT_COPIES`].
fn cpu_weight_copies(bytes: usize, l2: usize) -> usize {
    if bytes == 0 {
        return 1;
    }
    (2 * l2).div_ceil(bytes).clamp(1, MAX_CPU_WEIGHT_COPIES)
}

/// The CPU reference backend.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    info: DeviceInfo,
    l2_bytes: usize,
    /// Copies of recently timed weights (the original first), most recent last: a live run
    /// times the same layers' weights again and again.
    rotations: Vec<Vec<crate::Weights>>,
}

/// The CPU's model name from /proc/cpuinfo, or the architecture when it cannot be read.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("{} CPU", std::env::consts::ARCH))
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend {
            info: DeviceInfo {
                backend: BackendKind::Cpu,
                name: cpu_name(),
                compute_capability: None,
                driver: None,
                timing: format!(
                    "wall clock, the runs rotating over up to {MAX_CPU_WEIGHT_COPIES} weight \
                     copies that exceed twice the {} KiB L2 cache",
                    l2_bytes() >> 10
                ),
                libraries: None,
            },
            l2_bytes: l2_bytes(),
            rotations: Vec::new(),
        }
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, workload: &Workload) -> Result<Output, BackendError> {
        Ok(match workload {
            Workload::Moe(p) => Output::Moe(moe_layer_cpu(p)?),
            Workload::Reroute(p, RerouteVariant::Fused) => Output::Reroute(reroute_fused_cpu(p)?),
            Workload::Reroute(p, RerouteVariant::Unfused) => {
                Output::Reroute(reroute_unfused_cpu(p)?.rerouted)
            }
            Workload::Decode(p) => Output::Decode(decode_step_cpu(p)?),
        })
    }

    fn time(
        &mut self,
        workload: &Workload,
        warmup: usize,
        repetitions: usize,
    ) -> Result<Vec<f64>, BackendError> {
        if repetitions == 0 {
            return Err(BackendError::Timing(
                "repetitions must be at least 1".into(),
            ));
        }
        workload.validate()?;
        let weights = weights_of(workload);
        let bytes: usize = weights.iter().map(|w| w.len() * 2).sum();
        let copies = cpu_weight_copies(bytes, self.l2_bytes);
        // Each weight's copies (the original first), kept for the next time it is timed.
        let mut per_weight = Vec::with_capacity(weights.len());
        for w in &weights {
            let at = self.rotations.iter().position(|r| Arc::ptr_eq(&r[0], w));
            let mut rotation = match at {
                Some(i) => self.rotations.remove(i),
                None => vec![w.clone()],
            };
            while rotation.len() < copies {
                rotation.push(Arc::from(&w[..]));
            }
            per_weight.push(rotation.clone());
            self.rotations.push(rotation);
        }
        if self.rotations.len() > KEPT_ROTATIONS {
            self.rotations
                .drain(..self.rotations.len() - KEPT_ROTATIONS);
        }
        let mut work = workload.clone();
        let mut run = |i: usize| -> Result<f64, BackendError> {
            let copy: Vec<crate::Weights> =
                per_weight.iter().map(|r| r[i % copies].clone()).collect();
            set_weights(&mut work, &copy);
            let start = Instant::now();
            std::hint::black_box(self.run(&work)?);
            Ok(start.elapsed().as_nanos() as f64)
        };
        for i in 0..warmup {
            run(i)?;
        }
        (warmup..warmup + repetitions).map(run).collect()
    }

    fn copy_to_device(&mut self, host: &[u8]) -> Result<f64, BackendError> {
        let start = Instant::now();
        let device = std::hint::black_box(host.to_vec());
        let nanos = start.elapsed().as_nanos() as f64;
        drop(device);
        Ok(nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reroute::RerouteProblem;

    #[test]
    fn times_every_repetition_and_rejects_bad_input() {
        let mut cpu = CpuBackend::new();
        assert_eq!(cpu.device().backend, BackendKind::Cpu);
        let p = RerouteProblem::random(100, 16, 2, 3, 4, 1);
        let w = Workload::Reroute(p.clone(), RerouteVariant::Unfused);
        let samples = cpu.time(&w, 1, 5).unwrap();
        assert_eq!(samples.len(), 5);
        assert!(samples.iter().all(|s| *s > 0.0));
        assert!(cpu.time(&w, 0, 0).is_err());
        let mut bad = p;
        bad.adapter_ids[0] = 99;
        let error = cpu
            .time(&Workload::Reroute(bad, RerouteVariant::Fused), 0, 1)
            .unwrap_err();
        assert!(matches!(error, BackendError::Input(_)), "{error}");
    }

    #[test]
    fn timed_runs_rotate_over_weight_copies_beyond_twice_the_l2() {
        assert_eq!(cache_size_bytes("1024K"), Some(1 << 20));
        assert_eq!(cache_size_bytes("2M"), Some(2 << 20));
        assert_eq!(cache_size_bytes("big"), None);
        // A 12 KiB expert against a 1 MiB L2: 171 copies (2,052 KiB, over 2 MiB).
        assert_eq!(cpu_weight_copies(12 << 10, 1 << 20), 171);
        assert_eq!(cpu_weight_copies(100 << 20, 1 << 20), 1);
        assert_eq!(cpu_weight_copies(1, 1 << 20), MAX_CPU_WEIGHT_COPIES);
        assert_eq!(cpu_weight_copies(0, 1 << 20), 1);
        // The rotation is kept for the next timing of the same weights, and its copies hold
        // the same values in their own allocations.
        let mut cpu = CpuBackend::new();
        let p = crate::decode::DecodeProblem::random(
            crate::decode::DecodeShape {
                hidden: 8,
                out_features: 4,
                n_heads: 1,
                n_kv_heads: 1,
                head_dim: 8,
            },
            4,
            2,
            1,
            1,
            false,
        );
        let w = Workload::Decode(p.clone());
        cpu.time(&w, 1, 3).unwrap();
        cpu.time(&w, 0, 2).unwrap();
        assert_eq!(cpu.rotations.len(), 1);
        let rotation = &cpu.rotations[0];
        assert_eq!(rotation.len(), cpu_weight_copies(4 * 8 * 2, cpu.l2_bytes));
        assert!(Arc::ptr_eq(&rotation[0], &p.w));
        assert!(
            rotation[1..]
                .iter()
                .all(|c| !Arc::ptr_eq(c, &p.w) && c[..] == p.w[..])
        );
    }

    #[test]
    fn a_device_copy_takes_time_and_leaves_the_host_bytes_alone() {
        let mut cpu = CpuBackend::new();
        let host: Vec<u8> = (0..1 << 16).map(|i| (i % 251) as u8).collect();
        assert!(cpu.copy_to_device(&host).unwrap() > 0.0);
        assert_eq!(host[1000], (1000 % 251) as u8);
    }
}
