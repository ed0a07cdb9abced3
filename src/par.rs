//! Splitting per-file work over the machine's cores (two here): storing the
//! contents a shell call changed, reading its before contents from git,
//! writing its patches. Each item is independent file I/O and hashing.

/// Lists this long are split; shorter ones run on the calling thread (a
/// thread costs ~0.1 ms to start, a file ~0.2–0.4 ms to store).
pub(crate) const PARALLEL_FROM: usize = 16;

/// CPUs available to this process (asked once: it reads cgroup files).
pub(crate) fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `items.iter().map(f)`, in order, on two threads when the list is long and
/// there are two CPUs. Each thread takes the next item not yet taken (sizes
/// vary: a static split can leave one thread with the big files). A panic in
/// the helper is re-raised here.
pub(crate) fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() < PARALLEL_FROM || cpus() < 2 {
        return items.iter().map(&f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let (mine, theirs) = std::thread::scope(|s| {
        let helper = std::thread::Builder::new().spawn_scoped(s, work);
        // This thread works too (alone, if no thread could be started).
        let mine = work();
        let theirs = match helper {
            Ok(h) => match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            },
            Err(_) => Vec::new(),
        };
        (mine, theirs)
    });
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    for (i, r) in mine.into_iter().chain(theirs) {
        slots[i] = Some(r);
    }
    slots
        .into_iter()
        .map(|r| r.expect("every item was taken by one thread"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_keep_their_order_at_every_length() {
        for n in [0, 1, 15, 16, 17, 100, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let out = super::map(&items, |&i| i * 3);
            assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>(), "{n}");
        }
    }
}
