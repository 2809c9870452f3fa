//! `Op::PoolProbe`: a custom pool exercised on purpose. The checks of a
//! request in a custom pool (its margin written past before its free,
//! dedicated memory shown in the pool in the memory map, a request
//! larger than the pool's fixed blocks, a failed map of the pool's new
//! memory, a trim or destroy of a pool that holds allocations) each need
//! a pool made, a request naming it and an operation on it drawn
//! together: in 48 minutes' fuzzing (3,471 inputs) none of them ran.
//! Here one operation makes the pool (or takes one there), places the
//! request and does the rest, each step through the walk's own methods
//! and checks.

use super::pools::pool_block_size;
use super::*;

impl Walk {
    /// In a custom pool of the `memory_type % n`-th usable memory type,
    /// with blocks as `block_size` picks (`PoolSpec::block_size`), by
    /// `what % 4`: 0, a request of 1 byte to 4 KiB (`size_log2`), then
    /// freed with `how` as `Op::Free` reads it, but always a write past
    /// its end into its margin (bits 1 and 2 clear: bit 2 set) or a write
    /// after free; 1, dedicated memory (`DedicatedPolicy::Always`, for
    /// the application's buffer on odd `how`), then the memory map; 2, a
    /// request one to a few bytes larger than the pool's block
    /// (`TooLargeForPool` when the blocks are fixed); 3, the next
    /// `vkMapMemory` failed, then a request of 1 byte to 4 KiB, dedicated
    /// on odd `how` (`MapFailed` when it makes host-visible memory). Then,
    /// with bit 2 of `what`, `trim`; with bit 3, the pool destroyed
    /// (`PoolNotEmpty` while it holds allocations).
    pub(super) fn pool_probe(
        &mut self,
        memory_type: u8,
        block_size: u8,
        what: u8,
        size_log2: u8,
        how: u8,
    ) {
        let Some(index) = self.probe_pool(memory_type, block_size) else {
            return;
        };
        let (pool, memory_type, pool_block) = {
            let p = &self.pools[index];
            (p.pool, p.memory_type, p.block_size)
        };
        let props = self.layout.memory_types[memory_type as usize].props;
        // `USAGES[1]`, `Usage::UPLOAD`, where the host sees the type (its
        // allocations mapped); else `USAGES[0]`, `Usage::DEVICE_LOCAL`.
        let usage = u8::from(props.contains(Props::HOST_VISIBLE));
        let small = size_log2 % 13;
        let mut req = Req {
            // Below 64: `self.pools[index]`.
            pool: index as u8,
            name: how >> 1,
            ..Req::plain(small, u64::from(how) << 1, size_log2 / 16 % 9, usage)
        };
        let live_before = self.live.len();
        match what % 4 {
            0 => {
                self.allocate(&req, how & 8 != 0);
                self.check();
                if self.live.len() > live_before {
                    let how = if how & 6 == 0 { how | 4 } else { how };
                    self.free_now(self.live.len() as u16 - 1, how);
                }
            }
            1 => {
                req.policy = 1;
                req.target = how & 1;
                self.allocate(&req, false);
                self.check();
                self.check_memory_map();
            }
            2 => {
                // 2^n the block's highest bit: 2^n | bits, an even size
                // one or two bytes past the block (`Walk::build`'s sizes
                // are 2^n with the low bits of `size_bits`, its bit 0
                // cleared).
                let block = if pool_block == 0 { 4096 } else { pool_block };
                let n = 63 - block.leading_zeros();
                req.size_log2 = n as u8;
                req.size_bits = ((block - (1 << n)) + 2 + u64::from(how % 4 * 2)) & !1;
                self.allocate(&req, false);
            }
            _ => {
                let at = self.device.counters().maps + 1;
                self.injected.push(Injected::Map { at });
                self.device.fail_map(1);
                req.policy = how & 1;
                self.allocate(&req, false);
            }
        }
        if what & 4 != 0 {
            self.check();
            self.trim();
        }
        if what & 8 != 0 {
            self.check();
            // `destroy_pool` picks live pools first.
            match self.pools.iter().position(|p| p.pool == pool) {
                Some(at) if at < 256 => self.destroy_pool(at as u8),
                _ => {}
            }
        }
    }

    /// The index of a live custom pool of the `pick % n`-th of the `n`
    /// usable memory types, with blocks as `block_size` picks, that a
    /// request can name (`Req::pool` below 64 names one of the first 64):
    /// one there that exports nothing, or one made now with no
    /// `min_blocks` or `max_blocks` (`Walk::create_pool` checks its
    /// making). `None` where it could be neither.
    fn probe_pool(&mut self, pick: u8, block_size: u8) -> Option<usize> {
        let usable = self.usable_types();
        let types: Vec<u32> = (0..self.layout.memory_types.len() as u32)
            .filter(|t| usable & (1 << t) != 0)
            .collect();
        let t = *types.get(usize::from(pick) % types.len().max(1))?;
        let lazy = (self.layout.memory_types[t as usize].props).contains(Props::LAZILY_ALLOCATED);
        // Lazily allocated types take only growing blocks.
        let block_size = if lazy { 0 } else { block_size };
        let wanted = pool_block_size(block_size);
        let there = self
            .pools
            .iter()
            .take(64)
            .position(|p| p.memory_type == t && p.block_size == wanted && p.export.is_empty());
        if there.is_some() {
            return there;
        }
        if self.pools.len() >= 64 {
            return None;
        }
        let before = self.pools.len();
        self.create_pool(PoolSpec {
            memory_type: t as u8,
            block_size,
            min_blocks: 0,
            // `max_blocks % 8` of 7: none.
            max_blocks: 7,
            named: false,
            export: 0,
            priority: 0,
        });
        (self.pools.len() > before).then_some(before)
    }
}
