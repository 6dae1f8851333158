//! The function emitters: float32 exp/log family, trigonometry, float64
//! exp/log in software, float64 sine and cosine, special functions, erfc in
//! float64, random bits, and the translator of the special functions'
//! definitions. Each imports only from
//! `ptx/` and from this floor.

pub mod hash;
pub mod lib64;
pub mod math32;
pub mod math64;
pub mod scalar;
pub mod sincos64;
pub mod special;
pub mod trig;
