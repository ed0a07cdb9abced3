//! The binary's allocator settings, behind the `tuned-alloc` feature (off
//! by default; the static release recipe, `cargo build-static`, turns it
//! on). Without it ckpt uses the system allocator as it comes. With it, on
//! Linux with glibc: large tables are kept in the heap instead of fresh
//! mappings, and the heap is advised for transparent huge pages before a
//! workspace builds large tables. Measured on a no-change shell pre+post of
//! a 100,000-file tree (BENCHMARKS.md, "Hooks"); a one-file Edit does not
//! change. With the SIGXFSZ handler in `main.rs`, this is the crate's only
//! `unsafe` code.

/// A hook is a short process that builds and drops a few large tables (the
/// snapshot it loads, the walk, the map between them: 64 MiB on a
/// 100,000-file tree). glibc serves each large allocation with its own
/// `mmap` and unmaps it when freed, so every table is written into fresh
/// pages, and on this machine class first touches cost ~0.8 ms per MiB. Kept
/// in the heap and not trimmed, freed pages are reused: a no-change shell
/// pre+post on the 100,000-file tree took ~9 % less (DECISIONS.md). Nothing
/// is returned to the system before exit, which a short process does not
/// need; the library sets nothing.
#[cfg(all(feature = "tuned-alloc", target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn tune() {
    // SAFETY: `mallopt` only sets allocator parameters; it is called before
    // any thread exists and before anything large is allocated. (32 MiB is
    // the largest mmap threshold glibc accepts on 64-bit; above it the call
    // fails and changes nothing.)
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        // One arena: the walk's helper thread allocates from the advised
        // heap too (it allocates little; glibc's per-thread cache serves
        // small blocks without the arena's lock).
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(feature = "tuned-alloc", target_os = "linux", target_env = "gnu")))]
pub fn tune() {}

/// What workspaces call before they build large tables
/// (`OpenOptions::on_big_tables`): the heap's huge-page advice, where this
/// binary has it. Only before large tables: a small tree's hook would pay
/// more for a huge page's first touch than it saves (DECISIONS.md).
#[cfg(all(feature = "tuned-alloc", target_os = "linux", target_env = "gnu"))]
pub fn big_tables_hook() -> Option<fn()> {
    Some(huge_pages::advise_heap)
}

#[cfg(not(all(feature = "tuned-alloc", target_os = "linux", target_env = "gnu")))]
pub fn big_tables_hook() -> Option<fn()> {
    None
}

/// The system allocator, with every large block (4 MiB and up) advised for
/// transparent huge pages: a hook's big tables (the snapshot it reads, the
/// walk it fills: tens of MiB on a 100,000-file tree) are then faulted in
/// 2 MiB at a time instead of 4 KiB, and on this machine class each small
/// fault costs more than filling its page. Where the system's THP mode is
/// `madvise` (the default of most distributions) this is what enables them;
/// under `always` it changes nothing, under `never` the advice is ignored.
/// A no-change shell pre+post on the 100,000-file tree: 613 -> 481 ms
/// (medians of 12 alternating pairs; glibc's own `hugetlb` tunable, which
/// can only be set from the environment, gave about the same; DECISIONS.md).
#[cfg(all(feature = "tuned-alloc", target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod huge_pages {
    use std::alloc::{GlobalAlloc, Layout, System};

    /// The size of a transparent huge page on x86-64 and arm64 (4 KiB
    /// granule); on other sizes the advice only covers less.
    const HUGE: usize = 2 << 20;
    /// Blocks from this size on are advised (at least one whole huge page
    /// lies inside).
    const FROM: usize = 2 * HUGE;

    pub struct Advised;

    /// Grows the heap now by the 64 MiB top pad (a block taken and given
    /// back: the memory is reserved, not touched) and advises all of it, so
    /// that the many small blocks a hook allocates are faulted in by huge
    /// pages too, as glibc's `glibc.malloc.hugetlb=1` tunable does for its
    /// whole heap (the allocator cannot be told so from inside the process).
    /// Called once, before the library builds large tables
    /// (`OpenOptions::on_big_tables`, which the CLI passes); other threads
    /// may be running then, which is safe: the block goes through
    /// `malloc`/`free`, and the advice changes no contents.
    pub fn advise_heap() {
        // SAFETY: a block below the mmap threshold is taken from the heap and
        // freed at once; `sbrk(0)` only reads the break.
        unsafe {
            let p = libc::malloc(24 << 20);
            if p.is_null() {
                return;
            }
            libc::free(p);
            let end = libc::sbrk(0) as *mut u8;
            if end as usize > p as usize {
                advise(p.cast(), end as usize - p as usize);
            }
        }
    }

    /// Advises the huge-page-aligned part of `[p, p + len)`. The advice only
    /// sets how untouched pages of the range are faulted in; contents and
    /// ownership are unchanged, so any outcome (including failure) is safe.
    fn advise(p: *mut u8, len: usize) {
        let start = (p as usize).next_multiple_of(HUGE);
        let end = (p as usize + len) & !(HUGE - 1);
        if end > start {
            // SAFETY: the range lies inside memory the allocator owns (a
            // block it just handed out, or its own heap); MADV_HUGEPAGE does
            // not change its contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }

    // SAFETY: every call is passed to `System` unchanged; only an advice on
    // the returned block is added.
    unsafe impl GlobalAlloc for Advised {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            // SAFETY: as the caller promised.
            let p = unsafe { System.alloc(l) };
            if l.size() >= FROM && !p.is_null() {
                advise(p, l.size());
            }
            p
        }

        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            // SAFETY: as the caller promised.
            let p = unsafe { System.alloc_zeroed(l) };
            if l.size() >= FROM && !p.is_null() {
                advise(p, l.size());
            }
            p
        }

        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: as the caller promised.
            unsafe { System.dealloc(p, l) }
        }

        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            // SAFETY: as the caller promised.
            let q = unsafe { System.realloc(p, l, new) };
            if new >= FROM && !q.is_null() {
                advise(q, new);
            }
            q
        }
    }
}

#[cfg(all(feature = "tuned-alloc", target_os = "linux", target_env = "gnu"))]
#[global_allocator]
#[allow(unsafe_code)]
static ALLOCATOR: huge_pages::Advised = huge_pages::Advised;
