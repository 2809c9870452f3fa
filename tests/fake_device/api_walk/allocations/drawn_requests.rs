//! The walk's requests, drawn at random: size, kind, usage, alignment,
//! pool, dedicated policy and target, strategy, name.

use crate::FakeTarget;

use ash::vk::{self, Handle};
// `DedicatedTarget` from the crate root, beside `DedicatedHint`, as users
// who build requests by hand write it.
use vk_suballoc::{
    DedicatedHint, DedicatedPolicy, DedicatedTarget, Request, ResourceKind, Strategy, Usage,
};

use super::super::{Walk, KINDS, MIB, NAMES, USAGES};

impl Walk {
    /// A size from one byte to beyond every heap, around half a block at times.
    fn draw_size(&mut self) -> u64 {
        let largest_heap = self.layout.memory_heaps.iter().map(|h| h.size).max();
        let largest_heap = largest_heap.unwrap_or(1);
        let types = self.preferred.len() as u64;
        let block = self.preferred[self.rng.below(types) as usize];
        match self.rng.below(100) {
            0 => 0,
            1 | 2 => largest_heap + 1 + self.rng.below(largest_heap),
            3..=6 => (block / 2).saturating_sub(512) + 1 + self.rng.below(1024),
            7..=9 => 1 + self.rng.below(2 * block),
            10..=39 => 1 + self.rng.below(256),
            40..=69 => 1 + self.rng.below(16 << 10),
            _ => 1 + self.rng.below(MIB),
        }
    }

    /// An `AllocationDesc::min_alignment`: mostly a power of two up to
    /// 4 MiB; rarely 0 (none), a huge one no block offset but 0 meets, or
    /// one that is not a power of two (refused).
    fn draw_min_alignment(&mut self) -> u64 {
        match self.rng.below(40) {
            0 => [3, 96, 3 << 20, u64::MAX][self.rng.below(4) as usize],
            1 => [1 << 40, 1 << 63][self.rng.below(2) as usize],
            2 => 0,
            _ => 1 << self.rng.below(23),
        }
    }

    pub(super) fn draw_request(&mut self) -> (Request<'static>, Option<u64>) {
        let rng = &mut self.rng;
        let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
        let mut usage = if rng.below(30) == 0 {
            Usage::default()
        } else {
            USAGES[rng.below(USAGES.len() as u64) as usize]
        };
        if rng.below(10) == 0 {
            usage |= Usage::DEVICE_ADDRESS;
        }
        let alignment: u64 = match rng.below(60) {
            0 => [0, 3, 48, 1000][rng.below(4) as usize],
            _ if kind == ResourceKind::OptimalImage => 1 << (8 + rng.below(9)),
            // Past 4 KiB, sizes are no longer rounded up to the alignment.
            1..=3 => 1 << (12 + rng.below(5)),
            _ => 1 << rng.below(12),
        };
        let types = self.layout.memory_types.len() as u64;
        let all = (1u32 << types) - 1;
        let memory_type_bits = match rng.below(12) {
            0..=6 => !0,
            7 | 8 if types > 1 => all & !(1 << rng.below(types)),
            9 | 10 => rng.next() as u32 & all,
            _ => rng.next() as u32 | 1 << rng.below(types),
        };
        let policy = match rng.below(10) {
            0 => DedicatedPolicy::Always,
            1 => DedicatedPolicy::Never,
            _ => DedicatedPolicy::Auto,
        };
        let hint = DedicatedHint {
            required: rng.below(25) == 0,
            preferred: rng.below(12) == 0,
        };
        let name = (rng.below(5) < 2).then(|| NAMES[rng.below(3) as usize]);
        let within_budget = rng.below(7) == 0;
        let priority =
            (rng.below(10) == 0).then(|| [f32::NAN, -1.0, 0.25, 2.0][rng.below(4) as usize]);
        // A driver requirement without a target is a bad request
        // (MissingDedicatedTarget): one in four of them.
        let target = if hint.required {
            rng.below(4) != 0
        } else {
            (policy == DedicatedPolicy::Always || hint.preferred) && rng.below(2) == 0
        };
        let size = self.draw_size();
        // One image in four aligned as the layout's driver aligns it
        // (`ImageRequirements`: RADV's 64 KiB for large or depth images,
        // linear ones' 64 or 256), the odd alignments above aside.
        let alignment = match kind {
            ResourceKind::OptimalImage | ResourceKind::LinearImage
                if alignment.is_power_of_two() && self.rng.below(4) == 0 =>
            {
                let tiling = if kind == ResourceKind::LinearImage {
                    vk::ImageTiling::LINEAR
                } else {
                    vk::ImageTiling::OPTIMAL
                };
                let format = [vk::Format::R8G8B8A8_UNORM, vk::Format::D32_SFLOAT]
                    [self.rng.below(2) as usize];
                (self.layout.image_requirements).alignment(size, format, tiling)
            }
            _ => alignment,
        };
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits,
        };
        let mut request = Request::new(requirements, usage, kind)
            .dedicated(policy)
            .driver_dedicated(hint);
        request.desc.name = name;
        request.desc.within_budget = within_budget;
        request.desc.priority = priority;
        // Added to the draws above, not instead of any: one request in
        // eight takes existing memory only, one in eight carries an
        // alignment of its own.
        request.desc.existing_memory_only = self.rng.below(8) == 0;
        if self.rng.below(8) == 0 {
            request.desc.min_alignment = self.draw_min_alignment();
        }
        // And one in four places with `Strategy::MinMemory`, one in sixteen
        // each with `Strategy::MinOffset` and `MaxOffset` (no run slot for a
        // small buffer), which change where in a block it lands, not what
        // the walk checks.
        request.desc.strategy = match self.rng.below(16) {
            0..=3 => Strategy::MinMemory,
            4 => Strategy::MinOffset,
            5 => Strategy::MaxOffset,
            _ => Strategy::MinTime,
        };
        if let Some(pool) = self.draw_pool() {
            request = self.aim_at_pool(request, pool);
        }
        let resource = target.then(|| self.device.create_resource());
        if let Some(handle) = resource {
            request = request.fake_target(match kind {
                ResourceKind::Buffer => DedicatedTarget::Buffer(vk::Buffer::from_raw(handle)),
                _ => DedicatedTarget::Image(vk::Image::from_raw(handle)),
            });
        }
        (request, resource)
    }
}
