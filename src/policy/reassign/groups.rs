//! Helper groups: whom a worker reports to and offers help to, and who
//! reports to it.

/// The helper group of `worker` among `workers` workers of which `per_process`
/// run in each process: the next workers in a ring that starts in the next
/// process, so helpers are in other processes first.
pub fn helper_group(worker: u32, workers: u32, per_process: u32, size: u32) -> Vec<u32> {
    let size = size.min(workers.saturating_sub(1)) as usize;
    let per_process = per_process.max(1);
    let process = worker / per_process;
    let start = (process + 1) * per_process + worker % per_process;
    let ring = (0..workers)
        .map(|k| (start + k) % workers)
        .filter(|&w| w != worker);
    // Other processes first, each group in ring order; each pass stops as
    // soon as the group is full (O(size) with one process, not O(workers)).
    let mut group: Vec<u32> = Vec::with_capacity(size);
    if workers > per_process {
        group.extend(
            ring.clone()
                .filter(|&w| w / per_process != process)
                .take(size),
        );
    }
    let missing = size - group.len();
    group.extend(ring.filter(|&w| w / per_process == process).take(missing));
    group
}

/// The workers whose helper group (see [`helper_group`]) holds `worker`:
/// those whose progress reports it gets, in the order it offers them help.
pub fn reporters(worker: u32, workers: u32, per_process: u32, size: u32) -> Vec<u32> {
    let size = size.min(workers.saturating_sub(1));
    if per_process >= workers {
        // One process: a group is the next workers of the ring, so these
        // are the ones before (O(size) at any scale), taken in ring order
        // from the worker on, as groups are.
        return (1..=size)
            .rev()
            .map(|k| (worker + workers - k) % workers)
            .collect();
    }
    // Those in other processes first, as groups are, each in ring order from
    // the worker on: an idle worker offers help in this order.
    let per_process = per_process.max(1);
    let process = worker / per_process;
    let mut found: Vec<u32> = (0..workers)
        .filter(|&v| v != worker && helper_group(v, workers, per_process, size).contains(&worker))
        .collect();
    found.sort_by_key(|&v| (v / per_process == process, (v + workers - worker) % workers));
    found
}
