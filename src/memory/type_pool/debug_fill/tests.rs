//! Unit tests of the debug fills' byte scan, which need no device.

use super::first_changed;

/// The first changed byte is found wherever it lies, in ranges of any
/// start and length, and so is the first of two equal changed bytes in
/// a row (the comparison of the bytes with their neighbours sees a
/// change only where two neighbours differ); none in an untouched
/// range.
#[test]
fn the_first_changed_byte_is_found_anywhere() {
    let mut bytes = [0xEFu8; 80];
    // Shorter under Miri, where the full sweep took 118 s of CI (4 s
    // now; the check has no path that depends on the length).
    let longest = if cfg!(miri) { 24 } else { 80 };
    for start in 0..9 {
        for len in 0..(longest - start) {
            // SAFETY: `start + len <= 80` bytes of the array.
            let none = unsafe { first_changed(bytes.as_ptr().add(start), len as u64, 0xEF) };
            assert_eq!(none, None, "start {start}, len {len}");
            for at in 0..len {
                bytes[start + at] = 0;
                if at + 1 < len {
                    bytes[start + at + 1] = 0;
                }
                // SAFETY: as above.
                let found = unsafe { first_changed(bytes.as_ptr().add(start), len as u64, 0xEF) };
                assert_eq!(found, Some(at as u64), "start {start}, len {len}, at {at}");
                bytes.fill(0xEF);
            }
        }
    }
}
