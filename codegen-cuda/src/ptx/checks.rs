//! Data-dependent errors a kernel reports: an index out of range traps or
//! sets the error flag, an integer division by zero sets it under sync checks.

use crate::ptx::func::Func;
use crate::types::{IndexChecks, PtxError};

/// How a kernel reports errors, and where its error flag is.
pub struct Checks {
    pub mode: IndexChecks,
    /// Register with the error flag's global address.
    pub flag_addr: Option<String>,
}

impl Checks {
    /// An index out of range where `pred` holds: the kernel traps
    /// (`IndexChecks::Device`) or sets its error flag.
    pub fn raise_index(&self, f: &mut Func, pred: &str) -> Result<(), PtxError> {
        if self.mode == IndexChecks::Device {
            f.ins(format!("@{pred} trap"));
            return Ok(());
        }
        self.raise(f, pred)
    }

    /// An integer division by zero where `pred` holds: the error flag under
    /// `IndexChecks::Sync`; unchecked otherwise.
    pub fn raise_division(&self, f: &mut Func, pred: &str) -> Result<(), PtxError> {
        match self.mode {
            IndexChecks::Device => Ok(()),
            IndexChecks::Sync => self.raise(f, pred),
        }
    }

    /// Set the kernel's error flag where `pred` holds.
    fn raise(&self, f: &mut Func, pred: &str) -> Result<(), PtxError> {
        let addr = self.flag_addr.as_ref().ok_or(PtxError::Internal("no error flag"))?;
        f.error_flag = true;
        f.ins(format!("@{pred} st.global.u32 [{addr}], 1"));
        Ok(())
    }
}
