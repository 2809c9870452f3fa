//! Unit tests of the debug fills' byte scan, which need no device.

use super::{first_changed, first_changed_in_pieces, pieces};

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

/// A block is read in pieces (a slice may span at most `isize::MAX`
/// bytes, and a 32-bit host may map more): the first changed byte is
/// found wherever it lies against the pieces' ends, including the last
/// byte of one piece and the first of the next, and an untouched range
/// read in pieces holds none.
#[test]
fn the_first_changed_byte_is_found_across_pieces() {
    let mut bytes = [0xEFu8; 40];
    // Shorter under Miri, as above.
    let longest = if cfg!(miri) { 16 } else { 40 };
    for piece in [1, 2, 3, 7, 40, 64] {
        for len in 0..longest {
            // SAFETY: `len <= 40` bytes of the array.
            let none = unsafe { first_changed_in_pieces(bytes.as_ptr(), len, 0xEF, piece) };
            assert_eq!(none, None, "piece {piece}, len {len}");
            for at in 0..len {
                bytes[at as usize] = 0;
                // SAFETY: as above.
                let found = unsafe { first_changed_in_pieces(bytes.as_ptr(), len, 0xEF, piece) };
                assert_eq!(found, Some(at), "piece {piece}, len {len}, at {at}");
                bytes.fill(0xEF);
            }
        }
    }
}

/// The pieces cover `0..len` exactly, in order, none empty and none
/// longer than asked, also where `len` is no multiple of the piece, past
/// what a 32-bit `usize` holds, and up to `u64::MAX` (no overflow).
#[test]
fn pieces_cover_the_range_exactly() {
    let half = u64::MAX / 2;
    for (len, piece) in [
        (0, 3),
        (1, 3),
        (9, 3),
        (10, 3),
        (5 << 30, 1 << 30),
        (u64::MAX, half),
    ] {
        let mut next = 0;
        for range in pieces(len, piece) {
            assert_eq!(range.start, next, "len {len}, piece {piece}");
            assert!(range.start < range.end && range.end - range.start <= piece);
            next = range.end;
        }
        assert_eq!(next, len, "len {len}, piece {piece}");
    }
    assert_eq!(pieces(u64::MAX, half).count(), 3);
}
