//! Non-coherent memory on the fake device: what the GPU sees is kept apart
//! from what the host sees.
//!
//! On a memory type that is host-visible but not `HOST_COHERENT`, host writes
//! reach the device only through `vkFlushMappedMemoryRanges`, and device
//! writes reach the host only through `vkInvalidateMappedMemoryRanges`; an
//! unflushed host write that is invalidated is lost ("If a range of
//! non-coherent memory is written by the host and then invalidated without
//! first being flushed, its contents are undefined", and mapping does not
//! invalidate). So each non-coherent memory object holds a second copy of
//! its bytes, the device's: the mapped pointer addresses the host copy (the
//! "cache"), a flush copies its flushed bytes to the device copy, an
//! invalidate copies the device's bytes back, and [`FakeDevice::read`] and
//! [`FakeDevice::write`] (a test standing in for the GPU) use the device
//! copy. Nothing is copied on its own, as on a GPU whose host cache is never
//! written back or refilled by itself: the fake is at least as strict as
//! real hardware.
//!
//! [`FakeDevice::read`]: super::FakeDevice::read
//! [`FakeDevice::write`]: super::FakeDevice::write

use std::ops::Range;

/// The device's copy of a non-coherent memory object.
#[derive(Debug)]
pub(super) struct DeviceCopy {
    /// Zeroed (allocated lazily by the OS), as the host copy starts.
    bytes: Vec<u8>,
    /// The host copy may differ from this one outside the ranges synced
    /// since: the device wrote, or a mapping ended with unflushed writes.
    /// The next mapping refills its range from here.
    stale_host: bool,
}

impl DeviceCopy {
    /// The device copy of a new memory object of `size` bytes; `None` when
    /// the host cannot allocate them (`zeroed_bytes`).
    pub(super) fn new(size: usize) -> Option<Self> {
        Some(Self {
            bytes: super::host_bytes::zeroed_bytes(size)?,
            stale_host: false,
        })
    }

    /// A new mapping of `range`, whose host bytes are `host`: the host copy
    /// shows what the device holds there (the cache starts cold), not what
    /// an earlier mapping wrote.
    pub(super) fn map(&mut self, host: &mut [u8], range: Range<usize>) {
        if self.stale_host {
            host.copy_from_slice(&self.bytes[range.clone()]);
            self.stale_host = range != (0..self.bytes.len());
        }
    }

    /// The mapping ended: its unflushed writes must not survive into the
    /// next one.
    pub(super) fn unmap(&mut self) {
        self.stale_host = true;
    }

    /// `vkFlushMappedMemoryRanges` of `range`, whose host bytes are `host`:
    /// they reach the device.
    pub(super) fn flush(&mut self, host: &[u8], range: Range<usize>) {
        self.bytes[range].copy_from_slice(host);
    }

    /// `vkInvalidateMappedMemoryRanges` of `range`, whose host bytes are
    /// `host`: the device's bytes replace them, unflushed host writes
    /// included.
    pub(super) fn invalidate(&self, host: &mut [u8], range: Range<usize>) {
        host.copy_from_slice(&self.bytes[range]);
    }

    /// What the device reads at `range`.
    pub(super) fn read(&self, range: Range<usize>) -> &[u8] {
        &self.bytes[range]
    }

    /// The device writes `bytes` at `start`.
    pub(super) fn write(&mut self, start: usize, bytes: &[u8]) {
        self.bytes[start..start + bytes.len()].copy_from_slice(bytes);
        self.stale_host = true;
    }
}
