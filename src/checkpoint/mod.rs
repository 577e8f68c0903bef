//! Checkpoints: what a job needs to continue from an iteration bit-identically.
//!
//! A checkpoint of iteration `c` (parameter version `c`) lives in
//! `OUT/checkpoints/it-{c:08}/` as one file per writer, so the processes of a
//! job never coordinate a write:
//!
//! - `shard-{s:05}.ckpt`: parameter shard `s` after `c` steps — its values and
//!   its Adam moments and step count — written by the process of the shard's
//!   owner;
//! - `cut-p{p:03}.ckpt`: process `p`'s trace cut — every trace record of an
//!   iteration before `c` that `p` writes is in a committed part — written after
//!   those parts, with the holders of `p`'s workers' partitions. Process 0's
//!   also carries the online predictor's history and the job clock at `c`.
//!
//! The checkpoint is complete when every shard and every process's cut is
//! there and each file's checksum holds ([`store::load`]). Each file is written
//! atomically (temporary file, fsync, rename, directory fsync). Process 0
//! removes every checkpoint older than the two newest complete ones.
//!
//! What a checkpoint does not hold, because no parameter depends on it: the
//! peer agents' memory of recent control messages and dpro-substitute's memory
//! of each unit's last gradient (a resumed dpro-substitute run starts with
//! none).

pub mod format;
pub mod store;

pub use format::FormatError;
pub use store::{Checkpoint, CheckpointError, CutHeader, ShardState};
