//! ExpertWeave-Padding (Section 3.1): each MoE layer holds one contiguous tensor of
//! base + A_max x e_max experts, every adapter padded to e_max slots per layer, all of it
//! physically allocated.

use expertsim_serving::cost::shape::MlaMoeShape;
use expertsim_serving::policies::memory::adapters::EsftAdapter;
use expertsim_serving::policies::memory::device::DeviceMemory;
use expertsim_serving::policies::memory::{
    AdapterMemory, AdapterMemoryError, InstancePlan, MemoryPlan, MemoryReport,
    adapter_expert_bytes, check_inputs, mean_sparsity, slot_geometry,
};

use super::virtual_weight_tensor::expert_map_bytes;

/// The padding manager.
#[derive(Clone, Debug, Default)]
pub struct Padding {
    pub e_max: Option<u64>,
    pub a_max: Option<u64>,
}

const KIND: &str = "padding";

impl AdapterMemory for Padding {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn plan(
        &mut self,
        shape: &MlaMoeShape,
        device: &DeviceMemory,
        adapters: &[EsftAdapter],
    ) -> Result<MemoryPlan, AdapterMemoryError> {
        check_inputs(shape, device, adapters)?;
        let (a_max, e_max) = slot_geometry(KIND, adapters, self.a_max, self.e_max)?;
        let layers = shape.n_moe_layers();
        let allocated = layers * a_max * e_max * shape.expert_bytes();
        let weight_bytes = shape.weight_bytes() + allocated + expert_map_bytes(shape, a_max);
        let kv = device.kv_capacity(weight_bytes, shape.kv_bytes_per_token());
        let needed = adapter_expert_bytes(shape, adapters);
        let report = MemoryReport {
            n_adapters: adapters.len(),
            weight_bytes,
            base_weight_bytes: shape.weight_bytes(),
            adapter_expert_bytes: needed,
            adapter_allocated_bytes: allocated,
            padding_waste_bytes: allocated - needed,
            fragmentation_factor: if needed == 0 {
                1.0
            } else {
                allocated as f64 / needed as f64
            },
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
                reroutes: true,
                adapter_experts: true,
                n_devices: device.n_devices,
                weight_bytes,
                kv,
            }],
            report,
        })
    }
}
