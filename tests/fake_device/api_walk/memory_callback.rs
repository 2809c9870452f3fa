//! The walk's memory callback: what it heard of the device's memory
//! objects made and freed ([`Heard`]), and setting or replacing it at the
//! start of a walk or at a random step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use vk_suballoc::{MemoryEvent, MemoryEventKind};

use super::Walk;

/// The memory objects a memory callback heard made and not yet freed:
/// memory type and size by handle. Each `Allocated` must name an object
/// not live yet, each `Freed` a live one, with its type and size.
pub(super) type Heard = Arc<Mutex<HashMap<u64, (u32, u64)>>>;

/// A callback recording into a new [`Heard`], which it returns.
fn listener() -> (Heard, impl Fn(&MemoryEvent<'_>) + Send + Sync + 'static) {
    let heard = Heard::default();
    let sink = Arc::clone(&heard);
    let callback = move |event: &MemoryEvent<'_>| {
        use ash::vk::Handle;
        let mut live = sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let handle = event.memory.as_raw();
        let figures = (event.memory_type, event.size);
        match event.kind {
            MemoryEventKind::Allocated => {
                let old = live.insert(handle, figures);
                assert!(old.is_none(), "{handle:#x} heard made twice");
            }
            MemoryEventKind::Freed => {
                let old = live.remove(&handle);
                assert_eq!(old, Some(figures), "{handle:#x} heard freed");
            }
        }
    };
    (heard, callback)
}

impl Walk {
    /// Sets a new memory callback (replacing the one set, if any): it
    /// hears of the memory that exists first; the one replaced hears it
    /// freed, so that it holds nothing afterwards.
    pub(super) fn listen(&mut self) {
        let (heard, callback) = listener();
        self.allocator.set_memory_callback(callback);
        if let Some(old) = self.heard.replace(heard) {
            let old = old.lock().unwrap();
            assert!(old.is_empty(), "{}: replaced callback: {old:?}", self.ctx());
        }
    }
}
