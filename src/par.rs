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

/// Work started on a thread of its own by [`spawn_or_run`].
#[derive(Debug)]
pub struct Running<T>(Option<std::thread::JoinHandle<Option<T>>>);

impl<T> Running<T> {
    /// Waits for the work: what it returned, `None` if it panicked.
    pub fn join(self) -> Option<T> {
        self.0?.join().ok().flatten()
    }
}

/// Runs `work` on a new thread (`Ok`: its handle), or here when no thread
/// can be started (`Err`: what it returned).
pub fn spawn_or_run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Running<T>, T> {
    // Shared, so that a thread that could not be started leaves it here.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(work)));
    let theirs = slot.clone();
    let take = |s: &std::sync::Mutex<Option<_>>| {
        s.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    };
    let spawned = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || take(&theirs).map(|w| w()));
    match spawned {
        Ok(h) => Ok(Running(Some(h))),
        Err(_) => match take(&slot) {
            Some(w) => Err(w()),
            // (Unreachable: only the thread takes it otherwise; joins as
            // lost work.)
            None => Ok(Running(None)),
        },
    }
}
