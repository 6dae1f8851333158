//! The function emitters: float32 exp/log family, trigonometry, float64
//! exp/log in software, float64 sine and cosine, special functions, erfc in
//! float64, orthogonal polynomials, random bits. Each imports only from
//! `ptx/` and from this floor.

pub mod hash;
pub mod lib64;
pub mod math32;
pub mod math64;
pub mod poly;
pub mod scalar;
pub mod sincos64;
pub mod special;
pub mod trig;
