//! The simulator's errors.

/// Why a simulated kernel did not run to the end.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    #[error("PTX line {line} (`{text}`) is outside the simulated subset: {why}")]
    Parse { line: usize, text: String, why: String },
    #[error("kernel {kernel}, block {block}, thread {thread}, at {ins}: {why}")]
    Run { kernel: String, block: u32, thread: u32, ins: String, why: String },
    /// A `trap`: a device-side check of the kernel failed.
    #[error("kernel {kernel} trapped in block {block}, thread {thread}: a device-side index check failed")]
    Trap { kernel: String, block: u32, thread: u32 },
}
