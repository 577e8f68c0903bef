//! Messages in flight in sending order. Every message takes the same
//! latency, so messages arrive in the order they were sent and need no heap:
//! a queue read from the front, as it was written. Only messages sent at the
//! same time arrive together; those are put into their order among ties
//! when the first of them comes up, once no more of them can be sent.

use std::collections::VecDeque;

/// A message in flight: when it arrives, and its order among ties.
pub(super) trait InFlight {
    /// Arrival time.
    fn arrives(&self) -> u64;
    /// Order among the messages arriving at the same time (unique).
    fn order(&self) -> u64;
}

/// A queue of messages in flight, in sending order.
pub(super) struct Fifo<M> {
    queue: VecDeque<M>,
    /// The arrival time whose ties are sorted at the front.
    sorted: Option<u64>,
}

impl<M> Default for Fifo<M> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            sorted: None,
        }
    }
}

impl<M: InFlight> Fifo<M> {
    /// Empty, keeping the buffer.
    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.sorted = None;
    }

    /// Files a message sent now: it arrives after every message queued.
    pub(super) fn push(&mut self, message: M) {
        self.queue.push_back(message);
    }

    /// When the first message arrives.
    pub(super) fn due(&self) -> Option<u64> {
        self.queue.front().map(M::arrives)
    }

    /// The first message's (arrival, order among ties), the messages
    /// arriving with it sorted first. Call only when no more messages with
    /// that arrival can be sent.
    pub(super) fn head(&mut self) -> Option<(u64, u64)> {
        let due = self.due()?;
        if self.sorted != Some(due) {
            let n = self.queue.iter().take_while(|m| m.arrives() == due).count();
            // Sorted where they lie: made contiguous, a queue that wraps
            // around its buffer would move every message in it. Ties come
            // mostly in order already (sent by workers taken in order), in
            // runs: checked first, then merged by the stable sort, which
            // finds the runs (orders are unique, so any sort puts them
            // alike).
            let (front, _) = self.queue.as_mut_slices();
            let ties = if front.len() >= n {
                &mut front[..n]
            } else {
                &mut self.queue.make_contiguous()[..n]
            };
            if !ties.is_sorted_by_key(M::order) {
                ties.sort_by_key(M::order);
            }
            self.sorted = Some(due);
        }
        self.queue.front().map(|m| (m.arrives(), m.order()))
    }

    /// The first message, to change in place.
    pub(super) fn front_mut(&mut self) -> Option<&mut M> {
        self.queue.front_mut()
    }

    /// The message sent last, to change in place.
    pub(super) fn back_mut(&mut self) -> Option<&mut M> {
        self.queue.back_mut()
    }

    /// Takes the first message.
    pub(super) fn pop(&mut self) -> Option<M> {
        self.queue.pop_front()
    }
}
