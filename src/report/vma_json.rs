//! The JSON dump in the format of VMA's `vmaBuildStatsString` (VMA 3.x), so
//! VMA's own tool `GpuMemDumpVis.py` draws it and any script written for VMA
//! dumps reads it.
//!
//! Keys, nesting, the order of keys and the text layout follow
//! `vmaBuildStatsString`, `VmaPrintDetailedStatistics`,
//! `VmaAllocator_T::PrintDetailedMap`, `VmaBlockVector::PrintDetailedMap`,
//! `VmaBlockMetadata::PrintDetailedMap_*`, `VmaDedicatedAllocationList::BuildStatsString`
//! and `VmaAllocation_T::PrintParameters` of `vk_mem_alloc.h` 3.x. What
//! differs, and why, is listed in the [`report`](super) module docs.

use super::detailed_stats::DetailedStats;
use super::json_writer::JsonWriter;
use super::memory_map::{BlockMap, DedicatedMap, MemoryMap, MemoryTypeMap, PoolMap, RangeKind};

impl MemoryMap {
    /// The map as JSON in the format of VMA's `vmaBuildStatsString`.
    /// `detailed` adds `DefaultPools` (every block with its allocations and
    /// free ranges, every dedicated allocation), which `GpuMemDumpVis.py`
    /// needs to draw anything, and `CustomPools`, the same for each custom
    /// pool, by memory type. As in VMA, a custom pool's `Name` is its index
    /// among its type's pools, then ` - ` and its name when it has one
    /// (`"0 - textures"`), so that no two pools of a type share a name.
    ///
    /// # Time complexity
    /// O(blocks + allocations + free ranges).
    pub fn to_vma_json(&self, detailed: bool) -> String {
        let mut json = JsonWriter::new();
        json.begin_object(false);
        self.write_general(&mut json);
        json.string("Total");
        write_stats(&mut json, &self.total_stats());
        self.write_memory_info(&mut json);
        if detailed {
            json.string("DefaultPools");
            json.begin_object(false);
            for memory_type in &self.memory_types {
                write_default_pool(&mut json, memory_type);
            }
            json.end_object();
            json.string("CustomPools");
            json.begin_object(false);
            for memory_type in &self.memory_types {
                write_custom_pools(&mut json, memory_type);
            }
            json.end_object();
        }
        json.end_object();
        json.finish()
    }

    fn write_general(&self, json: &mut JsonWriter) {
        json.string("General");
        json.begin_object(false);
        json.key_string("API", "Vulkan");
        let (name, version, device_type) = match &self.gpu {
            Some(gpu) => (
                gpu.name.as_str(),
                gpu.api_version,
                u64::try_from(gpu.device_type.as_raw()).unwrap_or(0),
            ),
            None => ("unknown", 0, 0),
        };
        let api_version = format!(
            "{}.{}.{}",
            ash::vk::api_version_major(version),
            ash::vk::api_version_minor(version),
            ash::vk::api_version_patch(version)
        );
        json.key_string("apiVersion", &api_version);
        json.key_string("GPU", name);
        json.key_number("deviceType", device_type);
        json.key_number(
            "maxMemoryAllocationCount",
            u64::from(self.max_memory_allocation_count),
        );
        json.key_number("bufferImageGranularity", self.buffer_image_granularity);
        json.key_number("nonCoherentAtomSize", self.non_coherent_atom_size);
        json.key_number("memoryHeapCount", self.heaps.len() as u64);
        json.key_number("memoryTypeCount", self.memory_types.len() as u64);
        json.end_object();
    }

    fn write_memory_info(&self, json: &mut JsonWriter) {
        json.string("MemoryInfo");
        json.begin_object(false);
        for heap in &self.heaps {
            json.string(&format!("Heap {}", heap.heap));
            json.begin_object(false);
            json.string("Flags");
            json.begin_array(true);
            if heap.device_local {
                json.string("DEVICE_LOCAL");
            }
            json.end_array();
            json.key_number("Size", heap.size);
            json.string("Budget");
            json.begin_object(false);
            json.key_number("BudgetBytes", heap.budget.budget);
            json.key_number("UsageBytes", heap.budget.usage);
            json.end_object();
            json.string("Stats");
            write_stats(json, &self.heap_stats(heap.heap));
            json.string("MemoryPools");
            json.begin_object(false);
            for memory_type in self.memory_types.iter().filter(|t| t.heap == heap.heap) {
                json.string(&format!("Type {}", memory_type.memory_type));
                json.begin_object(false);
                json.string("Flags");
                write_type_flags(json, memory_type);
                json.string("Stats");
                write_stats(json, &memory_type.detailed_stats());
                json.end_object();
            }
            json.end_object();
            json.end_object();
        }
        json.end_object();
    }
}

/// `VmaPrintDetailedStatistics`: min/max only when there are two or more.
fn write_stats(json: &mut JsonWriter, stats: &DetailedStats) {
    json.begin_object(false);
    json.key_number("BlockCount", stats.block_count);
    json.key_number("BlockBytes", stats.block_bytes);
    json.key_number("AllocationCount", stats.allocation_count);
    json.key_number("AllocationBytes", stats.allocation_bytes);
    json.key_number("UnusedRangeCount", stats.unused_range_count);
    if stats.allocation_count > 1 {
        json.key_number("AllocationSizeMin", stats.allocation_size_min);
        json.key_number("AllocationSizeMax", stats.allocation_size_max);
    }
    if stats.unused_range_count > 1 {
        json.key_number("UnusedRangeSizeMin", stats.unused_range_size_min);
        json.key_number("UnusedRangeSizeMax", stats.unused_range_size_max);
    }
    json.end_object();
}

/// Memory property flags by name, in VMA's order.
fn write_type_flags(json: &mut JsonWriter, memory_type: &MemoryTypeMap) {
    json.begin_array(true);
    for name in memory_type.flag_names() {
        json.string(name);
    }
    json.end_array();
}

/// One `DefaultPools."Type N"` entry: `VmaAllocator_T::PrintDetailedMap`.
fn write_default_pool(json: &mut JsonWriter, memory_type: &MemoryTypeMap) {
    json.string(&format!("Type {}", memory_type.memory_type));
    json.begin_object(false);
    write_pool_contents(
        json,
        memory_type.preferred_block_size,
        &memory_type.blocks,
        &memory_type.dedicated,
    );
    json.end_object();
}

/// The `CustomPools."Type N"` array of a memory type with custom pools
/// (`VmaAllocator_T::PrintDetailedMap`); nothing for a type without.
fn write_custom_pools(json: &mut JsonWriter, memory_type: &MemoryTypeMap) {
    if memory_type.custom_pools.is_empty() {
        return;
    }
    json.string(&format!("Type {}", memory_type.memory_type));
    json.begin_array(false);
    for (index, pool) in memory_type.custom_pools.iter().enumerate() {
        json.begin_object(false);
        json.key_string("Name", &vma_pool_name(index, pool));
        write_pool_contents(
            json,
            pool.preferred_block_size,
            &pool.blocks,
            &pool.dedicated,
        );
        json.end_object();
    }
    json.end_array();
}

/// VMA's `Name` of the `index`th custom pool of a memory type: the index,
/// then ` - ` and the pool's name when it has one. `GpuMemDumpVis.py`
/// reads it for every pool and keys pools by it.
fn vma_pool_name(index: usize, pool: &PoolMap) -> String {
    match &pool.name {
        Some(name) => format!("{index} - {name}"),
        None => index.to_string(),
    }
}

/// A pool's `PreferredBlockSize`, `Blocks` and `DedicatedAllocations`,
/// default and custom pools alike.
fn write_pool_contents(
    json: &mut JsonWriter,
    preferred_block_size: u64,
    blocks: &[BlockMap],
    dedicated: &[DedicatedMap],
) {
    json.key_number("PreferredBlockSize", preferred_block_size);
    json.string("Blocks");
    json.begin_object(false);
    for block in blocks {
        write_block(json, block);
    }
    json.end_object();
    json.string("DedicatedAllocations");
    json.begin_array(false);
    for dedicated in dedicated {
        json.begin_object(true);
        write_allocation_parameters(
            json,
            dedicated.kind,
            dedicated.size,
            dedicated.name.as_deref(),
        );
        json.end_object();
    }
    json.end_array();
}

/// `VmaBlockVector::PrintDetailedMap` for one block, then the metadata's
/// `PrintDetailedMap`: every range in address order.
fn write_block(json: &mut JsonWriter, block: &BlockMap) {
    let stats = block.detailed_stats();
    json.string(&block.id.to_string());
    json.begin_object(false);
    json.key_number("MapRefCount", u64::from(block.mapped));
    json.key_number("TotalBytes", block.size);
    json.key_number("UnusedBytes", stats.unused_bytes());
    json.key_number("Allocations", stats.allocation_count);
    json.key_number("UnusedRanges", stats.unused_range_count);
    json.string("Suballocations");
    json.begin_array(false);
    for range in &block.ranges {
        json.begin_object(true);
        json.key_number("Offset", range.offset);
        if range.is_allocation() {
            write_allocation_parameters(json, range.kind, range.size, range.name.as_deref());
        } else {
            json.key_string("Type", RangeKind::Free.vma_name());
            json.key_number("Size", range.size);
        }
        json.end_object();
    }
    json.end_array();
    json.end_object();
}

/// `VmaAllocation_T::PrintParameters`.
fn write_allocation_parameters(
    json: &mut JsonWriter,
    kind: RangeKind,
    size: u64,
    name: Option<&str>,
) {
    json.key_string("Type", kind.vma_name());
    json.key_number("Size", size);
    json.key_number("Usage", 0);
    if let Some(name) = name {
        json.key_string("Name", name);
    }
}
