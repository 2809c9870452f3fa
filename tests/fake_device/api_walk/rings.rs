//! The walk's upload rings: created, filled, grown, written and destroyed;
//! each chunk counted as the allocation it is, at the place its ring
//! allocations reveal.

use ash::vk;
use vk_suballoc::report::Stats;
use vk_suballoc::{
    DedicatedPolicy, Error, Request, ResourceKind, RingAllocation, UploadRingDesc, Usage,
};

use super::allocations::unchanged_but_released_empty_blocks;
use super::{overlaps, Counted, Place, Ring, Walk};

impl Walk {
    pub(super) fn ring_op(&mut self) {
        match self.rng.below(10) {
            0 | 1 if self.rings.len() < 3 => self.create_ring(),
            2 => self.destroy_ring(),
            3 => {
                if self.ring_live.is_empty() {
                    return;
                }
                let i = self.rng.below(self.ring_live.len() as u64) as usize;
                let a = self.ring_live[i];
                let result = self.allocator.ring_write(&a, a.size() - 1, &[0x5a]);
                let expected = ring_write_result(&a, Ok(()));
                assert_eq!(
                    result,
                    expected,
                    "{}: {a:?} of a frame in flight",
                    self.ctx()
                );
            }
            4 => {
                let Some(stale) = self.ring_stale.pop() else {
                    return;
                };
                let result = self.allocator.ring_write(&stale, 0, &[1]);
                assert_eq!(
                    result,
                    ring_write_result(&stale, Err(Error::StaleAllocation)),
                    "{}: {stale:?}",
                    self.ctx()
                );
            }
            _ => self.ring_allocate(),
        }
    }

    /// The request behind a ring chunk of `bytes` whose buffer has
    /// `buffer_usage`, as the fake device's buffers ask for it.
    pub(super) fn chunk_request(
        &self,
        bytes: u64,
        usage: Usage,
        buffer_usage: vk::BufferUsageFlags,
    ) -> Request<'static> {
        let requirements = vk::MemoryRequirements {
            size: self.chunk_bytes(bytes, buffer_usage),
            alignment: self.layout.buffer_requirements.alignment(buffer_usage),
            memory_type_bits: self.layout.buffer_memory_type_bits(),
        };
        Request::new(requirements, usage, ResourceKind::Buffer).dedicated(DedicatedPolicy::Never)
    }

    /// The size a chunk of `bytes` with `buffer_usage` takes in its
    /// memory: its buffer's requirements', as the layout's driver rounds
    /// them.
    pub(super) fn chunk_bytes(&self, bytes: u64, buffer_usage: vk::BufferUsageFlags) -> u64 {
        let answer = &self.layout.buffer_requirements;
        answer.size(bytes, buffer_usage).expect("a chunk's size")
    }

    /// The chunk of `bytes` a ring call just added: one more allocation
    /// of that size in a block of one memory type.
    pub(super) fn new_chunk(&self, before: &Stats, bytes: u64) -> Counted {
        let after = self.allocator.stats();
        let changed: Vec<usize> = (0..after.memory_types.len())
            .filter(|&t| after.memory_types[t] != before.memory_types[t])
            .filter(|&t| {
                after.memory_types[t].allocations() != before.memory_types[t].allocations()
            })
            .collect();
        assert_eq!(
            changed.len(),
            1,
            "{}: a new chunk in {changed:?}",
            self.ctx()
        );
        let t = changed[0];
        let (was, now) = (&before.memory_types[t], &after.memory_types[t]);
        assert_eq!(
            now.block_allocations,
            was.block_allocations + 1,
            "{}",
            self.ctx()
        );
        assert_eq!(now.live_bytes(), was.live_bytes() + bytes, "{}", self.ctx());
        Counted {
            memory_type: t as u32,
            size: bytes,
            dedicated: false,
            place: None,
            deferred: false,
            pool: None,
        }
    }

    pub(super) fn create_ring(&mut self) {
        let size = if self.rng.below(15) == 0 {
            0
        } else {
            256 + self.rng.below(64 << 10)
        };
        let usages = [
            Usage::UPLOAD | Usage::DEVICE_LOCAL,
            Usage::UPLOAD,
            Usage::READBACK,
            // GPU scratch: in VRAM where there is some the host cannot see.
            Usage::DEVICE_LOCAL,
            // Host-visible memory first, else any.
            Usage::UPLOAD.union(Usage::ALLOW_TRANSFER_INSTEAD),
        ];
        let plain = UploadRingDesc::default().buffer_usage;
        // Mostly the default; refused: none, or (by the safe call) an
        // extension's bit; device addresses need buffer device address.
        let buffer_usages = [
            plain,
            plain,
            plain,
            vk::BufferUsageFlags::empty(),
            plain | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            plain | vk::BufferUsageFlags::RESOURCE_DESCRIPTOR_BUFFER_EXT,
        ];
        // Mostly none; refused: one that is no power of two.
        let alignments = [0, 0, 0, 0, 4096, 1 << 16, 3];
        let desc = UploadRingDesc {
            size,
            usage: usages[self.rng.below(usages.len() as u64) as usize],
            buffer_usage: buffer_usages[self.rng.below(buffer_usages.len() as u64) as usize],
            grow: self.rng.below(2) == 0,
            name: (self.rng.below(2) == 0).then_some("walk-ring"),
            min_alignment: alignments[self.rng.below(alignments.len() as u64) as usize],
            ..UploadRingDesc::default()
        };
        let unchecked = self.rng.below(2) == 0;
        // The refusals before anything is made, in their documented order.
        let extension =
            !(desc.buffer_usage & vk::BufferUsageFlags::RESOURCE_DESCRIPTOR_BUFFER_EXT).is_empty();
        let device_address = desc
            .buffer_usage
            .contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
        let refused = if size == 0 {
            Some(Error::ZeroSize)
        } else if desc.buffer_usage.is_empty() {
            Some(Error::InvalidConfig(
                "UploadRingDesc::buffer_usage must not be empty",
            ))
        } else if !desc.min_alignment.is_power_of_two() && desc.min_alignment != 0 {
            Some(Error::AlignmentNotPowerOfTwo(desc.min_alignment))
        } else if extension && !unchecked {
            Some(Error::InvalidConfig(
                "UploadRingDesc::buffer_usage has a bit beyond core Vulkan 1.0's and \
                 SHADER_DEVICE_ADDRESS: use create_upload_ring_unchecked for an \
                 extension's usage",
            ))
        } else if device_address && !self.layout.buffer_device_address {
            Some(Error::DeviceAddressNotEnabled)
        } else {
            None
        };
        let before = self.allocator.stats();
        let counters = self.device.counters();
        let resources = self.device.live_resources();
        let result = if unchecked {
            // SAFETY: the fake device takes any buffer usage.
            unsafe { self.allocator.create_upload_ring_unchecked(&desc) }
        } else {
            self.allocator.create_upload_ring(&desc)
        };
        let fired = self.faults_fired(&counters);
        if let (Some(expected), Err(error)) = (refused, result) {
            // The exact refusal, the text of an `InvalidConfig` included:
            // it names the rule broken, and another rule's would pass a
            // check of the variant alone.
            assert_eq!(error, expected, "{}: {desc:?}", self.ctx());
            assert_eq!(self.allocator.stats(), before, "{}", self.ctx());
            assert_eq!(self.device.live_resources(), resources, "{}", self.ctx());
            return;
        }
        assert_eq!(refused, None, "{}: {desc:?} gave {result:?}", self.ctx());
        match result {
            Ok(ring) => {
                let bytes = self.chunk_bytes(size, desc.buffer_usage);
                let chunk = self.new_chunk(&before, bytes);
                self.rings.push(Ring {
                    ring,
                    usage: desc.usage,
                    buffer_usage: desc.buffer_usage,
                    grow: desc.grow,
                    chunk_size: size,
                    min_alignment: desc.min_alignment,
                    device_address,
                    chunks: vec![(None, chunk)],
                    chunk_frames: vec![self.next_frame],
                });
            }
            Err(error) => {
                self.check_driver_asked(error, &counters, &desc);
                let request = self.chunk_request(size, desc.usage, desc.buffer_usage);
                self.explain(error, &request, &before, fired);
                // A chunk's request short of memory may have released kept
                // empty blocks before it failed.
                let after = self.allocator.stats();
                let expected = unchanged_but_released_empty_blocks(&before, &after);
                assert_eq!(after, expected, "{}: {error:?}", self.ctx());
                assert_eq!(self.device.live_resources(), resources, "{}", self.ctx());
            }
        }
    }

    pub(super) fn destroy_ring(&mut self) {
        if self.rings.is_empty() || self.rng.below(4) == 0 {
            if let Some(&dead) = self.dead_rings.last() {
                let result = self.allocator.destroy_upload_ring(dead);
                assert_eq!(result, Err(Error::StaleAllocation), "{}", self.ctx());
            }
            return;
        }
        let index = self.rng.below(self.rings.len() as u64) as usize;
        let ring = self.rings.swap_remove(index);
        let result = self.allocator.destroy_upload_ring(ring.ring);
        assert_eq!(result, Ok(()), "{}", self.ctx());
        let buffers: Vec<vk::Buffer> = ring.chunks.iter().filter_map(|c| c.0).collect();
        for &(_, chunk) in &ring.chunks {
            self.defer(chunk);
        }
        let (gone, keep): (Vec<_>, Vec<_>) = self
            .ring_live
            .drain(..)
            .partition(|a| buffers.contains(&a.buffer()));
        self.ring_live = keep;
        self.ring_stale.extend(gone);
        self.dead_rings.push(ring.ring);
    }

    pub(super) fn ring_allocate(&mut self) {
        if self.rings.is_empty() || self.rng.below(30) == 0 {
            if let Some(&dead) = self.dead_rings.last() {
                let result = self.allocator.ring_allocate(dead, 16, 16).map(|_| ());
                assert_eq!(result, Err(Error::StaleAllocation), "{}", self.ctx());
            }
            return;
        }
        let index = self.rng.below(self.rings.len() as u64) as usize;
        let size = match self.rng.below(20) {
            0 => 0,
            1 | 2 => 1 + self.rng.below(80 << 10),
            _ => 1 + self.rng.below(4096),
        };
        let align = if size > 0 && self.rng.below(30) == 0 {
            3
        } else {
            1 << self.rng.below(9)
        };
        let before = self.allocator.stats();
        let counters = self.device.counters();
        let resources = self.device.live_resources();
        let result = self
            .allocator
            .ring_allocate(self.rings[index].ring, size, align);
        let fired = self.faults_fired(&counters);
        let ring = &self.rings[index];
        let (grow, chunk_size, usage) = (ring.grow, ring.chunk_size, ring.usage);
        let buffer_usage = ring.buffer_usage;
        match result {
            Ok(allocation) => self.accept_ring(index, allocation, size, align, &before),
            Err(error) => {
                let ctx = self.ctx();
                match error {
                    Error::ZeroSize => assert_eq!(size, 0, "{ctx}"),
                    Error::AlignmentNotPowerOfTwo(a) => assert_eq!(a, 3, "{ctx}"),
                    Error::UploadRingFull { size: s, .. } => {
                        assert!(!grow && s == size, "{ctx}: {error:?}");
                    }
                    Error::UploadRingTooSmall { size: s, capacity } => {
                        assert!(
                            !grow && s == size && capacity == chunk_size && size > capacity,
                            "{ctx}: {error:?}"
                        );
                    }
                    _ => {
                        assert!(grow, "{ctx}: {error:?}");
                        let bytes = chunk_size.max(size);
                        let request = self.chunk_request(bytes, usage, buffer_usage);
                        self.check_driver_asked(error, &counters, &request);
                        self.explain(error, &request, &before, fired);
                    }
                }
                let after = self.allocator.stats();
                let expected = unchanged_but_released_empty_blocks(&before, &after);
                assert_eq!(after, expected, "{ctx}: {error:?}");
                assert_eq!(self.device.live_resources(), resources, "{ctx}");
            }
        }
    }

    /// Checks a new ring allocation against its ring, its chunk and the
    /// other live ring allocations, and writes to it.
    pub(super) fn accept_ring(
        &mut self,
        index: usize,
        a: RingAllocation,
        size: u64,
        align: u64,
        before: &Stats,
    ) {
        let ctx = self.ctx();
        assert_eq!((a.size(), a.frame()), (size, self.next_frame), "{ctx}");
        assert_eq!(a.buffer_offset() % align, 0, "{ctx}");
        let grew = self.allocator.stats().allocations() != before.allocations();
        let ring = &self.rings[index];
        let known = ring.chunks.iter().position(|c| c.0 == Some(a.buffer()));
        let chunk = match known {
            Some(chunk) => {
                assert!(
                    !grew,
                    "{ctx}: a chunk was added, yet {a:?} is in an old one"
                );
                chunk
            }
            None if grew => {
                assert!(ring.grow, "{ctx}: a ring that does not grow grew");
                let bytes = ring.chunk_size.max(size);
                let bytes = self.chunk_bytes(bytes, ring.buffer_usage);
                let counted = self.new_chunk(before, bytes);
                let ring = &mut self.rings[index];
                ring.chunks.push((Some(a.buffer()), counted));
                ring.chunk_frames.push(self.next_frame);
                ring.chunks.len() - 1
            }
            None => {
                assert!(
                    ring.chunks[0].0.is_none(),
                    "{ctx}: {a:?} in an unknown chunk"
                );
                self.rings[index].chunks[0].0 = Some(a.buffer());
                0
            }
        };
        let start = a.memory_offset() - a.buffer_offset();
        let counted = self.rings[index].chunks[chunk].1;
        assert!(
            a.buffer_offset() + size <= counted.size,
            "{ctx}: {a:?} past its chunk"
        );
        match counted.place {
            Some(place) => {
                assert_eq!((place.memory, place.offset), (a.memory(), start), "{ctx}");
            }
            None => {
                let place = Place {
                    memory: a.memory(),
                    offset: start,
                    kind: ResourceKind::Buffer,
                };
                let buffer_alignment = self
                    .layout
                    .buffer_requirements
                    .alignment(self.rings[index].buffer_usage);
                assert_eq!(
                    start % buffer_alignment,
                    0,
                    "{ctx}: a chunk off its buffer's alignment"
                );
                // A device-address ring's chunks at 256 by default
                // (`UploadRingDesc::min_alignment`).
                let ring = &self.rings[index];
                let least = match ring.min_alignment {
                    0 if ring.device_address => 256,
                    asked => asked.max(1),
                };
                assert_eq!(
                    start % least,
                    0,
                    "{ctx}: a chunk off its ring's min_alignment"
                );
                self.assert_disjoint(place, counted.size, "a ring chunk");
                self.rings[index].chunks[chunk].1.place = Some(place);
            }
        }
        // The device address of its first byte in its memory object, in
        // a ring whose buffers take theirs.
        let address = self.rings[index]
            .device_address
            .then(|| self.device.memory_address(a.memory()).unwrap() + a.memory_offset());
        assert_eq!(a.device_address(), address, "{ctx}: {a:?}");
        for other in &self.ring_live {
            let (x, y) = (other.memory_offset(), a.memory_offset());
            assert!(
                other.memory() != a.memory() || !overlaps((x, other.size()), (y, size)),
                "{ctx}: {a:?} overlaps {other:?} of a frame in flight"
            );
        }
        // Mapped in memory the host sees, always so for a ring the host
        // writes; a GPU-only ring's may be in VRAM, unmapped.
        let props = self.layout.memory_types[counted.memory_type as usize].props;
        let host = a.mapped_ptr().is_some();
        let usage = self.rings[index].usage;
        assert_eq!(host, self.is_mapped(props, usage), "{ctx}: {a:?}");
        assert!(
            host || !self.rings[index].usage.needs_host_access(),
            "{ctx}: {a:?}"
        );
        let bytes = vec![0x5a; size.min(64) as usize];
        let expected = ring_write_result(&a, Ok(()));
        assert_eq!(self.allocator.ring_write(&a, 0, &bytes), expected, "{ctx}");
        let flushed = self.allocator.ring_flush(&a, ..);
        assert_eq!(flushed, expected, "{ctx}");
        self.ring_live.push(a);
    }
}

/// What a `ring_write` into `a` gives: `NotHostVisible` in memory the host
/// cannot see (checked before the frame), else `otherwise`.
fn ring_write_result(a: &RingAllocation, otherwise: Result<(), Error>) -> Result<(), Error> {
    match a.mapped_ptr() {
        Some(_) => otherwise,
        None => Err(Error::NotHostVisible),
    }
}
