//! Custom pools made and destroyed, and defragmentation plans carried out
//! or given up.

use super::*;

/// The fixed block size `PoolSpec::block_size` picks: 0 (blocks that
/// grow as the default pools' do), an odd size, or a power of two from
/// 1 KiB to 512 MiB.
pub(super) fn pool_block_size(pick: u8) -> u64 {
    match pick {
        0 => 0,
        1 => 5 * 4096 + 3,
        n => 1 << (10 + u32::from(n) % 20),
    }
}

impl Walk {
    pub(super) fn create_pool(&mut self, spec: PoolSpec) {
        let PoolSpec {
            memory_type,
            block_size,
            min_blocks,
            max_blocks,
            named,
            export,
            priority,
        } = spec;
        let types = self.layout.memory_types.len() as u32;
        let memory_type = u32::from(memory_type) % (types + 1);
        let mut desc = PoolDesc::new(memory_type);
        desc.block_size = pool_block_size(block_size);
        desc.min_blocks = u32::from(min_blocks % 4);
        desc.max_blocks = (max_blocks % 8 != 7).then_some(u32::from(max_blocks % 5));
        desc.name = named.then_some("fuzz-pool");
        // Named pools align every allocation to 4 KiB (no input of its own,
        // so the corpus keeps its meaning).
        desc.min_alignment = if named { 4096 } else { 0 };
        desc.priority = (priority != 0).then(|| f32::from(priority) / 100.0 - 0.5);
        use vk::ExternalMemoryHandleTypeFlags as H;
        // From 224: the D3D types, whose memory is only ever dedicated to a
        // named resource (the values below keep their meaning).
        desc.export_handle_types = if export >= 224 {
            [
                H::D3D11_TEXTURE,
                H::D3D12_RESOURCE | H::OPAQUE_FD,
                H::D3D11_TEXTURE_KMT | H::D3D11_TEXTURE | H::D3D12_RESOURCE,
            ][export as usize % 3]
        } else {
            [
                H::empty(),
                H::empty(),
                H::OPAQUE_FD,
                H::OPAQUE_FD | H::DMA_BUF_EXT,
                H::HOST_ALLOCATION_EXT,
                H::from_raw(1 << 30),
            ][export as usize % 6]
        };
        // Not a handle type, import-only, or not one the device exports.
        let never =
            H::HOST_ALLOCATION_EXT | H::HOST_MAPPED_FOREIGN_MEMORY_EXT | H::from_raw(1 << 30);
        let exportable = self.layout.exportable_handle_types.unwrap_or(!never);
        let refused = desc.export_handle_types & (never | !exportable);
        // Then, with `min_blocks`, the dedicated-only types: such a pool
        // makes no block.
        let refused = if refused.is_empty() && desc.min_blocks > 0 {
            desc.export_handle_types & requests::DEDICATED_ONLY
        } else {
            refused
        };
        // `InvalidConfig` first, exactly when `create_pool`'s docs say: a
        // type the allocator does not use, a block size past the (limited)
        // heap or `maxMemoryAllocationSize`, `min_blocks` or `block_size`
        // on a lazily allocated type, `max_blocks` of 0 or below
        // `min_blocks`.
        let usable = memory_type < types && self.usable_types() & (1 << memory_type) != 0;
        let invalid = !usable || {
            let ty = self.layout.memory_types[memory_type as usize];
            let heap = self.layout.memory_heaps[ty.heap as usize].size;
            let lazy = ty.props.contains(Props::LAZILY_ALLOCATED);
            desc.block_size > heap.min(self.layout.max_memory_allocation_size)
                || (lazy && (desc.min_blocks > 0 || desc.block_size != 0))
                || desc
                    .max_blocks
                    .is_some_and(|m| m == 0 || m < desc.min_blocks)
        };
        let before = self.before();
        let result = self.allocator.create_pool(&desc);
        if invalid {
            return assert!(
                matches!(result, Err(Error::InvalidConfig(_))),
                "create_pool {desc:?}: {result:?}, not InvalidConfig"
            );
        }
        if !refused.is_empty() {
            let want = Err(Error::NotExportable {
                handle_types: refused,
            });
            return assert_eq!(result, want, "create_pool {desc:?}");
        }
        // 2047 pools at most (never reached here).
        if self.pools.len() >= 2047 {
            return assert_eq!(result, Err(Error::TooManyPools), "create_pool {desc:?}");
        }
        let pool = match result {
            Ok(pool) => pool,
            Err(error) => {
                // Only the making of its `min_blocks` blocks may fail, as
                // any block's making does (no heap or type past them: their
                // size was checked), leaving nothing of the pool.
                let ok = desc.min_blocks > 0
                    && matches!(
                        error,
                        Error::OutOfDeviceMemory
                            | Error::TooManyObjects(_)
                            | Error::OutOfHostMemory
                            | Error::MapFailed
                            | Error::DeviceLost
                    )
                    && self.memory_error_ok(&error, &before);
                assert!(ok, "create_pool {desc:?}: {error:?}");
                self.check_driver_asked(&error, &before.counters, &desc);
                let objects = self.device.live_allocations().len();
                assert!(objects <= before.objects, "create_pool {desc:?} failed");
                return;
            }
        };
        assert_eq!(pool.memory_type(), memory_type);
        let stats = self.allocator.pool_stats(&pool).unwrap();
        assert_eq!(stats.blocks, u64::from(desc.min_blocks), "{desc:?}");
        self.pools.push(LivePool {
            pool,
            memory_type,
            min_blocks: desc.min_blocks,
            export: desc.export_handle_types,
            priority: desc.priority,
            min_alignment: desc.min_alignment,
            block_size: desc.block_size,
            max_blocks: desc.max_blocks,
        });
    }

    /// `trim`: every empty block released, but those a custom pool keeps
    /// to hold its `min_blocks`; it returns the bytes of the memory
    /// objects it freed, and makes none.
    pub(super) fn trim(&mut self) {
        let sizes = |walk: &Self| -> HashMap<vk::DeviceMemory, u64> {
            let live = walk.device.live_allocations();
            live.iter().map(|m| (m.memory, m.size)).collect()
        };
        let before = sizes(self);
        let pools_before: Vec<_> = self
            .pools
            .iter()
            .map(|p| self.allocator.pool_stats(&p.pool).unwrap())
            .collect();
        let released = self.allocator.trim();
        let after = sizes(self);
        assert!(
            after.keys().all(|m| before.contains_key(m)),
            "trim made memory"
        );
        let freed: u64 = before
            .iter()
            .filter(|(m, _)| !after.contains_key(m))
            .map(|(_, size)| size)
            .sum();
        assert_eq!(released, freed, "the bytes trim says it released");
        // Each pool: its blocks in use, and empty ones up to `min_blocks`.
        let mut kept = vec![0u64; self.layout.memory_types.len()];
        for (p, s) in self.pools.iter().zip(&pools_before) {
            let used = s.blocks - s.empty_blocks;
            let blocks = used.max(s.blocks.min(u64::from(p.min_blocks)));
            let now = self.allocator.pool_stats(&p.pool).unwrap();
            assert_eq!(
                (now.blocks, now.empty_blocks),
                (blocks, blocks - used),
                "pool {:?} after trim, {s:?} before",
                p.pool
            );
            kept[p.memory_type as usize] += blocks - used;
        }
        let stats = self.allocator.stats();
        for (t, s) in stats.memory_types.iter().enumerate() {
            assert_eq!(s.empty_blocks, kept[t], "type {t} after trim: {s:?}");
        }
    }

    pub(super) fn destroy_pool(&mut self, pick: u8) {
        let total = self.pools.len() + self.dead_pools.len();
        if total == 0 {
            return;
        }
        let i = pick as usize % total;
        if i >= self.pools.len() {
            let dead = self.dead_pools[i - self.pools.len()];
            assert_eq!(self.allocator.destroy_pool(dead), Err(Error::StalePool));
            return;
        }
        let pool = self.pools[i].pool;
        let holds = self.held().filter(|h| h.pool == Some(pool)).count() as u64;
        let result = self.allocator.destroy_pool(pool);
        if holds > 0 {
            assert_eq!(result, Err(Error::PoolNotEmpty { allocations: holds }));
        } else {
            assert_eq!(result, Ok(()), "destroy_pool");
            self.pools.swap_remove(i);
            self.dead_pools.push(pool);
        }
    }

    pub(super) fn defragment(
        &mut self,
        picks: &[u16],
        limits: &DefragmentationLimits,
        give_up: u64,
        later: u64,
    ) {
        let mut indices: Vec<usize> = picks.iter().filter_map(|&p| self.index(p)).collect();
        indices.sort_unstable();
        indices.dedup();
        let movables: Vec<Movable<'_>> = indices
            .iter()
            .map(|&i| {
                let l = &self.live[i];
                Movable::new(&l.allocation, l.requirements, l.kind)
            })
            .collect();
        let plan = match self.allocator.plan_defragmentation(&movables, limits) {
            Ok(plan) => plan,
            Err(error) => panic!("plan_defragmentation: {error:?}"),
        };
        drop(movables);
        assert!(plan.moves.len() <= limits.max_moves);
        // The destinations live beside their sources until carried out.
        let mut moves = Vec::new();
        for planned in plan.moves {
            let source = indices[planned.movable];
            let s = &self.live[source];
            let d = &planned.destination;
            assert_eq!(
                d.memory_type(),
                s.allocation.memory_type(),
                "a move across types"
            );
            assert_eq!(d.size(), s.allocation.size());
            assert_eq!(d.is_in_custom_pool(), s.allocation.is_in_custom_pool());
            // Mapped where its source is (`strict_host_access`).
            assert_eq!(
                d.mapped_ptr().is_some(),
                s.allocation.mapped_ptr().is_some(),
                "{d:?}"
            );
            if !d.is_dedicated() {
                assert_eq!(d.offset() % s.requirements.alignment, 0, "{d:?}");
                let pool_alignment = self.pool_min_alignment(s.pool).max(1);
                assert_eq!(d.offset() % pool_alignment, 0, "{d:?}");
            }
            moves.push((source, planned));
        }
        // Checked against everything else while both are held.
        let probes: Vec<Held> = moves
            .iter()
            .map(|(source, planned)| {
                let s = &self.live[*source];
                Held::of(&planned.destination, s.pool, s.kind)
            })
            .collect();
        self.check_disjoint(&probes);
        // Carried out from the last, so that indices stay valid.
        moves.sort_by_key(|(source, _)| std::cmp::Reverse(*source));
        for (n, (source, planned)) in moves.into_iter().enumerate() {
            let bit = 1u64 << (n % 64);
            let (pool, kind) = (self.live[source].pool, self.live[source].kind);
            if give_up & bit != 0 {
                let held = Held::of(&planned.destination, pool, kind);
                assert_eq!(self.allocator.give_up_move(planned), Ok(()), "give_up_move");
                self.current.push(held);
                continue;
            }
            let tag = self.live[source].tag;
            let old = std::mem::replace(&mut self.live[source].allocation, planned.destination);
            // The application binds a new resource there.
            self.live[source].targeted = false;
            if let Some(tag) = tag {
                let new = &mut self.live[source].allocation;
                let size = new.size();
                assert_eq!(self.allocator.copy_to_allocation(new, 0, &[tag]), Ok(()));
                assert_eq!(
                    self.allocator.copy_to_allocation(new, size - 1, &[tag]),
                    Ok(())
                );
            }
            if later & bit != 0 {
                let held = Held::of(&old, pool, kind);
                assert_eq!(self.allocator.free_after_frame(old), Ok(()));
                self.current.push(held);
            } else {
                // SAFETY: the fake device runs no GPU work.
                assert_eq!(unsafe { self.allocator.free(old) }, Ok(()));
            }
        }
    }
}
