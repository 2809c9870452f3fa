//! Memory maps and dumps of an [`Allocator`]: the walk over every block,
//! under one pool's lock at a time (each memory type's default pool, then
//! each custom pool), that the [`report`](crate::report) renderers draw
//! from.

use gpu_alloc_types::MemoryPropertyFlags;

use super::{lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::memory::type_pool::TypePool;
use crate::report::{
    BlockMap, DedicatedMap, HeapMap, MemoryMap, MemoryTypeMap, PoolMap, RangeKind, RangeMap,
};

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// A snapshot of every block with its allocations and free ranges in
    /// address order, and of every dedicated allocation, those of custom
    /// pools ([`MemoryTypeMap::custom_pools`]) included.
    ///
    /// Each pool (the default pool of each memory type, then each custom
    /// pool) is read under its lock, one pool after another: allocations in
    /// other pools proceed meanwhile, those in the pool being read wait for
    /// the walk. Meant for debugging and out-of-memory reports, not for every
    /// frame ([`stats`](Self::stats) is).
    ///
    /// # Time complexity
    /// O(n log n) for n allocations and free ranges (each block's are sorted
    /// by offset), plus a copy of each allocation's name; and, with
    /// `VK_EXT_memory_budget`, one query of the driver's heap budgets (the
    /// heaps' figures), as [`stats`](Self::stats) makes.
    pub fn memory_map(&self) -> MemoryMap {
        let properties = &self.context.properties;
        let device = &properties.device;
        let granularity = properties.buffer_image_granularity;
        let mut memory_types: Vec<MemoryTypeMap> = self
            .pools
            .iter()
            .zip(device.memory_types.iter())
            .enumerate()
            .map(|(index, (pool, memory_type))| {
                let pool = lock(pool);
                MemoryTypeMap {
                    memory_type: index as u32,
                    heap: memory_type.heap,
                    props: memory_type.props,
                    amd_device_coherent: properties.amd_device_coherent_types & (1 << index) != 0,
                    preferred_block_size: self.context.preferred_block_size(index as u32),
                    blocks: block_maps(&pool),
                    dedicated: dedicated_maps(&pool),
                    custom_pools: Vec::new(),
                }
            })
            .collect();
        // One custom pool at a time, no default pool held.
        self.for_each_custom_pool(|pool| {
            if let Some(memory_type) = memory_types.get_mut(pool.memory_type() as usize) {
                let map = self.pool_map(pool, memory_type.heap);
                memory_type.custom_pools.push(map);
            }
        });
        let budgets = self.context.fresh_heap_budgets();
        let heaps = device
            .memory_heaps
            .iter()
            .enumerate()
            .map(|(index, heap)| HeapMap {
                heap: index as u32,
                size: heap.size,
                device_local: device.memory_types.iter().any(|t| {
                    t.heap as usize == index && t.props.contains(MemoryPropertyFlags::DEVICE_LOCAL)
                }),
                budget: budgets.get(index).copied().unwrap_or_default(),
            })
            .collect();
        MemoryMap {
            memory_types,
            heaps,
            buffer_image_granularity: granularity,
            non_coherent_atom_size: device.non_coherent_atom_size,
            max_memory_allocation_count: device.max_memory_allocation_count,
            gpu: properties.gpu.clone(),
        }
    }

    /// The map of custom pool `pool`, whose memory type is in `heap`.
    fn pool_map(&self, pool: &TypePool<M>, heap: u32) -> PoolMap {
        let policy = pool.policy();
        PoolMap {
            name: pool.name().map(str::to_owned),
            memory_type: pool.memory_type(),
            heap,
            block_size: policy.block_size,
            preferred_block_size: pool.preferred_block_size(&self.context),
            // Both come from `PoolDesc`'s u32s; no limit is u64::MAX,
            // which no u32 holds.
            min_blocks: u32::try_from(policy.min_blocks).unwrap_or(u32::MAX),
            max_blocks: u32::try_from(policy.max_blocks).ok(),
            export_handle_types: policy.export_handle_types,
            blocks: block_maps(pool),
            dedicated: dedicated_maps(pool),
        }
    }

    /// A JSON dump in the format of VMA's `vmaBuildStatsString`: totals, and
    /// per heap and memory type, VMA's detailed statistics; with `detailed`,
    /// every block's allocations and free ranges and every dedicated
    /// allocation, which VMA's `GpuMemDumpVis.py` draws. Shorthand for
    /// `self.memory_map().to_vma_json(detailed)`; see
    /// [`MemoryMap::to_vma_json`], and [`MemoryMap::with_gpu`] to name the GPU
    /// where the backend does not (the ash backend does).
    ///
    /// # Time complexity
    /// As [`memory_map`](Self::memory_map).
    pub fn stats_json(&self, detailed: bool) -> String {
        self.memory_map().to_vma_json(detailed)
    }

    /// The memory map as an SVG picture to open in a browser: one row per
    /// block and per dedicated allocation, allocations coloured by kind, free
    /// space light grey, names in tooltips. Shorthand for
    /// `self.memory_map().to_svg()`; see [`MemoryMap::to_svg`].
    ///
    /// # Time complexity
    /// As [`memory_map`](Self::memory_map).
    pub fn memory_map_svg(&self) -> String {
        self.memory_map().to_svg()
    }
}

/// The blocks of `pool`, oldest first, each with its allocations and free
/// ranges in address order. A run shows as its slots: each live one an
/// allocation (a buffer, the slot's bytes held), the free ones as free space.
fn block_maps<M>(pool: &TypePool<M>) -> Vec<BlockMap> {
    let runs = pool.runs_by_range();
    let mut blocks: Vec<BlockMap> = pool
        .blocks()
        .map(|(key, block)| {
            let mut ranges: Vec<RangeMap> = Vec::new();
            for a in block.ranges.allocations() {
                if let Some(&(run_key, run)) = runs.get(&(key, a.id)) {
                    ranges.extend(run.slots().map(|(slot, live, offset)| RangeMap {
                        offset,
                        size: run.slot_size,
                        kind: if live {
                            RangeKind::Buffer
                        } else {
                            RangeKind::Free
                        },
                        name: pool.slot_name(run_key, slot).map(str::to_owned),
                    }));
                    continue;
                }
                ranges.push(RangeMap {
                    offset: a.offset,
                    size: a.size,
                    kind: RangeKind::of_resource(block.kinds.get(a.id.slot())),
                    name: block.names.get(&a.id.slot()).map(|name| name.to_string()),
                });
            }
            ranges.extend(block.ranges.free_ranges().map(|f| RangeMap {
                offset: f.offset,
                size: f.size,
                kind: RangeKind::Free,
                name: None,
            }));
            // Ranges are never empty, so no two share an offset.
            ranges.sort_unstable_by_key(|range| range.offset);
            BlockMap {
                ranges: merge_free_neighbours(ranges),
                id: block.serial,
                memory: block.raw,
                size: block.size,
                mapped: block.mapped.is_some(),
                retiring: block.retiring,
            }
        })
        .collect();
    blocks.sort_unstable_by_key(|block| block.id);
    blocks
}

/// `ranges` (in address order) with each stretch of free neighbours, free
/// slots of runs and the block's free ranges, as one free range: a dump
/// shows no two free ranges in a row, as VMA's.
fn merge_free_neighbours(ranges: Vec<RangeMap>) -> Vec<RangeMap> {
    let mut merged: Vec<RangeMap> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if last.kind == RangeKind::Free && range.kind == RangeKind::Free => {
                last.size += range.size;
            }
            _ => merged.push(range),
        }
    }
    merged
}

/// The dedicated allocations of `pool`.
fn dedicated_maps<M>(pool: &TypePool<M>) -> Vec<DedicatedMap> {
    pool.dedicated_allocations()
        .map(|dedicated| DedicatedMap {
            memory: dedicated.raw,
            size: dedicated.size,
            mapped: dedicated.mapped.is_some(),
            kind: RangeKind::of_resource(dedicated.kind),
            name: dedicated.name.as_deref().map(str::to_owned),
        })
        .collect()
}
