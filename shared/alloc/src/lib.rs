//! The gateway's global allocator, [`Split`]: mimalloc for blocks under [`LARGE`] bytes,
//! the system allocator (glibc's) for the rest.
//!
//! Why two: a request's many small, short-lived blocks cost glibc's allocator several times
//! what they cost mimalloc (under `callgrind`, a `tools/call` plus a `tasks/get` took 243k
//! instructions with glibc's alone, 205k with mimalloc alone, 207k split). But with mimalloc
//! for everything an idle listener kept a half more memory (15.5 KB → 24.5 KB at 10,000
//! open `subscriptions/listen` streams), over the gateway's target: what an idle connection
//! keeps is mostly large blocks (hyper's buffers), which glibc's allocator leaves untouched
//! until written. Split, it keeps 15.6 KB.
//!
//! This is the workspace's one crate with `unsafe` code (see its `Cargo.toml`); the workers
//! use mimalloc whole, and nothing else needs an allocator of its own.

use std::alloc::{GlobalAlloc, Layout, System};

use mimalloc::MiMalloc;

/// The size from which blocks come from the system allocator.
pub const LARGE: usize = 4096;

/// mimalloc below [`LARGE`] bytes, the system allocator from there; set it with
/// `#[global_allocator] static GLOBAL: Split = Split;`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Split;

fn small(size: usize) -> bool {
    size < LARGE
}

// SAFETY: every block is served and freed by one allocator, chosen by its size, which the
// layout handed to `dealloc` and `realloc` repeats (the `GlobalAlloc` contract); a
// `realloc` across `LARGE` moves the block from one allocator to the other. Each method
// otherwise passes the caller's contract on unchanged.
#[expect(
    unsafe_code,
    reason = "a global allocator can only be an unsafe impl; this one only forwards"
)]
unsafe impl GlobalAlloc for Split {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if small(layout.size()) {
                MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if small(layout.size()) {
                MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the allocator its layout's size chooses, as above.
        unsafe {
            if small(layout.size()) {
                MiMalloc.dealloc(ptr, layout);
            } else {
                System.dealloc(ptr, layout);
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (small(layout.size()), small(new_size)) {
            // SAFETY: the block stays with the allocator that served it.
            (true, true) => unsafe { MiMalloc.realloc(ptr, layout, new_size) },
            // SAFETY: as above.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            _ => {
                // SAFETY: the caller guarantees `new_size` is non-zero and, rounded up to
                // the alignment, does not overflow `isize` (the `realloc` contract).
                let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: `new` has a non-zero size.
                let moved = unsafe { self.alloc(new) };
                if !moved.is_null() {
                    // SAFETY: both blocks are live, distinct, and at least this long; the
                    // old one is freed with the layout it was allocated with.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written before a `realloc` across the boundary, either way, are there after
    /// it. Each block must also be freed by the allocator that served it: glibc aborts on a
    /// mimalloc block, while mimalloc does not check a glibc one (freeing blocks of exactly
    /// `LARGE` bytes with mimalloc, as a trial, crashed this test with SIGSEGV).
    #[test]
    fn a_block_keeps_its_bytes_across_the_boundary() {
        let mut v: Vec<u8> = Vec::new();
        for size in [16, LARGE - 1, LARGE, 3 * LARGE, LARGE - 1, 8] {
            v.resize(size, 0);
            for (i, b) in v.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            v.shrink_to_fit();
            v.reserve_exact(size * 2);
            assert!(v.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
            v.truncate(size / 2);
            v.shrink_to_fit();
            assert!(v.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        }
    }

    /// Zeroed blocks are zero on both sides of the boundary.
    #[test]
    fn zeroed_blocks_are_zero_either_side() {
        for size in [64, LARGE - 1, LARGE, 5 * LARGE] {
            let v = vec![0u8; size];
            assert!(v.iter().all(|b| *b == 0));
        }
    }

    #[global_allocator]
    static TEST_GLOBAL: Split = Split;
}
