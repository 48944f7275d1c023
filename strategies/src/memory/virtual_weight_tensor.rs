//! ExpertWeave's virtual weight tensor (Section 4.2): per MoE layer a reserved virtual range
//! sized base + A_max x e_max experts, physical pages of a fixed size (2 MiB by default) taken
//! from a per-device pool and mapped only under loaded experts, a partly used page shared with
//! the neighbouring range through a reference count, and pages unmapped and returned to the
//! pool for reuse when an adapter is evicted.

use std::collections::BTreeMap;

use expertsim_serving::cost::shape::MlaMoeShape;
use expertsim_serving::policies::memory::adapters::EsftAdapter;
use expertsim_serving::policies::memory::device::DeviceMemory;
use expertsim_serving::policies::memory::{
    AdapterMemory, AdapterMemoryError, InstancePlan, MemoryPlan, MemoryReport,
    adapter_expert_bytes, check_inputs, mean_sparsity, slot_geometry,
};

/// A physical page handed out by the pool (`aclrtMallocPhysical` / `cuMemCreate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageId(pub u64);

/// Allocator failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VwtError {
    /// Every page the pool may create is in use.
    PoolExhausted { capacity_pages: u64 },
    /// The range is loaded already.
    AlreadyLoaded { owner: RangeOwner },
    /// The range is not loaded.
    NotLoaded { owner: RangeOwner },
    /// More experts than the range has slots.
    TooManyExperts {
        owner: RangeOwner,
        n_experts: u64,
        slots: u64,
    },
    /// An adapter slot beyond a_max.
    NoSuchSlot { slot: u64, a_max: u64 },
    /// A zero page or expert size.
    ZeroSize,
}

impl std::fmt::Display for VwtError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VwtError::PoolExhausted { capacity_pages } => write!(
                f,
                "physical page pool exhausted: all {capacity_pages} pages are in use"
            ),
            VwtError::AlreadyLoaded { owner } => write!(f, "range {owner:?} is already loaded"),
            VwtError::NotLoaded { owner } => write!(f, "range {owner:?} is not loaded"),
            VwtError::TooManyExperts {
                owner,
                n_experts,
                slots,
            } => write!(
                f,
                "range {owner:?}: {n_experts} experts exceed its {slots} slots"
            ),
            VwtError::NoSuchSlot { slot, a_max } => {
                write!(f, "adapter slot {slot} is not below a_max = {a_max}")
            }
            VwtError::ZeroSize => write!(f, "page_bytes and expert_bytes must be positive"),
        }
    }
}

impl std::error::Error for VwtError {}

/// The physical memory pool of one device: pages created from the device runtime on demand up
/// to a capacity, handed to tensors, taken back on unmap and reused (most recently freed first)
/// before any new page is created; `reclaim` gives idle pages back to the runtime.
#[derive(Clone, Debug)]
pub struct PhysicalPagePool {
    page_bytes: u64,
    capacity_pages: u64,
    created: u64,
    next_id: u64,
    free: Vec<PageId>,
}

impl PhysicalPagePool {
    /// A pool that may create up to `capacity_pages` pages of `page_bytes`.
    pub fn new(page_bytes: u64, capacity_pages: u64) -> Self {
        PhysicalPagePool {
            page_bytes,
            capacity_pages,
            created: 0,
            next_id: 0,
            free: Vec::new(),
        }
    }

    /// Page size in bytes.
    pub fn page_bytes(&self) -> u64 {
        self.page_bytes
    }

    /// A free page, reusing a released one before creating one.
    pub fn acquire(&mut self) -> Result<PageId, VwtError> {
        if let Some(page) = self.free.pop() {
            return Ok(page);
        }
        if self.created >= self.capacity_pages {
            return Err(VwtError::PoolExhausted {
                capacity_pages: self.capacity_pages,
            });
        }
        self.created += 1;
        self.next_id += 1;
        Ok(PageId(self.next_id - 1))
    }

    /// Takes back an unmapped page.
    pub fn release(&mut self, page: PageId) {
        assert!(
            !self.free.contains(&page),
            "page {page:?} released twice to the pool"
        );
        self.free.push(page);
    }

    /// Returns every idle page to the device runtime; the number returned.
    pub fn reclaim(&mut self) -> u64 {
        let n = self.free.len() as u64;
        self.created -= n;
        self.free.clear();
        n
    }

    /// Pages currently created from the device (mapped or idle in the pool).
    pub fn created_pages(&self) -> u64 {
        self.created
    }

    /// Pages idle in the pool.
    pub fn free_pages(&self) -> u64 {
        self.free.len() as u64
    }

    /// Pages handed out and not yet released.
    pub fn in_use_pages(&self) -> u64 {
        self.created - self.free_pages()
    }
}

/// Which range of a layer's tensor: the base model's experts, or the slot of one adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RangeOwner {
    Base,
    Adapter(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MappedPage {
    page: PageId,
    references: u32,
}

/// One MoE layer's virtual weight tensor: a reserved virtual range of
/// (n_base + a_max x e_max) experts, with physical pages mapped under loaded ranges only.
/// Virtual page `v` covers bytes [v x page, (v + 1) x page) of the range (the reservation is
/// page-aligned); a mapped page counts the loaded ranges that touch it.
#[derive(Clone, Debug)]
pub struct VirtualWeightTensor {
    page_bytes: u64,
    expert_bytes: u64,
    n_base_experts: u64,
    a_max: u64,
    e_max: u64,
    mapped: BTreeMap<u64, MappedPage>,
    loaded: BTreeMap<RangeOwner, u64>,
}

impl VirtualWeightTensor {
    /// Reserves the virtual range (`aclrtReserveMemAddress`); nothing is mapped yet.
    pub fn reserve(
        page_bytes: u64,
        expert_bytes: u64,
        n_base_experts: u64,
        a_max: u64,
        e_max: u64,
    ) -> Result<Self, VwtError> {
        if page_bytes == 0 || expert_bytes == 0 {
            return Err(VwtError::ZeroSize);
        }
        Ok(VirtualWeightTensor {
            page_bytes,
            expert_bytes,
            n_base_experts,
            a_max,
            e_max,
            mapped: BTreeMap::new(),
            loaded: BTreeMap::new(),
        })
    }

    /// Bytes of the reserved virtual range, rounded up to whole pages.
    pub fn reserved_bytes(&self) -> u64 {
        let bytes = (self.n_base_experts + self.a_max * self.e_max) * self.expert_bytes;
        bytes.div_ceil(self.page_bytes) * self.page_bytes
    }

    /// First expert slot of a range and how many slots it has.
    fn slots(&self, owner: RangeOwner) -> Result<(u64, u64), VwtError> {
        match owner {
            RangeOwner::Base => Ok((0, self.n_base_experts)),
            RangeOwner::Adapter(slot) if slot < self.a_max => {
                Ok((self.n_base_experts + slot * self.e_max, self.e_max))
            }
            RangeOwner::Adapter(slot) => Err(VwtError::NoSuchSlot {
                slot,
                a_max: self.a_max,
            }),
        }
    }

    /// Byte span [start, end) of `n_experts` loaded at the start of `owner`'s slots
    /// (start_addr = base_addr + offset x expert bytes, as the paper computes it).
    pub fn byte_span(&self, owner: RangeOwner, n_experts: u64) -> Result<(u64, u64), VwtError> {
        let (first, slots) = self.slots(owner)?;
        if n_experts > slots {
            return Err(VwtError::TooManyExperts {
                owner,
                n_experts,
                slots,
            });
        }
        let start = first * self.expert_bytes;
        Ok((start, start + n_experts * self.expert_bytes))
    }

    /// Virtual pages a byte span touches (empty for an empty span).
    fn page_span(&self, (start, end): (u64, u64)) -> std::ops::Range<u64> {
        if start == end {
            return 0..0;
        }
        start / self.page_bytes..(end - 1) / self.page_bytes + 1
    }

    /// Loads `n_experts` consecutive experts into `owner`'s range: every page they touch is
    /// mapped (a page already mapped for a neighbour gains a reference instead of a new page).
    /// On pool exhaustion nothing changes.
    pub fn load(
        &mut self,
        owner: RangeOwner,
        n_experts: u64,
        pool: &mut PhysicalPagePool,
    ) -> Result<(), VwtError> {
        if self.loaded.contains_key(&owner) {
            return Err(VwtError::AlreadyLoaded { owner });
        }
        let pages = self.page_span(self.byte_span(owner, n_experts)?);
        let mut fresh: Vec<u64> = Vec::new();
        for virtual_page in pages.clone() {
            if self.mapped.contains_key(&virtual_page) {
                continue;
            }
            match pool.acquire() {
                Ok(page) => {
                    self.mapped.insert(
                        virtual_page,
                        MappedPage {
                            page,
                            references: 0,
                        },
                    );
                    fresh.push(virtual_page);
                }
                Err(error) => {
                    for virtual_page in fresh {
                        let entry = self.mapped.remove(&virtual_page).expect("just mapped");
                        pool.release(entry.page);
                    }
                    return Err(error);
                }
            }
        }
        for virtual_page in pages {
            self.mapped
                .get_mut(&virtual_page)
                .expect("mapped above")
                .references += 1;
        }
        self.loaded.insert(owner, n_experts);
        Ok(())
    }

    /// Evicts `owner`'s range: its pages lose a reference, and those left with none are
    /// unmapped (`aclrtUnmapMem`) and released to the pool.
    pub fn evict(
        &mut self,
        owner: RangeOwner,
        pool: &mut PhysicalPagePool,
    ) -> Result<(), VwtError> {
        let n_experts = self
            .loaded
            .remove(&owner)
            .ok_or(VwtError::NotLoaded { owner })?;
        let pages = self.page_span(self.byte_span(owner, n_experts)?);
        for virtual_page in pages {
            let entry = self
                .mapped
                .get_mut(&virtual_page)
                .expect("a loaded range's pages are mapped");
            entry.references -= 1;
            if entry.references == 0 {
                let page = entry.page;
                self.mapped.remove(&virtual_page);
                pool.release(page);
            }
        }
        Ok(())
    }

    /// Pages mapped.
    pub fn mapped_pages(&self) -> u64 {
        self.mapped.len() as u64
    }

    /// Mapped pages referenced by more than one range (sub-page sharing).
    pub fn shared_pages(&self) -> u64 {
        self.mapped.values().filter(|m| m.references > 1).count() as u64
    }

    /// The mapped virtual pages with their reference counts, in address order.
    pub fn mapping(&self) -> Vec<(u64, PageId, u32)> {
        self.mapped
            .iter()
            .map(|(&v, m)| (v, m.page, m.references))
            .collect()
    }

    /// The loaded ranges and their expert counts.
    pub fn loaded(&self) -> Vec<(RangeOwner, u64)> {
        self.loaded.iter().map(|(&o, &n)| (o, n)).collect()
    }
}

/// The virtual-weight-tensor manager: one pool for the instance's budget, one tensor per MoE
/// layer; the base experts load at start, then each adapter into its slot in every layer.
#[derive(Clone, Debug)]
pub struct VirtualWeightTensorMemory {
    pub page_bytes: u64,
    pub e_max: Option<u64>,
    pub a_max: Option<u64>,
}

const KIND: &str = "virtual_weight_tensor";

impl AdapterMemory for VirtualWeightTensorMemory {
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
        if self.page_bytes == 0 {
            return Err(AdapterMemoryError::Config {
                manager: KIND,
                problem: "page_bytes must be positive".into(),
            });
        }
        let (a_max, e_max) = slot_geometry(KIND, adapters, self.a_max, self.e_max)?;
        let expert_map_bytes = expert_map_bytes(shape, a_max);
        let fixed_bytes = shape.non_routed_bytes() + expert_map_bytes;
        let pool_capacity = device.usable_bytes().saturating_sub(fixed_bytes) / self.page_bytes;
        let mut pool = PhysicalPagePool::new(self.page_bytes, pool_capacity);
        let mut out_of_memory = false;
        let mut base_pages = 0;
        let mut mapped_pages = 0;
        let mut shared_pages = 0;
        for layer in 0..shape.n_moe_layers() as usize {
            let mut tensor = VirtualWeightTensor::reserve(
                self.page_bytes,
                shape.expert_bytes(),
                shape.n_routed_experts,
                a_max,
                e_max,
            )
            .map_err(|e| config_error(e.to_string()))?;
            match tensor.load(RangeOwner::Base, shape.n_routed_experts, &mut pool) {
                Ok(()) => {}
                Err(VwtError::PoolExhausted { .. }) => out_of_memory = true,
                Err(other) => return Err(config_error(other.to_string())),
            }
            base_pages += tensor.mapped_pages();
            for (slot, adapter) in adapters.iter().enumerate() {
                let n = adapter.experts[layer].len() as u64;
                match tensor.load(RangeOwner::Adapter(slot as u64), n, &mut pool) {
                    Ok(()) => {}
                    Err(VwtError::PoolExhausted { .. }) => out_of_memory = true,
                    Err(other) => return Err(config_error(other.to_string())),
                }
            }
            mapped_pages += tensor.mapped_pages();
            shared_pages += tensor.shared_pages();
        }
        let page_bytes = self.page_bytes;
        let weight_bytes = fixed_bytes + pool.created_pages() * page_bytes;
        let mut kv = device.kv_capacity(weight_bytes, shape.kv_bytes_per_token());
        kv.out_of_memory |= out_of_memory;
        if out_of_memory {
            kv.kv_tokens = 0;
        }
        let needed = adapter_expert_bytes(shape, adapters);
        let allocated = (mapped_pages - base_pages) * page_bytes;
        let report = MemoryReport {
            n_adapters: adapters.len(),
            weight_bytes,
            base_weight_bytes: shape.weight_bytes(),
            adapter_expert_bytes: needed,
            adapter_allocated_bytes: allocated,
            padding_waste_bytes: allocated.saturating_sub(needed),
            fragmentation_factor: if needed == 0 {
                1.0
            } else {
                allocated as f64 / needed as f64
            },
            sparsity_factor: mean_sparsity(adapters),
            kv_bytes: kv.kv_bytes,
            kv_capacity_tokens: kv.kv_tokens,
            out_of_memory: kv.out_of_memory,
            mapped_pages,
            shared_pages,
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

fn config_error(problem: String) -> AdapterMemoryError {
    AdapterMemoryError::Config {
        manager: KIND,
        problem,
    }
}

/// The ESFT expert map of every MoE layer: L x a_max x n_experts int32 entries.
pub fn expert_map_bytes(shape: &MlaMoeShape, a_max: u64) -> u64 {
    shape.n_moe_layers() * a_max * shape.n_routed_experts * 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;
    use std::collections::BTreeSet;

    const MIB: u64 = 1 << 20;

    /// Figure 3's geometry: experts of 1.5 pages, three base experts, two slots per adapter.
    fn figure3() -> (VirtualWeightTensor, PhysicalPagePool) {
        let tensor = VirtualWeightTensor::reserve(2 * MIB, 3 * MIB, 3, 3, 2).unwrap();
        (tensor, PhysicalPagePool::new(2 * MIB, 100))
    }

    #[test]
    fn figure3_maps_three_pages_for_two_experts_and_shares_the_boundary_page() {
        let (mut tensor, mut pool) = figure3();
        tensor.load(RangeOwner::Base, 3, &mut pool).unwrap();
        // 3 experts x 1.5 pages = 4.5 pages: pages 0..=4
        assert_eq!(tensor.mapped_pages(), 5);
        tensor.load(RangeOwner::Adapter(0), 2, &mut pool).unwrap();
        // adapter 0 spans bytes [9, 15) MiB = pages 4..=7; page 4 is shared with the base
        assert_eq!(tensor.mapped_pages(), 8);
        assert_eq!(tensor.shared_pages(), 1);
        assert_eq!(pool.in_use_pages(), 8);
        tensor.load(RangeOwner::Adapter(1), 1, &mut pool).unwrap();
        // adapter 1 starts at 15 MiB, mid-page 7 (not page aligned): shares it with adapter 0
        assert_eq!(tensor.mapped_pages(), 9);
        assert_eq!(tensor.shared_pages(), 2);
        // evicting adapter 0 keeps the pages its neighbours still use
        tensor.evict(RangeOwner::Adapter(0), &mut pool).unwrap();
        let mapped: Vec<u64> = tensor.mapping().iter().map(|m| m.0).collect();
        assert_eq!(mapped, vec![0, 1, 2, 3, 4, 7, 8]);
        assert!(tensor.mapping().iter().all(|m| m.2 == 1));
        assert_eq!(pool.free_pages(), 2);
        // a new load reuses the freed pages before creating any
        let created = pool.created_pages();
        tensor.load(RangeOwner::Adapter(2), 1, &mut pool).unwrap();
        assert_eq!(pool.created_pages(), created);
        assert_eq!(pool.reclaim(), 0);
    }

    #[test]
    fn padding_slots_are_never_mapped() {
        let (mut tensor, mut pool) = figure3();
        tensor.load(RangeOwner::Base, 3, &mut pool).unwrap();
        tensor.load(RangeOwner::Adapter(2), 0, &mut pool).unwrap();
        assert_eq!(tensor.mapped_pages(), 5, "an empty range maps nothing");
        tensor.evict(RangeOwner::Adapter(2), &mut pool).unwrap();
        tensor.load(RangeOwner::Adapter(2), 1, &mut pool).unwrap();
        // adapter 2 starts at expert slot 7 = 21 MiB, page 10; slots 3..7 stay unmapped
        let mapped: Vec<u64> = tensor.mapping().iter().map(|m| m.0).collect();
        assert_eq!(mapped, vec![0, 1, 2, 3, 4, 10, 11]);
    }

    #[test]
    fn exhaustion_rolls_back_and_errors_are_typed() {
        let mut tensor = VirtualWeightTensor::reserve(2 * MIB, 3 * MIB, 3, 2, 2).unwrap();
        let mut pool = PhysicalPagePool::new(2 * MIB, 6);
        tensor.load(RangeOwner::Base, 3, &mut pool).unwrap();
        assert_eq!(
            tensor.load(RangeOwner::Adapter(0), 2, &mut pool),
            Err(VwtError::PoolExhausted { capacity_pages: 6 })
        );
        assert_eq!(tensor.mapped_pages(), 5);
        assert_eq!(pool.in_use_pages(), 5);
        assert_eq!(tensor.shared_pages(), 0);
        assert!(matches!(
            tensor.load(RangeOwner::Adapter(0), 3, &mut pool),
            Err(VwtError::TooManyExperts { .. })
        ));
        assert!(matches!(
            tensor.load(RangeOwner::Adapter(5), 1, &mut pool),
            Err(VwtError::NoSuchSlot { .. })
        ));
        assert!(matches!(
            tensor.evict(RangeOwner::Adapter(1), &mut pool),
            Err(VwtError::NotLoaded { .. })
        ));
        assert!(matches!(
            tensor.load(RangeOwner::Base, 3, &mut pool),
            Err(VwtError::AlreadyLoaded { .. })
        ));
        assert!(VirtualWeightTensor::reserve(0, 1, 1, 1, 1).is_err());
    }

    /// The reference: the pages each loaded range's bytes touch, counted.
    fn expected_references(tensor: &VirtualWeightTensor, page_bytes: u64) -> BTreeMap<u64, u32> {
        let mut references = BTreeMap::new();
        for (owner, n) in tensor.loaded() {
            let (start, end) = tensor.byte_span(owner, n).unwrap();
            if start == end {
                continue;
            }
            for page in start / page_bytes..=(end - 1) / page_bytes {
                *references.entry(page).or_insert(0u32) += 1;
            }
        }
        references
    }

    #[test]
    fn random_load_evict_sequences_keep_the_mapping_exact() {
        // several geometries: page-aligned, Figure 3's 1.5 pages, the base's 8.25 pages, and
        // experts smaller than a page (many ranges share one page)
        let geometries = [
            (2 * MIB, 2 * MIB, 4, 6, 3),
            (2 * MIB, 3 * MIB, 3, 5, 2),
            (2 * MIB, 33 * MIB / 2, 4, 6, 3),
            (2 * MIB, MIB / 2, 5, 8, 3),
        ];
        for (case, &(page, expert, n_base, a_max, e_max)) in geometries.iter().enumerate() {
            let mut rng = expertsim_serving::rng::stream(case as u64, "vwt-property");
            let mut tensor =
                VirtualWeightTensor::reserve(page, expert, n_base, a_max, e_max).unwrap();
            let mut pool = PhysicalPagePool::new(page, 1000);
            tensor.load(RangeOwner::Base, n_base, &mut pool).unwrap();
            let mut peak_in_use = 0;
            for _ in 0..2000 {
                let slot = rng.random_range(0..a_max);
                let owner = RangeOwner::Adapter(slot);
                let loaded: BTreeSet<RangeOwner> =
                    tensor.loaded().into_iter().map(|(o, _)| o).collect();
                if loaded.contains(&owner) {
                    tensor.evict(owner, &mut pool).unwrap();
                } else {
                    let n = rng.random_range(0..=e_max);
                    tensor.load(owner, n, &mut pool).unwrap();
                }
                let expected = expected_references(&tensor, page);
                let actual: BTreeMap<u64, u32> =
                    tensor.mapping().iter().map(|&(v, _, r)| (v, r)).collect();
                assert_eq!(actual, expected, "case {case}: mapped pages or references");
                // distinct physical pages, and the pool agrees on what is in use
                let physical: BTreeSet<PageId> = tensor.mapping().iter().map(|m| m.1).collect();
                assert_eq!(physical.len() as u64, tensor.mapped_pages());
                assert_eq!(pool.in_use_pages(), tensor.mapped_pages());
                // pages are reused: the pool never holds more than the peak ever in use
                peak_in_use = peak_in_use.max(pool.in_use_pages());
                assert_eq!(pool.created_pages(), peak_in_use);
                // shared pages are exactly those touched by two ranges
                let shared = expected.values().filter(|&&r| r > 1).count() as u64;
                assert_eq!(tensor.shared_pages(), shared);
            }
            for (owner, _) in tensor.loaded() {
                tensor.evict(owner, &mut pool).unwrap();
            }
            assert_eq!(tensor.mapped_pages(), 0);
            assert_eq!(pool.in_use_pages(), 0);
            assert_eq!(pool.reclaim(), peak_in_use);
            assert_eq!(pool.created_pages(), 0);
        }
    }
}
