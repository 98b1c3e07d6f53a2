//! Parallel loops whose bodies are passed as `&dyn Fn`: rayon's generic machinery (producers,
//! consumers, join jobs) is then instantiated once per element type, not once per kernel
//! closure. Generic kernels (one per op and dtype) calling rayon directly made half of this
//! crate's LLVM IR and most of its build time. One dynamic call per chunk costs nothing
//! next to the chunk's work.

use rayon::prelude::*;

/// Calls `body(i, chunk)` for the `i`-th chunk of `chunk_len` elements of `data` (the last
/// may be shorter), in parallel.
pub fn for_each_chunk_mut<T: Send>(data: &mut [T], chunk_len: usize, body: &(dyn Fn(usize, &mut [T]) + Sync)) {
    data.par_chunks_mut(chunk_len.max(1)).enumerate().for_each(|(i, chunk)| body(i, chunk));
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
    fn map_keeps_order_and_tasks_all_run() {
        assert_eq!(map_indices(1000, &|i| i * 3), (0..1000).map(|i| i * 3).collect::<Vec<_>>());
        let sum = std::sync::atomic::AtomicUsize::new(0);
        for_each_task((1..=100).collect(), &|t: usize| {
            sum.fetch_add(t, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(sum.into_inner(), 5050);
    }
}
