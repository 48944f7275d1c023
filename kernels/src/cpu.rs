//! The `cpu` backend: runs the CPU references (single-threaded, deterministic results) and
//! times them with the monotonic wall clock.

use crate::backend::{Backend, BackendError, BackendKind, DeviceInfo, Output, Workload};
use crate::decode::decode_step_cpu;
use crate::moe::moe_layer_cpu;
use crate::reroute::{RerouteVariant, reroute_fused_cpu, reroute_unfused_cpu};
use std::time::Instant;

/// The CPU reference backend.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    info: DeviceInfo,
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
                timing: "wall clock".into(),
                libraries: None,
            },
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
        for _ in 0..warmup {
            std::hint::black_box(self.run(workload)?);
        }
        let mut samples = Vec::with_capacity(repetitions);
        for _ in 0..repetitions {
            let start = Instant::now();
            std::hint::black_box(self.run(workload)?);
            samples.push(start.elapsed().as_nanos() as f64);
        }
        Ok(samples)
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
    fn a_device_copy_takes_time_and_leaves_the_host_bytes_alone() {
        let mut cpu = CpuBackend::new();
        let host: Vec<u8> = (0..1 << 16).map(|i| (i % 251) as u8).collect();
        assert!(cpu.copy_to_device(&host).unwrap() > 0.0);
        assert_eq!(host[1000], (1000 % 251) as u8);
    }
}
