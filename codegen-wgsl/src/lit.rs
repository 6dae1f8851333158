//! WGSL literals of rdyn's constants.

/// An i32 literal (clamped: int64 values beyond i32 never reach the device).
pub fn int_lit(v: i64) -> String {
    let v = v.clamp(i32::MIN as i64, i32::MAX as i64);
    if v == i32::MIN as i64 {
        "bitcast<i32>(0x80000000u)".to_string()
    } else if v < 0 {
        format!("({v}i)")
    } else {
        format!("{v}i")
    }
}

/// An exact f32 literal (as bits, so inf and NaN work too).
pub fn float_lit(v: f64) -> String {
    let x = v as f32;
    if x.is_finite() && x == x.trunc() && x.abs() < 1e7 {
        format!("{x:.1}f")
    } else {
        format!("bitcast<f32>({:#010x}u)", x.to_bits())
    }
}
