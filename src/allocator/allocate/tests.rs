//! `allocate_and_bind` with dedicated memory: the fake device's buffers
//! never require it, and upload-ring chunks never ask for it, so no test
//! through a helper on the fake device reaches a dedicated allocation
//! whose bind fails (the Vulkan suite's `failing_resource_calls` does,
//! with the layer's `dedicated=require`, but sets no memory callback).

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::device::fake::{FakeDevice, FakeLayout};
use crate::device::MemoryDeviceExt;
use crate::{Allocator, Config, DedicatedPolicy, Error, MemoryEventKind, Request, ResourceKind};
use crate::{DedicatedTarget, Usage};

/// A dedicated allocation whose bind fails, or panics, is freed before the
/// error (or the panic) reaches the caller: its memory object is freed,
/// the memory callback hears of it made and then freed, the resource is
/// destroyed once, and the allocator's figures are those of before, as
/// if the call had never been made.
#[test]
fn a_failed_bind_of_dedicated_memory_frees_it_and_tells_the_callback_both() {
    let device = FakeDevice::new(FakeLayout::discrete());
    let mut allocator = Allocator::new(device.clone(), Config::default()).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&events);
    allocator.set_memory_callback(move |event| {
        heard.lock().unwrap().push((event.kind, event.memory));
    });
    let stats = allocator.stats();
    for panics in [false, true] {
        // SAFETY: a fake device; a non-zero size and a core usage.
        let (buffer, requirements, _) =
            unsafe { device.create_buffer(64 << 10, vk::BufferUsageFlags::TRANSFER_SRC) }.unwrap();
        let request = Request::new(requirements, Usage::DEVICE_LOCAL, ResourceKind::Buffer)
            .dedicated(DedicatedPolicy::Always);
        // SAFETY: the buffer was just made with these requirements; the
        // bind below binds nothing to it.
        let request = unsafe { request.dedicated_target(DedicatedTarget::Buffer(buffer)) };
        let mut bound = None;
        let mut destroyed = 0;
        let call = panic::catch_unwind(AssertUnwindSafe(|| {
            allocator.allocate_and_bind(
                &request,
                |allocation| {
                    assert!(allocation.is_dedicated());
                    bound = Some(allocation.memory());
                    assert!(!panics, "the bind panicked (as the test asks)");
                    Err(Error::OutOfDeviceMemory)
                },
                || {
                    destroyed += 1;
                    // SAFETY: made above, bound to nothing, used by nothing.
                    unsafe { device.destroy_buffer(buffer) };
                },
            )
        }));
        let what = format!("the bind panicking: {panics}");
        match call {
            Ok(result) => {
                assert!(!panics, "{what}: no panic");
                assert_eq!(result.err(), Some(Error::OutOfDeviceMemory), "{what}");
            }
            Err(_) => assert!(panics, "{what}: a panic"),
        }
        let memory = bound.expect("the bind was called");
        assert_eq!(destroyed, 1, "{what}: the resource destroyed once");
        assert_eq!(
            std::mem::take(&mut *events.lock().unwrap()),
            [
                (MemoryEventKind::Allocated, memory),
                (MemoryEventKind::Freed, memory)
            ],
            "{what}"
        );
        assert_eq!(device.live_allocations(), [], "{what}: memory left");
        assert_eq!(device.live_resources(), 0, "{what}: the buffer left");
        assert_eq!(allocator.stats(), stats, "{what}");
    }
    drop(allocator);
    device.assert_clean();
}
