//! Device addresses as shaders use them: a compute shader
//! (`shaders/xor_copy.comp`) reads words the host wrote into upload-ring
//! allocations at the addresses `RingAllocation::device_address` gives,
//! writes them into a GPU-only scratch ring's allocations at theirs, and a
//! second pass copies those into a readback buffer at the driver's address.
//! The other tests compare `device_address` with `vkGetBufferDeviceAddress`;
//! here the GPU itself follows the addresses, so an address off by an
//! allocation's offset in its chunk, or two allocations whose addresses
//! overlap, change the bytes read back. The validation layer's GPU-assisted
//! validation runs too: an access outside every live buffer is an error
//! even where the bytes happen to come out right.

use std::collections::HashSet;

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{Allocation, AllocationDesc, Allocator, RingAllocation, UploadRingDesc, Usage};

use super::super::allocator_setup::{allocator_for, IdleOnDrop};
use crate::seeded_rng::Rng;
use crate::support::{test_each_profile, ContextOptions, Profile, VulkanContext};

/// `shaders/xor_copy.comp` compiled (`scripts/build-test-shaders.sh`).
const XOR_COPY_SPV: &[u8] = include_bytes!("../shaders/xor_copy.spv");

/// The shader's workgroup width (`local_size_x`).
const WORKGROUP: u32 = 64;

/// The shader's push constants: `target[i] = source[i] ^ salt` for `i`
/// below `count`.
#[repr(C)]
#[derive(Clone, Copy)]
struct XorCopy {
    source: vk::DeviceAddress,
    target: vk::DeviceAddress,
    count: u32,
    salt: u32,
}

impl XorCopy {
    fn bytes(&self) -> [u8; 24] {
        let mut bytes = [0; 24];
        bytes[..8].copy_from_slice(&self.source.to_ne_bytes());
        bytes[8..16].copy_from_slice(&self.target.to_ne_bytes());
        bytes[16..20].copy_from_slice(&self.count.to_ne_bytes());
        bytes[20..].copy_from_slice(&self.salt.to_ne_bytes());
        bytes
    }
}

/// The compute pipeline of `xor_copy`, destroyed with it.
struct XorCopyPipeline<'a> {
    device: &'a ash::Device,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

impl<'a> XorCopyPipeline<'a> {
    fn new(device: &'a ash::Device) -> Self {
        let code = ash::util::read_spv(&mut std::io::Cursor::new(XOR_COPY_SPV))
            .expect("xor_copy.spv is SPIR-V");
        let module_info = vk::ShaderModuleCreateInfo::default().code(&code);
        // SAFETY: valid SPIR-V (spirv-val ran on it when it was built; the
        // validation layer checks it again).
        let module = unsafe { device.create_shader_module(&module_info, None) }.unwrap();
        let push_range = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(std::mem::size_of::<XorCopy>() as u32)];
        let layout_info = vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&push_range);
        // SAFETY: a valid create info.
        let layout = unsafe { device.create_pipeline_layout(&layout_info, None) }.unwrap();
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let pipeline_info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)];
        // SAFETY: the module and layout above, which the shader matches.
        let pipeline = unsafe {
            device.create_compute_pipelines(vk::PipelineCache::null(), &pipeline_info, None)
        }
        .map_err(|(_, error)| error)
        .unwrap()[0];
        // SAFETY: the pipeline keeps what it needs of the module.
        unsafe { device.destroy_shader_module(module, None) };
        Self {
            device,
            layout,
            pipeline,
        }
    }

    /// Records one dispatch of `copy` into `command_buffer` (the pipeline
    /// bound).
    ///
    /// # Safety
    /// `command_buffer` is recording, with this pipeline bound.
    unsafe fn record(&self, command_buffer: vk::CommandBuffer, copy: XorCopy) {
        // SAFETY: the caller's contract; the range is the layout's.
        unsafe {
            self.device.cmd_push_constants(
                command_buffer,
                self.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &copy.bytes(),
            );
            self.device
                .cmd_dispatch(command_buffer, copy.count.div_ceil(WORKGROUP), 1, 1);
        }
    }
}

impl Drop for XorCopyPipeline<'_> {
    fn drop(&mut self) {
        // SAFETY: no command buffer using them is pending (the tests wait).
        unsafe {
            self.device.destroy_pipeline(self.pipeline, None);
            self.device.destroy_pipeline_layout(self.layout, None);
        }
    }
}

/// Shader writes of one pass made visible to the next pass's reads, or to
/// the host.
fn shader_barrier(
    device: &ash::Device,
    command_buffer: vk::CommandBuffer,
    (stage, access): (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(access)];
    // SAFETY: the command buffer is recording (the callers').
    unsafe {
        device.cmd_pipeline_barrier(
            command_buffer,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            stage,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    };
}

/// A host-readable buffer of `words` 32-bit words that the shader writes
/// through its device address: the buffer, its allocation and the address.
fn readback_buffer(
    allocator: &Allocator<AshMemoryDevice>,
    device: &ash::Device,
    words: usize,
) -> (vk::Buffer, Allocation, vk::DeviceAddress) {
    let info = vk::BufferCreateInfo::default()
        .size(4 * words as u64)
        .usage(vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS);
    // SAFETY: a valid create info.
    let (buffer, allocation) =
        unsafe { allocator.create_buffer(&info, &AllocationDesc::new(Usage::READBACK)) }.unwrap();
    let address_info = vk::BufferDeviceAddressInfo::default().buffer(buffer);
    // SAFETY: made with SHADER_DEVICE_ADDRESS usage and bound to memory
    // allocated for device addresses.
    let address = unsafe { device.get_buffer_device_address(&address_info) };
    (buffer, allocation, address)
}

/// Word `index` (32 bits, native order) of `bytes`.
fn word_at(bytes: &[u8], index: usize) -> u32 {
    let at = 4 * index;
    u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// One piece of the test: its words in the upload ring, their copy in the
/// scratch ring, and where the second pass puts them in the readback buffer.
struct Piece {
    upload: RingAllocation,
    scratch: RingAllocation,
    words: Vec<u32>,
    /// The piece's first word in the readback buffer.
    first: usize,
}

/// The largest alignment the pieces ask of `ring_allocate`.
const MAX_ALIGN: u64 = 256;

/// A ring of `size` bytes whose buffers shaders reach by device address,
/// growing when `grow`, with the default `min_alignment`: such a ring's
/// chunks start at multiples of 256 (= [`MAX_ALIGN`]) in their memory, so a
/// piece's device address is aligned as its offset in the buffer. Before
/// that default, a chunk a ring added lay in a block at its buffer's
/// alignment alone (16 or 64 bytes on some profiles; the first one happens
/// to start a block), 128 bytes off a 256-byte alignment there.
fn address_ring(
    allocator: &Allocator<AshMemoryDevice>,
    size: u64,
    usage: Usage,
    grow: bool,
) -> vk_suballoc::UploadRing {
    allocator
        .create_upload_ring(&UploadRingDesc {
            size,
            usage,
            buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            grow,
            ..UploadRingDesc::default()
        })
        .unwrap()
}

/// The body of the tests: an upload ring and a GPU-only scratch ring of
/// `ring_size`-byte chunks (growing when `grow`), pieces of `words(rng,
/// index)` words for each of `pieces` indices, each after a one-byte
/// allocation and aligned to 4 to 256 bytes, copied by the shader from
/// the upload ring into the scratch ring and on into a readback buffer,
/// checked there. Returns how many chunks (buffers) the upload pieces and
/// the scratch pieces lay in.
fn pieces_through_shaders(
    profile: Profile,
    ring_size: u64,
    grow: bool,
    pieces: u32,
    words: impl Fn(&mut Rng, u32) -> usize,
) -> [usize; 2] {
    let context = VulkanContext::with_options(profile, ContextOptions::default().gpu_assisted());
    assert!(
        context.vulkan_1_2_features_enabled,
        "{profile}: the harness enables bufferDeviceAddress on a Vulkan 1.2 device"
    );
    let allocator = allocator_for(&context);
    let device = &context.device;
    let _idle = IdleOnDrop(device);
    let pipeline = XorCopyPipeline::new(device);
    let mut rng = Rng::from_env(&format!(
        "shaders_reach_ring_allocations::{profile}:{ring_size}:{grow}"
    ));
    let upload = address_ring(&allocator, ring_size, Usage::UPLOAD, grow);
    let scratch = address_ring(&allocator, ring_size, Usage::DEVICE_LOCAL, grow);
    let mut all = Vec::new();
    let mut total_words = 0;
    for index in 0..pieces {
        let count = words(&mut rng, index);
        let size = 4 * count as u64;
        let align = MAX_ALIGN >> (2 * rng.below(4));
        // A one-byte allocation between pieces puts each next one on an
        // odd offset, from which its alignment alone moves it.
        allocator.ring_allocate(upload, 1, 1).unwrap();
        allocator.ring_allocate(scratch, 1, 1).unwrap();
        let words: Vec<u32> = (0..count as u32)
            .map(|word| (index << 24) ^ (word << 4) ^ 0x5a5a_0003)
            .collect();
        let upload_piece = allocator.ring_allocate(upload, size, align).unwrap();
        let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_ne_bytes()).collect();
        allocator.ring_write(&upload_piece, 0, &bytes).unwrap();
        let scratch_piece = allocator.ring_allocate(scratch, size, align).unwrap();
        for piece in [&upload_piece, &scratch_piece] {
            let address = piece.device_address().expect("a device-address ring");
            assert_eq!(
                address % align,
                0,
                "{profile}: piece {index} at {address:#x}"
            );
        }
        all.push(Piece {
            upload: upload_piece,
            scratch: scratch_piece,
            words,
            first: total_words,
        });
        total_words += count;
    }
    let pieces = all;
    let (readback, mut readback_allocation, readback_address) =
        readback_buffer(&allocator, device, total_words);
    const FIRST_SALT: u32 = 0x0f0f_1234;
    const SECOND_SALT: u32 = 0x7070_8001;
    context.run_one_time_commands(|device, command_buffer| {
        // SAFETY: a recording command buffer; every address is a live
        // ring allocation's or the readback buffer's, with the words
        // the dispatches read and write.
        unsafe {
            device.cmd_bind_pipeline(
                command_buffer,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.pipeline,
            );
            for piece in &pieces {
                pipeline.record(
                    command_buffer,
                    XorCopy {
                        source: piece.upload.device_address().unwrap(),
                        target: piece.scratch.device_address().unwrap(),
                        count: piece.words.len() as u32,
                        salt: FIRST_SALT,
                    },
                );
            }
            shader_barrier(
                device,
                command_buffer,
                (
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::AccessFlags::SHADER_READ,
                ),
            );
            for piece in &pieces {
                pipeline.record(
                    command_buffer,
                    XorCopy {
                        source: piece.scratch.device_address().unwrap(),
                        target: readback_address + 4 * piece.first as u64,
                        count: piece.words.len() as u32,
                        salt: SECOND_SALT,
                    },
                );
            }
        }
        shader_barrier(
            device,
            command_buffer,
            (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
        );
    });
    allocator
        .invalidate(&mut readback_allocation, 0..4 * total_words as u64)
        .unwrap();
    let bytes = allocator.mapped_slice(&readback_allocation).unwrap();
    for (index, piece) in pieces.iter().enumerate() {
        for (word_index, &word) in piece.words.iter().enumerate() {
            let read = word_at(bytes, piece.first + word_index);
            let expected = word ^ FIRST_SALT ^ SECOND_SALT;
            assert!(
                read == expected,
                "{profile}: piece {index} word {word_index}: read {read:#010x}, wrote {expected:#010x}"
            );
        }
    }
    let chunks = |piece: fn(&Piece) -> &RingAllocation| {
        let buffers: HashSet<vk::Buffer> = pieces.iter().map(|p| piece(p).buffer()).collect();
        buffers.len()
    };
    let used = [chunks(|p| &p.upload), chunks(|p| &p.scratch)];
    drop(pipeline);
    allocator.destroy_upload_ring(upload).unwrap();
    allocator.destroy_upload_ring(scratch).unwrap();
    // SAFETY: the GPU is done with everything (run_one_time_commands
    // waited).
    unsafe {
        allocator
            .destroy_buffer(readback, readback_allocation)
            .unwrap();
        allocator.collect_idle();
    }
    used
}

test_each_profile!(
    /// Words the host writes into upload-ring allocations (odd sizes,
    /// alignments 4 to 256, one-byte allocations between them) reach a
    /// compute shader at each allocation's `device_address`; the shader's
    /// writes at a GPU-only scratch ring's allocations' addresses stay
    /// apart (all written before any is read back); and they come back
    /// whole through the readback buffer, XORed with both passes' salts.
    fn shaders_reach_ring_allocations_at_their_device_addresses(profile) {
        let chunks = pieces_through_shaders(profile, 256 << 10, false, 40, |rng, _| {
            1 + rng.below(700) as usize
        });
        assert_eq!(chunks, [1, 1], "{profile}: one chunk per ring");
    }
);

test_each_profile!(
    /// As above, in growing rings of 64 KiB chunks that the pieces
    /// outgrow: each later chunk is a buffer of its own, whose address the
    /// pieces in it must start from, and one piece (80 000 bytes) is larger
    /// than a chunk, so the ring adds a chunk of that piece's size. Every
    /// piece reaches the shader and comes back whole.
    fn shaders_reach_a_grown_rings_later_chunks(profile) {
        let chunks = pieces_through_shaders(profile, 64 << 10, true, 24, |rng, index| {
            if index == 9 {
                20_000
            } else {
                1 + rng.below(3000) as usize
            }
        });
        assert!(
            chunks.iter().all(|&count| count >= 3),
            "{profile}: the rings grew to {chunks:?} chunks"
        );
    }
);

/// Frames of [`a_ring_wraps_within_its_chunk_across_frames`] in flight.
const WRAP_IN_FLIGHT: usize = 2;

/// A frame's command pool, command buffer, fence, and the event its
/// commands wait for (set by the host once the next frame has allocated).
type FrameSlot = (vk::CommandPool, vk::CommandBuffer, vk::Fence, vk::Event);

/// A piece of a frame: its range in the ring's chunk, its words, and its
/// first word in the readback buffer.
type FramePiece = (std::ops::Range<u64>, Vec<u32>, usize);

/// Sets its events when dropped, then waits for the device to be idle: a
/// test that panics before setting one would otherwise leave the queue
/// waiting for it, and its unwinding would destroy the pipeline under
/// pending commands, then wait for idle forever (`IdleOnDrop`).
struct SetOnDrop<'a>(&'a ash::Device, Vec<vk::Event>);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        // SAFETY: live events of this device (destroyed only after this
        // guard is dropped); setting a set event is valid, and so is
        // waiting for idle on a live device.
        unsafe {
            for &event in &self.1 {
                let _ = self.0.set_event(event);
            }
            let _ = self.0.device_wait_idle();
        }
    }
}

test_each_profile!(
    /// An upload ring of one 64 KiB chunk (not growing) over 24 frames,
    /// two in flight, each frame's pieces (odd sizes, alignments 4 to 256,
    /// one-byte allocations between them) read by the shader at their
    /// `device_address` and written into the frame's part of a readback
    /// buffer: the ring wraps to its chunk's start as collected frames
    /// give their space back, and every piece, before and after each wrap,
    /// comes back whole. Each frame's commands wait for an event the host
    /// sets only once the next frame has allocated, so every frame
    /// allocates while the one before is in flight (its fence unsignalled):
    /// its pieces never overlap that frame's, and a piece the shader read
    /// at a stale or shifted address would come back wrong.
    fn a_ring_wraps_within_its_chunk_across_frames(profile) {
        const FRAMES: usize = 24;
        const CHUNK: u64 = 64 << 10;
        const PIECES: usize = 4;
        const MAX_WORDS: u64 = 1000;
        const SALT: u32 = 0x3c3c_5a01;
        // Without GPU-assisted validation, which waits for each submission
        // to complete (to read its findings back) and so would wait for an
        // event the host sets only after the submission returns.
        let context = VulkanContext::new(profile);
        assert!(context.vulkan_1_2_features_enabled, "{profile}: bufferDeviceAddress");
        let allocator = allocator_for(&context);
        let device = &context.device;
        let _idle = IdleOnDrop(device);
        let pipeline = XorCopyPipeline::new(device);
        let mut rng = Rng::from_env(&format!("a_ring_wraps_within_its_chunk::{profile}"));
        let ring = address_ring(&allocator, CHUNK, Usage::UPLOAD, false);
        let max_words = FRAMES * PIECES * MAX_WORDS as usize;
        let (readback, mut readback_allocation, readback_address) =
            readback_buffer(&allocator, device, max_words);
        let signalled = vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED);
        // SAFETY: valid create infos on a live device.
        let slots: Vec<FrameSlot> = (0..WRAP_IN_FLIGHT)
            .map(|_| unsafe {
                let pool_info = vk::CommandPoolCreateInfo::default()
                    .flags(vk::CommandPoolCreateFlags::TRANSIENT)
                    .queue_family_index(context.queue_family_index);
                let pool = device.create_command_pool(&pool_info, None).unwrap();
                let cmd_info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
                let cmd = device.allocate_command_buffers(&cmd_info).unwrap()[0];
                let fence = device.create_fence(&signalled, None).unwrap();
                let event = device.create_event(&vk::EventCreateInfo::default(), None).unwrap();
                (pool, cmd, fence, event)
            })
            .collect();
        let release = SetOnDrop(device, slots.iter().map(|slot| slot.3).collect());
        // Each frame's pieces.
        let mut frames: Vec<Vec<FramePiece>> = Vec::new();
        let mut buffers = HashSet::new();
        let mut total_words = 0;
        for frame in 0..FRAMES {
            let (pool, cmd, fence, event) = slots[frame % WRAP_IN_FLIGHT];
            // SAFETY: the slot's objects belong to `device`, and its last
            // frame is done (its fence waited); collect reads the fence,
            // so it is reset after collecting.
            unsafe {
                device.wait_for_fences(&[fence], true, u64::MAX).unwrap();
                allocator.collect().unwrap();
                device.reset_fences(&[fence]).unwrap();
                device.reset_event(event).unwrap();
                device.reset_command_pool(pool, vk::CommandPoolResetFlags::empty()).unwrap();
                let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
                device.begin_command_buffer(cmd, &begin).unwrap();
                device.cmd_wait_events(
                    cmd,
                    &[event],
                    vk::PipelineStageFlags::HOST,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    &[],
                    &[],
                    &[],
                );
                device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.pipeline);
            }
            let mut pieces = Vec::new();
            for index in 0..PIECES {
                let count = 1 + rng.below(MAX_WORDS) as usize;
                let size = 4 * count as u64;
                let align = MAX_ALIGN >> (2 * rng.below(4));
                allocator.ring_allocate(ring, 1, 1).unwrap();
                let piece = allocator.ring_allocate(ring, size, align).unwrap();
                let words: Vec<u32> = (0..count as u32)
                    .map(|word| ((frame as u32) << 24) ^ ((index as u32) << 20) ^ (word << 4) ^ 0x0a0a_0005)
                    .collect();
                let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_ne_bytes()).collect();
                allocator.ring_write(&piece, 0, &bytes).unwrap();
                let address = piece.device_address().expect("a device-address ring");
                assert_eq!(address % align, 0, "{profile}: frame {frame} piece {index} at {address:#x}");
                let range = piece.buffer_offset()..piece.buffer_offset() + size;
                assert!(range.end <= CHUNK, "{profile}: frame {frame} piece {index} at {range:?}");
                buffers.insert(piece.buffer());
                // SAFETY: recording, the pipeline bound; the piece and the
                // frame's part of the readback buffer hold `count` words.
                unsafe {
                    pipeline.record(
                        cmd,
                        XorCopy {
                            source: address,
                            target: readback_address + 4 * total_words as u64,
                            count: count as u32,
                            salt: SALT,
                        },
                    );
                }
                pieces.push((range, words, total_words));
                total_words += count;
            }
            if let Some(before) = frames.last() {
                let (.., before_fence, _) = slots[(frame - 1) % WRAP_IN_FLIGHT];
                // SAFETY: a live fence of this device.
                let done = unsafe { device.get_fence_status(before_fence) }.unwrap();
                assert!(!done, "{profile}: frame {} waits for its event", frame - 1);
                for (range, ..) in &pieces {
                    for (in_flight, ..) in before {
                        assert!(
                            range.end <= in_flight.start || in_flight.end <= range.start,
                            "{profile}: frame {frame}'s {range:?} overlaps {in_flight:?}, in flight"
                        );
                    }
                }
            }
            frames.push(pieces);
            shader_barrier(device, cmd, (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ));
            let cmds = [cmd];
            let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
            // SAFETY: a recorded command buffer; this test is the queue's
            // only user; the fence is signalled by this frame's only
            // submission, after every command that reads the ring. The
            // frame before may run now: this one has allocated.
            unsafe {
                device.end_command_buffer(cmd).unwrap();
                device.queue_submit(context.queue, &submit, fence).unwrap();
                allocator.end_frame(fence).unwrap();
                if frame > 0 {
                    device.set_event(slots[(frame - 1) % WRAP_IN_FLIGHT].3).unwrap();
                }
            }
        }
        // The last frame's event, which its commands wait for, set.
        drop(release);
        allocator.wait_and_collect(u64::MAX).unwrap();
        assert_eq!(buffers.len(), 1, "{profile}: the ring stays in its one chunk");
        // A frame whose first piece lies before the previous frame's
        // first one started over from the chunk's start.
        let wraps = frames.windows(2).filter(|pair| pair[1][0].0.start < pair[0][0].0.start).count();
        assert!(wraps >= 2, "{profile}: the ring wrapped {wraps} times in {FRAMES} frames");
        allocator.invalidate(&mut readback_allocation, 0..4 * total_words as u64).unwrap();
        let bytes = allocator.mapped_slice(&readback_allocation).unwrap();
        for (frame, pieces) in frames.iter().enumerate() {
            for (index, (_, words, first)) in pieces.iter().enumerate() {
                for (word_index, &word) in words.iter().enumerate() {
                    let read = word_at(bytes, first + word_index);
                    assert!(
                        read == word ^ SALT,
                        "{profile}: frame {frame} piece {index} word {word_index}: read {read:#010x}, wrote {:#010x}",
                        word ^ SALT
                    );
                }
            }
        }
        drop(pipeline);
        allocator.destroy_upload_ring(ring).unwrap();
        // SAFETY: every frame is done (wait_and_collect); each object is
        // destroyed once.
        unsafe {
            allocator.destroy_buffer(readback, readback_allocation).unwrap();
            for (pool, _, fence, event) in slots {
                device.destroy_event(event, None);
                device.destroy_fence(fence, None);
                device.destroy_command_pool(pool, None);
            }
            allocator.collect_idle();
        }
        context.assert_no_validation_messages();
    }
);
