//! Parallel loops whose bodies are passed as `&dyn Fn`: rayon's generic machinery (producers,
//! consumers, join jobs) is then instantiated once per element type, not once per kernel
//! closure. Generic kernels (one per op and dtype) calling rayon directly made half of this
//! crate's LLVM IR and most of its build time. One dynamic call per chunk costs nothing
//! next to the chunk's work.
//!
//! No thread sleeps in these loops. In a rayon join, a thread that finishes its half before
//! the half another thread stole goes to sleep after a few dozen idle rounds, and waking it
//! costs tens of microseconds (more on a virtual machine, whose idle vCPU the host may have
//! taken back): resnet18 at 2 threads slept about 8 times a run that way. Here each thread
//! claims items from shared counters, then spins, running other pending jobs, until the
//! items the others claimed are done, as ONNX Runtime's threads do; the session keeps the
//! pool's threads spinning between loops (`onyx_core::session`'s intra-op spinning).

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

/// Calls `body(i)` for every `i` in `0..n`, on every thread of the current pool, and returns
/// once all have finished. Thread `t` of `T` takes the indices of the `t`-th of `T` even
/// ranges in order (neighbouring items share weights and input rows), then helps with the
/// others' ranges. A panic in `body` reaches the caller once every item has run or unwound.
pub fn for_each_index(n: usize, body: &(dyn Fn(usize) + Sync)) {
    let threads = rayon::current_num_threads().min(n);
    if threads < 2 {
        (0..n).for_each(body);
        return;
    }
    let ranges = Ranges::new(n, threads, n.div_ceil(threads * CLAIMS_PER_THREAD));
    let finished = AtomicUsize::new(0);
    fan_out(0..threads, &|first| {
        for r in (first..threads).chain(0..first) {
            while let Some(claimed) = ranges.claim(r) {
                // Counted as finished even when they unwind, so that every wait ends.
                let _done = CountOnDrop(&finished, claimed.len());
                claimed.for_each(body);
            }
        }
        // Every thread leaves together: the joins above then find their other half done
        // and never put a thread to sleep.
        while finished.load(Ordering::Acquire) < n {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::hint::spin_loop();
            }
        }
    });
}

/// Runs `work(t)` for every `t` of `threads` through a tree of rayon joins (no allocation),
/// `work(threads.start)` on the calling thread.
fn fan_out(threads: std::ops::Range<usize>, work: &(dyn Fn(usize) + Sync)) {
    if threads.len() <= 1 {
        threads.for_each(work);
        return;
    }
    let mid = threads.start + threads.len() / 2;
    rayon::join(|| fan_out(threads.start..mid, work), || fan_out(mid..threads.end, work));
}

/// Claims per thread of [`for_each_index`] when its items are many: each claim is one atomic
/// operation on a shared line, so cheap items are claimed a few dozen at a time.
const CLAIMS_PER_THREAD: usize = 8;

/// `0..n` cut into even ranges, each with the next index not yet claimed; indices are claimed
/// `grain` at a time.
struct Ranges {
    n: usize,
    grain: usize,
    next: Vec<AtomicUsize>,
}

impl Ranges {
    fn new(n: usize, count: usize, grain: usize) -> Self {
        Ranges {
            n,
            grain: grain.max(1),
            next: (0..count).map(|r| AtomicUsize::new(Self::start(n, count, r))).collect(),
        }
    }

    fn start(n: usize, count: usize, r: usize) -> usize {
        r * n / count
    }

    /// The next unclaimed indices of range `r` (up to `grain`), claimed.
    fn claim(&self, r: usize) -> Option<std::ops::Range<usize>> {
        let end = Self::start(self.n, self.next.len(), r + 1);
        // Stays far from overflow: each thread adds `grain` at most once past `end`.
        let i = self.next[r].fetch_add(self.grain, Ordering::Relaxed);
        (i < end).then(|| i..(i + self.grain).min(end))
    }
}

/// Adds `count` to the counter when dropped.
struct CountOnDrop<'a>(&'a AtomicUsize, usize);

impl Drop for CountOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(self.1, Ordering::Release);
    }
}

/// Calls `body(i, chunk)` for the `i`-th chunk of `chunk_len` elements of `data` (the last
/// may be shorter), in parallel.
pub fn for_each_chunk_mut<T: Send>(data: &mut [T], chunk_len: usize, body: &(dyn Fn(usize, &mut [T]) + Sync)) {
    let (len, chunk_len) = (data.len(), chunk_len.max(1));
    let data = SharedSlice(data.as_mut_ptr());
    for_each_index(len.div_ceil(chunk_len), &|i| {
        let start = i * chunk_len;
        // SAFETY: chunk i is `start..min(start + chunk_len, len)`, inside `data` since
        // `i < ceil(len / chunk_len)`; chunks are disjoint and each index runs once, so no
        // element is reached twice; `data` stays mutably borrowed until every chunk is done.
        let chunk = unsafe { std::slice::from_raw_parts_mut(data.at(start), chunk_len.min(len - start)) };
        body(i, chunk);
    });
}

/// As [`for_each_chunk_mut`] with a fallible body: every chunk runs, and the first error seen
/// (in time, not in chunk order) is returned.
pub fn try_for_each_chunk_mut<T: Send, E: Send>(
    data: &mut [T],
    chunk_len: usize,
    body: &(dyn Fn(usize, &mut [T]) -> Result<(), E> + Sync),
) -> Result<(), E> {
    let failed = std::sync::Mutex::new(Ok(()));
    for_each_chunk_mut(data, chunk_len, &|i, chunk| {
        if let Err(e) = body(i, chunk) {
            let mut first = failed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if first.is_ok() {
                *first = Err(e);
            }
        }
    });
    failed.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Calls `body(i, band)` for the `i`-th band of `width` columns (the last may be narrower) of
/// the row-major matrix `data` with rows of `row_len`, in parallel: for kernels that compute
/// a few columns for every row at a time.
pub fn for_each_column_band_mut<T: Send>(
    data: &mut [T],
    row_len: usize,
    width: usize,
    body: &(dyn Fn(usize, &mut ColumnBand<'_, T>) + Sync),
) {
    let (row_len, width) = (row_len.max(1), width.max(1));
    let rows = data.len() / row_len;
    let shared = SharedSlice(data.as_mut_ptr());
    for_each_index(row_len.div_ceil(width), &|i| {
        let start = i * width;
        let mut band = ColumnBand {
            data: &shared,
            row_len,
            rows,
            start,
            width: width.min(row_len - start),
            _data: std::marker::PhantomData,
        };
        body(i, &mut band);
    });
}

/// Columns `start..start + width` of every row of a row-major matrix: what one task of
/// [`for_each_column_band_mut`] writes.
pub struct ColumnBand<'a, T> {
    data: &'a SharedSlice<T>,
    row_len: usize,
    rows: usize,
    start: usize,
    width: usize,
    _data: std::marker::PhantomData<&'a mut [T]>,
}

impl<T> ColumnBand<'_, T> {
    /// The matrix's number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The band's first column.
    pub fn start(&self) -> usize {
        self.start
    }

    /// The band's number of columns.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Row `r`'s part of the band.
    ///
    /// # Panics
    /// If `r` is not below [`Self::rows`].
    pub fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows, "row {r} of a band of {} rows", self.rows);
        // SAFETY: `r < rows` and `start + width <= row_len`, so the range lies inside the
        // matrix of `rows * row_len` elements; bands are disjoint column ranges and each runs
        // once, and `&mut self` keeps two rows of one band from being borrowed at once, so no
        // element is reached twice; the matrix stays mutably borrowed until every band is done.
        unsafe { std::slice::from_raw_parts_mut(self.data.at(r * self.row_len + self.start), self.width) }
    }
}

/// A slice's first element, shared by threads that each reach their own disjoint part.
struct SharedSlice<T>(*mut T);
// SAFETY: only disjoint elements are reached through it from different threads
// (`for_each_chunk_mut`, `for_each_column_band_mut`), and T is Send.
unsafe impl<T: Send> Sync for SharedSlice<T> {}

impl<T> SharedSlice<T> {
    /// The element `offset` elements on.
    ///
    /// # Safety
    /// `offset` is at most the slice's length.
    // SAFETY: for callers: as the `# Safety` section says; the pointer stays inside the slice.
    unsafe fn at(&self, offset: usize) -> *mut T {
        // SAFETY: the caller keeps `offset` inside the slice (or one past it).
        unsafe { self.0.add(offset) }
    }
}

/// Calls `body(i, src_chunk, dst_chunk)` for the `i`-th chunks of `src` (of `src_len`
/// elements) and `dst` (of `dst_len`), in parallel, as many times as the shorter has chunks.
pub fn for_each_chunk_pair<A: Sync, B: Send>(
    src: &[A],
    src_len: usize,
    dst: &mut [B],
    dst_len: usize,
    body: &(dyn Fn(usize, &[A], &mut [B]) + Sync),
) {
    // Through the chunks of `dst` alone: instantiated per type of `dst` only.
    let src_len = src_len.max(1);
    for_each_chunk_mut(dst, dst_len, &|i, d| {
        if let Some(s) = src.get(i * src_len..).filter(|s| !s.is_empty()) {
            body(i, &s[..src_len.min(s.len())], d);
        }
    });
}

/// `(0..n).map(body)` computed in parallel, in order.
pub fn map_indices<T: Send>(n: usize, body: &(dyn Fn(usize) -> T + Sync)) -> Vec<T> {
    (0..n).into_par_iter().map(body).collect()
}

/// Calls `body(task)` for every task, in parallel.
pub fn for_each_task<T: Send>(tasks: Vec<T>, body: &(dyn Fn(T) + Sync)) {
    tasks.into_par_iter().for_each(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_slice_once_with_their_index() {
        let mut data = vec![0usize; 1003];
        for_each_chunk_mut(&mut data, 100, &|i, chunk| chunk.iter_mut().for_each(|v| *v += i + 1));
        assert!(data.iter().enumerate().all(|(j, &v)| v == j / 100 + 1));
        let src: Vec<usize> = (0..1003).collect();
        let mut dst = vec![0usize; 11];
        for_each_chunk_pair(&src, 100, &mut dst, 1, &|i, s, d| d[0] = s.iter().sum::<usize>() + i);
        let expected: Vec<usize> = src.chunks(100).enumerate().map(|(i, c)| c.iter().sum::<usize>() + i).collect();
        assert_eq!(dst, expected);
    }

    #[test]
    fn column_bands_cover_the_matrix_once() {
        let (rows, row_len) = (7, 23);
        let mut data = vec![0usize; rows * row_len];
        for_each_column_band_mut(&mut data, row_len, 5, &|i, band| {
            assert_eq!(band.start(), i * 5);
            for r in 0..band.rows() {
                band.row(r).iter_mut().for_each(|v| *v += 100 * r + i + 1);
            }
        });
        assert!(data.iter().enumerate().all(|(j, &v)| v == 100 * (j / row_len) + (j % row_len) / 5 + 1));
    }

    #[test]
    fn every_index_runs_once_on_any_pool() {
        for threads in [1, 2, 3, 5] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            for n in [0, 1, 2, 3, 7, 40, 1001] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.install(|| for_each_index(n, &|i| _ = hits[i].fetch_add(1, Ordering::Relaxed)));
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{threads} threads, {n} items");
            }
        }
    }

    #[test]
    fn nested_loops_finish_and_a_panic_reaches_the_caller() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let sum = AtomicUsize::new(0);
        pool.install(|| {
            for_each_index(9, &|i| for_each_index(11, &|j| _ = sum.fetch_add(i * 11 + j, Ordering::Relaxed)))
        });
        assert_eq!(sum.into_inner(), (0..99).sum::<usize>());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| for_each_index(50, &|i| assert!(i != 37, "item 37 failed")))
        }));
        assert!(unwound.is_err());
        // The pool still serves work afterwards.
        let mut data = vec![0u32; 77];
        pool.install(|| for_each_chunk_mut(&mut data, 10, &|i, c| c.fill(i as u32)));
        assert!(data.iter().enumerate().all(|(j, &v)| v as usize == j / 10));
        // A failing chunk does not stop the others; one of the errors comes back.
        let got = pool.install(|| {
            try_for_each_chunk_mut(&mut data, 7, &|i, c| {
                c.fill(100);
                if i % 4 == 1 {
                    Err(i)
                } else {
                    Ok(())
                }
            })
        });
        assert!(matches!(got, Err(i) if i % 4 == 1), "{got:?}");
        assert!(data.iter().all(|&v| v == 100));
    }

    #[test]
    fn ranges_split_evenly_and_claim_up_to_their_end() {
        let r = Ranges::new(10, 3, 2);
        let claims: Vec<_> = std::iter::from_fn(|| r.claim(1)).collect();
        assert_eq!(claims, vec![3..5, 5..6]);
        assert_eq!(r.claim(1), None);
        assert_eq!(r.claim(2), Some(6..8));
        assert_eq!(r.claim(0), Some(0..2));
    }

    #[test]
    fn map_keeps_order_and_tasks_all_run() {
        assert_eq!(map_indices(1000, &|i| i * 3), (0..1000).map(|i| i * 3).collect::<Vec<_>>());
        let sum = std::sync::atomic::AtomicUsize::new(0);
        for_each_task((1..=100).collect(), &|t: usize| {
            sum.fetch_add(t, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(sum.into_inner(), 5050);
    }
}
