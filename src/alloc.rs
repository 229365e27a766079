//! How the process allocator (mimalloc, declared by the binary and the benchmarks) is tuned
//! for a run that ends: `muster sim`, `what-if` and the benchmarks keep the pages they free
//! instead of handing them back to the system a second later (mimalloc v3's `purge_delay`,
//! 1,000 ms). A long simulation frees and takes again the same memory all the time; handing it
//! back made the kernel zero every page again on its next use (`clear_page_erms`, 5.6 % of the
//! 50,000-job scenario), about a tenth of its time (docs/benchmarks.md). The controller, which
//! runs for weeks, keeps the default and gives memory back.

/// mimalloc's `mi_option_purge_delay` (the same index in its v2 and v3 headers).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed pages stay with the process until it ends (their peak is its peak resident size).
pub fn keep_freed_pages() {
    // SAFETY: `mi_option_set` only stores an integer option that mimalloc reads when it
    // purges; it is safe to call at any time, from any thread, before or after allocations.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    /// The option at that index is the purge delay: it has the purge delay's default (1,000 ms,
    /// or what `MIMALLOC_PURGE_DELAY` says) until it is set, and reads back as set. (No other
    /// test sets it.)
    #[test]
    fn the_option_set_is_the_purge_delay() {
        let default = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        // SAFETY: reads an integer option.
        let before = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(before, default, "mimalloc's purge delay before it is set");
        super::keep_freed_pages();
        // SAFETY: as above.
        let after = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(after, -1, "mimalloc's purge delay reads back as set");
    }
}
