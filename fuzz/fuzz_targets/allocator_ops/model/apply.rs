//! The walk's dispatch of each operation the input describes to the
//! method that carries it out (its figures brought into range where the
//! operation is small: faults, caps, budgets, names, defragmentation
//! limits).

use super::*;

impl Walk {
    pub fn apply(&mut self, op: Op) {
        if let Some(near) = self.pending_budget.take() {
            self.budget_near_usage(near);
        }
        match op {
            Op::Allocate(req) => self.allocate(&req, false),
            Op::AllocateMut(req) => self.allocate(&req, true),
            Op::Free { pick, how } => self.free_now(pick, how),
            Op::FreeAfterFrame { pick, alias } => self.free_after_frame(pick, alias),
            Op::EndFrame { how } if (how >> 1) & 7 == 7 => {
                self.end_frame_null(how & 1 == 1, how & 16 != 0);
            }
            Op::EndFrame { how } if (how >> 1) & 7 == 6 => self.end_frame_stale(how >> 4),
            Op::EndFrame { how } => self.end_frame(how & 1 == 1),
            Op::Signal { how } => self.signal(how),
            Op::Collect { how } if how & 1 == 1 => self.wait_and_collect(how >> 1),
            Op::Collect { .. } => self.collect(false),
            Op::CollectIdle => self.collect_idle(),
            Op::CreatePool(spec) => self.create_pool(spec),
            Op::DestroyPool { pick } => self.destroy_pool(pick),
            Op::Defragment {
                picks,
                max_moves,
                max_bytes,
                max_used_percent,
                split,
                compact,
                give_up,
                later,
            } => {
                let limits = DefragmentationLimits {
                    max_moves: if max_moves == 0 {
                        usize::MAX
                    } else {
                        max_moves as usize
                    },
                    max_bytes: if max_bytes == 0 {
                        u64::MAX
                    } else {
                        1 << (max_bytes % 40)
                    },
                    max_used_percent: max_used_percent % 101,
                    split_blocks: split,
                    compact_blocks: compact,
                };
                self.defragment(&picks, &limits, give_up, later);
            }
            Op::Trim => self.trim(),
            Op::Write { pick, value } => self.write(pick, value),
            Op::Read { pick } => self.read(pick),
            Op::Flush {
                pick,
                start,
                end,
                invalidate,
                many,
            } => self.flush(pick, start, end, invalidate, many),
            Op::SetName { pick, name } => {
                let Some(i) = self.index(pick) else { return };
                let name = (name % 4 != 3).then(|| NAMES[name as usize % 3]);
                let result = self.allocator.set_name(&self.live[i].allocation, name);
                assert_eq!(result, Ok(()), "set_name");
                self.live[i].name = name;
            }
            Op::Inspect { what } => self.inspect(what),
            Op::FailAllocation { nth, error } => {
                let error = [
                    DeviceError::OutOfDeviceMemory,
                    DeviceError::OutOfHostMemory,
                    DeviceError::TooManyObjects,
                ][error as usize % 3];
                let nth = u64::from(nth % 8) + 1;
                let at = self.device.counters().allocate_calls + nth;
                self.injected.push(Injected::Allocate { at, error });
                self.device.fail_allocation(nth, error);
            }
            Op::FailMap { nth } => {
                let nth = u64::from(nth % 8) + 1;
                let at = self.device.counters().maps + nth;
                self.injected.push(Injected::Map { at });
                self.device.fail_map(nth);
            }
            Op::CapHeap { heap, mib } => {
                let heap = u32::from(heap) % self.layout.memory_heaps.len() as u32;
                self.device.cap_heap(heap, u64::from(mib) << 20);
            }
            Op::Budget {
                heap: at,
                budget_mib,
                external_mib,
            } => {
                let heap = u32::from(at) % self.layout.memory_heaps.len() as u32;
                if at >> 6 == 1 {
                    let near = NearUsage {
                        heap,
                        how: external_mib,
                        count: budget_mib,
                    };
                    if at & 0x20 != 0 {
                        self.pending_budget = Some(near);
                    } else {
                        self.budget_near_usage(near);
                    }
                } else {
                    let figures = (u64::from(budget_mib) << 20, u64::from(external_mib) << 20);
                    self.set_budget(heap, figures.0, figures.1);
                }
            }
            Op::LoseDevice => {
                self.device.lose_device();
                self.lost = true;
            }
            Op::AllocateMany(reqs) => self.allocate_many(&reqs),
            Op::CheckAlias {
                pick,
                offset,
                size_log2,
                align,
                type_bits,
                kind,
            } => self.check_alias(pick, offset, size_log2, align, type_bits, kind),
            Op::CreateRing {
                size,
                size_bits,
                usage,
                buffer_usage,
                grow,
                unchecked,
            } => self.create_ring(size, size_bits, usage, buffer_usage, grow, unchecked),
            Op::RingAllocate {
                pick,
                size_log2,
                size_bits,
                align,
                repeat,
            } => {
                let times = if repeat % 8 == 7 { 64 } else { repeat % 8 + 1 };
                for _ in 0..times {
                    let mutable = repeat & 8 != 0;
                    if !self.ring_allocate(pick, size_log2, size_bits, align, mutable) {
                        break;
                    }
                }
            }
            Op::RingWrite { pick, value, past } => self.ring_write(pick, value, past),
            Op::DestroyRing { pick } => self.destroy_ring(pick),
            Op::RingFill {
                pick,
                frames,
                complete,
                then,
                align,
                timeline,
            } => self.ring_fill(pick, frames, complete, then, align, timeline),
            Op::Foreign { what, pick } => self.foreign(what, pick),
            Op::Churn {
                first,
                second,
                usage,
                size_log2,
                size_bits,
                count,
                defragment,
            } => self.churn(
                [first, second],
                usage,
                size_log2,
                size_bits,
                count,
                defragment,
            ),
            Op::Query {
                what,
                bits,
                usage,
                pick,
            } => self.query(what, bits, usage, pick),
            Op::PoolProbe {
                memory_type,
                block_size,
                what,
                size_log2,
                how,
            } => self.pool_probe(memory_type, block_size, what, size_log2, how),
            Op::LastResort {
                other,
                usage,
                size_log2,
                policy,
            } => self.last_resort(other, usage, size_log2, policy),
        }
    }
}
