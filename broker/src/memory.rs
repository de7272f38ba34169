//! How a broker process asks the kernel for memory: transparent huge pages off unless
//! configured (`huge_pages`); and [`prefetch`], a hint to the processor's cache.
//!
//! The broker's allocator (mimalloc) asks Linux to back its memory with 2 MiB transparent
//! huge pages. With them, resident memory rises in 2 MiB steps, and in soaks much of what
//! a burst of traffic took stayed resident after it. In 15-minute soaks on one machine
//! (BENCHMARKS.md, "Soak"), brokers with huge pages held about twice the memory of brokers
//! without (27 MB against 13 MB) and stepped up to 18% above their level at 5 minutes;
//! without, none went above 7%.
//!
//! What huge pages buy is fewer TLB misses over large tables: the composite router
//! benchmark (10,000 patterns) ran faster with them (medians +16% and +7% in two sessions
//! of alternated runs). A broker that detects many composite subscriptions may turn them
//! on; a broker whose memory should follow its load leaves them off. Off is the default:
//! memory that only grows is what an operator of a long-running broker cannot tell from a
//! leak.
//!
//! The setting is the process's (`prctl(PR_SET_THP_DISABLE)`), so it also holds where the
//! kernel's own setting (`/sys/kernel/mm/transparent_hugepage/enabled`) is `always`. It
//! takes effect from when it is made, so `padres-broker` makes it first thing in `main`;
//! huge pages the allocator took for allocations before that stay. A program that embeds
//! the library ([`crate::net::serve`]) decides for itself. Child processes inherit it.

use std::io;

/// Lets (`true`) or stops (`false`) the kernel back this process's memory with
/// transparent huge pages from now on. Elsewhere than Linux there is nothing to set.
pub fn use_transparent_huge_pages(on: bool) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::disable_transparent_huge_pages(!on).map_err(io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = on;
        Ok(())
    }
}

/// Whether the kernel may back this process's memory with transparent huge pages (its own
/// setting aside): false once [`use_transparent_huge_pages`] stopped them.
pub fn transparent_huge_pages_allowed() -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        rustix::thread::transparent_huge_pages_are_disabled().map(|off| !off).map_err(io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(false)
    }
}

/// Asks the processor to bring `n` values from `at` into its cache; a hint, not a read.
pub(crate) fn prefetch<T>(at: *const T, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let bytes = size_of::<T>() * n;
        // At most four cache lines.
        for offset in (0..bytes.min(256)).step_by(64) {
            // SAFETY: a prefetch does not access memory as a program-visible read; it does
            // not fault on any address, valid or not, and the offset pointer is never
            // dereferenced (`wrapping_add` makes no claim that it is in bounds).
            #[allow(unsafe_code)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>().wrapping_add(offset));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, n);
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_are_stopped_and_allowed_again_for_the_process() {
        if !kernel_has_huge_pages() {
            return;
        }
        use_transparent_huge_pages(false).expect("set");
        assert!(!transparent_huge_pages_allowed().expect("read"));
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        assert!(status.contains("THP_enabled:\t0"), "the kernel sees it too: {status}");
        use_transparent_huge_pages(true).expect("set");
        assert!(transparent_huge_pages_allowed().expect("read"));
    }

    /// Whether this kernel has transparent huge pages and shows the process's setting
    /// (`THP_enabled` in /proc/PID/status, Linux 5.0 and later); where not, there is
    /// nothing to test.
    fn kernel_has_huge_pages() -> bool {
        let shown = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.contains("THP_enabled:"));
        let has = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
        if !(shown && has) {
            eprintln!("no transparent huge pages in this kernel, or no THP_enabled line: skipped");
        }
        shown && has
    }
}
