//! vLLM-Ascend (Merged): each adapter merged into its own full copy of the base model, served by
//! its own instance; the copies share one budget (the memory experiment) or each gets its own
//! devices (the serving baseline, requests sent to their adapter's instance).

use expertsim_serving::cost::shape::MlaMoeShape;
use expertsim_serving::policies::memory::adapters::EsftAdapter;
use expertsim_serving::policies::memory::device::DeviceMemory;
use expertsim_serving::policies::memory::device::KvCapacity;
use expertsim_serving::policies::memory::{
    AdapterMemory, AdapterMemoryError, InstancePlan, MemoryPlan, MemoryReport,
    adapter_expert_bytes, check_inputs, mean_sparsity,
};

/// The merged manager.
#[derive(Clone, Debug, Default)]
pub struct Merged {
    pub separate_devices: bool,
    pub utilization: Option<f64>,
}

const KIND: &str = "merged";

impl AdapterMemory for Merged {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn plan(
        &mut self,
        shape: &MlaMoeShape,
        device: &DeviceMemory,
        adapters: &[EsftAdapter],
    ) -> Result<MemoryPlan, AdapterMemoryError> {
        let mut device = device.clone();
        if let Some(utilization) = self.utilization {
            device.utilization = utilization;
        }
        check_inputs(shape, &device, adapters)?;
        if adapters.is_empty() {
            return Err(AdapterMemoryError::Config {
                manager: KIND,
                problem: "needs at least one adapter to merge".into(),
            });
        }
        let copy = shape.weight_bytes();
        let n = adapters.len() as u64;
        let kv_per_token = shape.kv_bytes_per_token();
        let instances: Vec<InstancePlan> = if self.separate_devices {
            (0..adapters.len())
                .map(|index| InstancePlan {
                    adapters: vec![index],
                    reroutes: false,
                    adapter_experts: true,
                    n_devices: device.n_devices,
                    weight_bytes: copy,
                    kv: device.kv_capacity(copy, kv_per_token),
                })
                .collect()
        } else {
            // all copies in one budget; the KV left is split evenly between the instances
            let shared = device.kv_capacity(n * copy, kv_per_token);
            let block = device.kv_block_tokens;
            (0..adapters.len())
                .map(|index| InstancePlan {
                    adapters: vec![index],
                    reroutes: false,
                    adapter_experts: true,
                    n_devices: device.n_devices,
                    weight_bytes: copy,
                    kv: KvCapacity {
                        kv_bytes: shared.kv_bytes / n,
                        kv_tokens: shared.kv_tokens / block / n * block,
                        out_of_memory: shared.out_of_memory,
                    },
                })
                .collect()
        };
        let kv_bytes = instances.iter().map(|i| i.kv.kv_bytes).sum();
        let kv_tokens = instances.iter().map(|i| i.kv.kv_tokens).sum();
        let out_of_memory = instances.iter().any(|i| i.kv.out_of_memory);
        let report = MemoryReport {
            n_adapters: adapters.len(),
            weight_bytes: n * copy,
            base_weight_bytes: copy,
            adapter_expert_bytes: adapter_expert_bytes(shape, adapters),
            adapter_allocated_bytes: (n - 1) * copy,
            padding_waste_bytes: 0,
            fragmentation_factor: 1.0,
            sparsity_factor: mean_sparsity(adapters),
            kv_bytes,
            kv_capacity_tokens: kv_tokens,
            out_of_memory,
            mapped_pages: 0,
            shared_pages: 0,
        };
        Ok(MemoryPlan { instances, report })
    }
}
