//! vLLM-Ascend (Base-Only): the base model alone on the budget; every request, whatever its
//! adapter, is answered by the base experts (the latency and throughput reference).

use expertsim_serving::cost::shape::MlaMoeShape;
use expertsim_serving::policies::memory::adapters::EsftAdapter;
use expertsim_serving::policies::memory::device::DeviceMemory;
use expertsim_serving::policies::memory::{
    AdapterMemory, AdapterMemoryError, InstancePlan, MemoryPlan, MemoryReport, check_inputs,
    mean_sparsity,
};

/// The base-only manager.
#[derive(Clone, Debug, Default)]
pub struct BaseOnly;

impl AdapterMemory for BaseOnly {
    fn kind(&self) -> &'static str {
        "base_only"
    }

    fn plan(
        &mut self,
        shape: &MlaMoeShape,
        device: &DeviceMemory,
        adapters: &[EsftAdapter],
    ) -> Result<MemoryPlan, AdapterMemoryError> {
        check_inputs(shape, device, adapters)?;
        let weight_bytes = shape.weight_bytes();
        let kv = device.kv_capacity(weight_bytes, shape.kv_bytes_per_token());
        let report = MemoryReport {
            n_adapters: adapters.len(),
            weight_bytes,
            base_weight_bytes: weight_bytes,
            adapter_expert_bytes: 0,
            adapter_allocated_bytes: 0,
            padding_waste_bytes: 0,
            fragmentation_factor: 1.0,
            sparsity_factor: mean_sparsity(adapters),
            kv_bytes: kv.kv_bytes,
            kv_capacity_tokens: kv.kv_tokens,
            out_of_memory: kv.out_of_memory,
            mapped_pages: 0,
            shared_pages: 0,
        };
        Ok(MemoryPlan {
            instances: vec![InstancePlan {
                adapters: (0..adapters.len()).collect(),
                reroutes: false,
                adapter_experts: false,
                n_devices: device.n_devices,
                weight_bytes,
                kv,
            }],
            report,
        })
    }
}
