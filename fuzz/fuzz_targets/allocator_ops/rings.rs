//! Upload rings: made with descriptions good and flawed, allocated from
//! (sizes of 0 to past every heap, alignments that are not powers of two),
//! written and read back, destroyed; their space reclaimed by the frames'
//! collection. Each ring's chunks are held ranges of the model (learnt from
//! `stats()` when made, placed by the first ring allocation seen in them),
//! and each chunk's bump allocator is modelled: where each ring allocation
//! lands, and the free bytes `UploadRingFull` reports.
//!
//! This file holds the models, the making of rings and their destruction,
//! reclaim and checks; the ring allocations and their model are in
//! `rings/allocate.rs`, and the writes into ring allocations and the
//! filling of a ring across frames in `rings/writes_and_fills.rs`.

use super::*;

#[path = "rings/allocate.rs"]
mod allocate;
#[path = "rings/writes_and_fills.rs"]
mod writes_and_fills;

/// Ring allocations per ring a frame still holds, checked after each op.
const MAX_RING_LIVE: usize = 64;

pub(super) struct RingModel {
    pub(super) ring: UploadRing,
    /// Bytes of a chunk made when full.
    chunk_size: u64,
    grow: bool,
    /// Whether its usage has host access: its chunks are host-visible then
    /// (else GPU scratch, maybe in memory the host cannot see).
    host_access: bool,
    /// Whether its buffer usage has `SHADER_DEVICE_ADDRESS`: its
    /// allocations give their device addresses then, else none.
    device_address: bool,
    /// Its buffers' usage (their requirements' alignment and size
    /// rounding depend on it on some layouts).
    buffer_usage: vk::BufferUsageFlags,
    /// Its chunks' least alignment in their memory objects.
    min_alignment: u64,
    pub(super) chunks: Vec<RingChunkModel>,
    /// Ring allocations whose frame is not collected, each with the byte
    /// written at both ends (if any).
    pub(super) live: Vec<(RingAllocation, Option<u8>)>,
}

pub(super) struct RingChunkModel {
    /// Memory null until a ring allocation in it is seen.
    pub(super) held: Held,
    /// Its buffer, once seen.
    buffer: Option<vk::Buffer>,
    capacity: u64,
    /// The allocator frame current when it was put in its ring.
    first_frame: u64,
    /// Where its next allocation is looked for.
    head: u64,
    /// The bytes each ring allocation of a frame not collected took
    /// (alignment and wrapped tail included), with its frame.
    used: Vec<(u64, u64)>,
}

impl RingChunkModel {
    fn used(&self) -> u64 {
        self.used.iter().map(|u| u.1).sum()
    }

    /// Where `size` bytes at `align` would land, and the bytes they would
    /// take; else the free bytes.
    fn place(&self, size: u64, align: u64) -> Result<(u64, u64), u64> {
        let used = self.used();
        let cap = self.capacity;
        if size > cap {
            return Err(cap - used);
        }
        let aligned = self.head.next_multiple_of(align);
        let (offset, taken) = if aligned <= cap - size {
            (aligned, aligned - self.head + size)
        } else {
            (0, cap - self.head + size)
        };
        if used + taken > cap {
            Err(cap - used)
        } else {
            Ok((offset, taken))
        }
    }
}

impl RingModel {
    /// The frames its chunk `chunk` holds sealed: those sealed since it
    /// was put in, not collected.
    fn sealed_in(chunk: &RingChunkModel, next_frame: u64, sealed: usize) -> u64 {
        let oldest = next_frame - sealed as u64;
        next_frame - chunk.first_frame.max(oldest).min(next_frame)
    }
}

/// Per memory type: block allocations, their bytes, dedicated ones, theirs.
type Tally = Vec<(u64, u64, u64, u64)>;

fn tally(stats: &vk_suballoc::report::Stats) -> Tally {
    stats
        .memory_types
        .iter()
        .map(|s| {
            (
                s.block_allocations,
                s.block_allocated_bytes,
                s.dedicated_allocations,
                s.dedicated_bytes,
            )
        })
        .collect()
}

impl Walk {
    /// The one chunk `before` and the allocator's stats now differ by: a
    /// buffer of `capacity` bytes with `buffer_usage`, taking the size its
    /// requirements round it to (the layout's driver's answer).
    fn new_chunk(
        &self,
        before: &Tally,
        capacity: u64,
        buffer_usage: vk::BufferUsageFlags,
        host_access: bool,
    ) -> RingChunkModel {
        let after = tally(&self.allocator.stats());
        let changed: Vec<usize> = (0..after.len())
            .filter(|&t| after[t] != before[t])
            .collect();
        assert_eq!(
            changed.len(),
            1,
            "a ring chunk in one type: {before:?} {after:?}"
        );
        let t = changed[0];
        let (b, a) = (before[t], after[t]);
        let answer = &self.layout.buffer_requirements;
        let bytes = answer.size(capacity, buffer_usage).expect("a chunk's size");
        let dedicated = a.2 != b.2;
        if dedicated {
            assert_eq!((a.0, a.1, a.2, a.3), (b.0, b.1, b.2 + 1, b.3 + bytes));
        } else {
            assert_eq!((a.0, a.1, a.2, a.3), (b.0 + 1, b.1 + bytes, b.2, b.3));
        }
        let props = self.layout.memory_types[t].props;
        assert!(
            props.contains(Props::HOST_VISIBLE) || !host_access,
            "a ring chunk in type {t}"
        );
        RingChunkModel {
            held: Held {
                memory: vk::DeviceMemory::null(),
                offset: 0,
                size: bytes,
                memory_type: t as u32,
                dedicated,
                pool: None,
                kind: ResourceKind::Buffer,
                resources: 1,
                queued: 1,
                name: None,
            },
            buffer: None,
            capacity,
            first_frame: self.next_frame,
            head: 0,
            used: Vec::new(),
        }
    }

    pub(super) fn create_ring(
        &mut self,
        size: u8,
        size_bits: u16,
        usage: u8,
        buffer_usage: u8,
        grow: bool,
        unchecked: bool,
    ) {
        let size = match size % 8 {
            0 => 0,
            1 => u64::MAX,
            2 => 1 << 50,
            n => (u64::from(size_bits) << (n - 3)).max(1),
        };
        let usage = match usage % 12 {
            n @ 0..9 => USAGES[n as usize],
            9 => Usage::READBACK.union(Usage::DEVICE_ADDRESS),
            10 => Usage::UPLOAD.union(Usage::DEVICE_LOCAL),
            _ => Usage::default(),
        };
        // Bits 4 to 6 of the buffer usage's byte, which reads its low bits
        // modulo 5 only: mostly none; 3 is refused.
        let min_alignment = [0, 0, 0, 0, 256, 4096, 1 << 16, 3][usize::from(buffer_usage >> 4 & 7)];
        use vk::BufferUsageFlags as B;
        let buffer_usage = [
            B::empty(),
            B::TRANSFER_SRC,
            B::UNIFORM_BUFFER | B::STORAGE_BUFFER | B::VERTEX_BUFFER,
            B::SHADER_DEVICE_ADDRESS | B::STORAGE_BUFFER,
            B::TRANSFER_SRC | B::from_raw(0x0020_0000),
        ][buffer_usage as usize % 5];
        let desc = UploadRingDesc {
            size,
            usage,
            buffer_usage,
            grow,
            name: grow.then_some("fuzz-ring"),
            min_alignment,
            ..UploadRingDesc::default()
        };
        let before = tally(&self.allocator.stats());
        let device = self.before();
        let result = if unchecked {
            // SAFETY: the fake device takes any buffer usage.
            unsafe { self.allocator.create_upload_ring_unchecked(&desc) }
        } else {
            self.allocator.create_upload_ring(&desc)
        };
        // The usage its chunks' memory is asked for (`ring_memory`).
        let memory_usage = if buffer_usage.contains(B::SHADER_DEVICE_ADDRESS) {
            usage | Usage::DEVICE_ADDRESS
        } else {
            usage
        };
        let flaw = if size == 0 {
            Some(Error::ZeroSize)
        } else if buffer_usage.is_empty() {
            Some(Error::InvalidConfig("empty"))
        } else if min_alignment == 3 {
            Some(Error::AlignmentNotPowerOfTwo(3))
        } else if buffer_usage.contains(B::from_raw(0x0020_0000)) && !unchecked {
            Some(Error::InvalidConfig("beyond core"))
        } else if (buffer_usage.contains(B::SHADER_DEVICE_ADDRESS)
            || usage.contains(Usage::DEVICE_ADDRESS))
            && !self.layout.buffer_device_address
        {
            Some(Error::DeviceAddressNotEnabled)
        } else if self.suiting_types(memory_usage, 1) == 0 {
            // `check_ring_desc`: `memory_type_for_desc` of the usable types.
            Some(Error::NoSuitableMemoryType {
                memory_type_bits: self.usable_types(),
                usage: memory_usage,
            })
        } else {
            None
        };
        let unsuitable = self.ring_no_suitable_type(memory_usage, buffer_usage, size);
        let ring = match (result, flaw) {
            (Ok(ring), None) if unsuitable.is_some() => {
                panic!("{desc:?} made {ring:?}, not {unsuitable:?}")
            }
            (Ok(ring), None) => ring,
            (Ok(ring), Some(flaw)) => panic!("{desc:?} made {ring:?}, not {flaw:?}"),
            (Err(error), flaw) => {
                match (&error, &flaw) {
                    (Error::InvalidConfig(_), Some(Error::InvalidConfig(_))) => {}
                    (_, Some(flaw)) => assert_eq!(&error, flaw, "{desc:?}"),
                    (Error::NoSuitableMemoryType { .. }, None) => {
                        assert_eq!(Some(&error), unsuitable.as_ref(), "{desc:?}");
                    }
                    (_, None) => {
                        let ok = self.memory_error_ok(&error, &device);
                        assert!(ok, "{desc:?}: undocumented {error:?}");
                        self.check_driver_asked(&error, &device.counters, &desc);
                        let largest = self.layout.memory_heaps.iter().map(|h| h.size).max();
                        if largest.is_some_and(|l| size > l) {
                            assert!(
                                matches!(error, Error::SizeExceedsHeaps { .. }),
                                "{desc:?}: {error:?}"
                            );
                        }
                    }
                }
                assert_eq!(tally(&self.allocator.stats()), before, "{desc:?} failed");
                assert!(self.device.live_allocations().len() <= device.objects);
                return;
            }
        };
        let host_access = usage.needs_host_access();
        let chunk = self.new_chunk(&before, size, buffer_usage, host_access);
        self.rings.push(RingModel {
            ring,
            chunk_size: size,
            grow,
            host_access,
            device_address: buffer_usage.contains(B::SHADER_DEVICE_ADDRESS),
            buffer_usage,
            min_alignment,
            chunks: vec![chunk],
            live: Vec::new(),
        });
    }

    /// The error allocating a ring chunk of `size` bytes whose memory is
    /// for `usage` meets when no memory type its buffer allows suits the
    /// usage (`no_candidate_error`), where the chunk's earlier checks pass
    /// it (`create_ring_chunk`): the fake device's buffers allow every type
    /// the layout's driver lets them (`BufferRequirements::memory_type_bits`)
    /// but the lazily allocated ones, so a ring that only other types suit
    /// (checked by `check_ring_desc`, which asks of every usable type)
    /// gets `NoSuitableMemoryType` naming the buffer's types when its
    /// size (rounded as the buffer's requirements) is past no allowed heap.
    /// None for a ring made once: its next chunks have the same buffer
    /// bits and usage.
    fn ring_no_suitable_type(
        &self,
        usage: Usage,
        buffer_usage: vk::BufferUsageFlags,
        size: u64,
    ) -> Option<Error> {
        let answer = &self.layout.buffer_requirements;
        let buffer_bits = self.layout.buffer_memory_type_bits();
        let allowed = buffer_bits & self.usable_types();
        if allowed == 0 || allowed & self.suiting_types(usage, 0) != 0 {
            return None;
        }
        let largest = (self.layout.memory_types.iter().enumerate())
            .filter(|(t, _)| allowed & (1 << t) != 0)
            .filter_map(|(_, ty)| self.layout.memory_heaps.get(ty.heap as usize))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        let required = answer.size(size, buffer_usage)?;
        (required <= largest).then_some(Error::NoSuitableMemoryType {
            memory_type_bits: buffer_bits,
            usage,
        })
    }

    /// An upload ring that does not grow, of `size` bytes, for host
    /// uploads, or with `readback` for readback (`Usage::READBACK`:
    /// host-cached memory, non-coherent on some layouts) (`Setup::flags`
    /// bit 5). With `device_address`, on a layout with buffer device
    /// addresses, its buffers are `SHADER_DEVICE_ADDRESS | STORAGE_BUFFER`
    /// and its allocations carry device addresses: short inputs reach
    /// them, which CreateRing's picks seldom did.
    pub fn start_ring(&mut self, size: u16, readback: bool, device_address: bool) {
        let usage = if readback { 4 } else { 1 };
        let buffer_usage = if device_address && self.layout.buffer_device_address {
            3
        } else {
            1
        };
        self.create_ring(3, size, usage, buffer_usage, false, false);
    }

    fn ring_pick(&self, pick: u8) -> Option<Result<usize, UploadRing>> {
        let total = self.rings.len() + self.dead_rings.len();
        if total == 0 {
            return None;
        }
        let i = pick as usize % total;
        Some(if i < self.rings.len() {
            Ok(i)
        } else {
            Err(self.dead_rings[i - self.rings.len()])
        })
    }
}

impl Walk {
    pub(super) fn destroy_ring(&mut self, pick: u8) {
        let Some(picked) = self.ring_pick(pick) else {
            return;
        };
        let i = match picked {
            Err(dead) => {
                let result = self.allocator.destroy_upload_ring(dead);
                return assert_eq!(result, Err(Error::StaleAllocation));
            }
            Ok(i) => i,
        };
        let model = self.rings.swap_remove(i);
        assert_eq!(self.allocator.destroy_upload_ring(model.ring), Ok(()));
        self.dead_rings.push(model.ring);
        for (allocation, _) in model.live {
            self.stale_ring.push(allocation);
        }
        for chunk in model.chunks {
            self.current.push(chunk.held);
        }
    }

    /// Forgets the ring allocations of the frames collected.
    pub(super) fn reclaim_rings(&mut self) {
        let oldest = self.next_frame - self.sealed.len() as u64;
        for chunk in self.rings.iter_mut().flat_map(|r| r.chunks.iter_mut()) {
            chunk.used.retain(|u| u.0 >= oldest);
            if chunk.used.is_empty() {
                chunk.head = 0;
            }
        }
        for ring in &mut self.rings {
            let (stale, live) = ring.live.drain(..).partition(|(a, _)| a.frame() < oldest);
            ring.live = live;
            let stale: Vec<_> = stale;
            self.stale_ring.extend(stale.into_iter().map(|(a, _)| a));
        }
        let keep = self.stale_ring.len().saturating_sub(8);
        self.stale_ring.drain(..keep);
    }

    /// Whether `end_frame` must refuse the frame: a chunk holds as many
    /// sealed frames as it tracks.
    pub(super) fn rings_full_of_frames(&self) -> bool {
        self.rings
            .iter()
            .flat_map(|r| r.chunks.iter())
            .any(|c| RingModel::sealed_in(c, self.next_frame, self.sealed.len()) >= RING_FRAMES)
    }

    /// Ring allocations of one chunk never overlap while live, and their
    /// bytes read back.
    pub(super) fn check_rings(&self) {
        for ring in &self.rings {
            let mut ranges: Vec<(vk::Buffer, u64, u64)> = ring
                .live
                .iter()
                .map(|(a, _)| (a.buffer(), a.buffer_offset(), a.buffer_offset() + a.size()))
                .collect();
            ranges.sort_unstable();
            for pair in ranges.windows(2) {
                if pair[0].0 == pair[1].0 {
                    assert!(pair[0].2 <= pair[1].1, "ring allocations {pair:?} overlap");
                }
            }
            for (a, tag) in &ring.live {
                let Some(tag) = *tag else { continue };
                // A tag is written only where the host sees the ring.
                let p = a.mapped_ptr().expect("a tagged ring allocation").as_ptr();
                // SAFETY: the allocation lies in its chunk's persistent
                // mapping, alive while the ring is; nothing writes it now.
                let (first, last) = unsafe { (p.read(), p.add(a.size() as usize - 1).read()) };
                assert_eq!((first, last), (tag, tag), "ring bytes of {a:?} clobbered");
            }
        }
    }

    /// The ring chunks, as ranges the allocator counts.
    pub(super) fn ring_chunks(&self) -> impl Iterator<Item = Held> + '_ {
        self.rings
            .iter()
            .flat_map(|r| r.chunks.iter().map(|c| c.held))
    }
}

/// Sealed frames a ring chunk tracks (the library's `RING_FRAMES`).
const RING_FRAMES: u64 = 64;
