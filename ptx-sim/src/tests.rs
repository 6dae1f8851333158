//! The simulator on hand-written PTX, against values computed here.

use super::{parse, Memory, SimError, Traffic};

fn module(params: &[&str], body: &str) -> String {
    let decls: Vec<String> = params.iter().map(|p| format!("\t.param .u64 {p}")).collect();
    format!(
        ".version 7.8\n.target sm_80\n.address_size 64\n\n.visible .entry t(\n{}\n)\n{{\n\t.shared .align 16 .b8 t_smem[64];\n{body}\n}}\n",
        decls.join(",\n")
    )
}

fn run(ptx: &str, grid: u32, block: u32, bufs: &mut [&mut [u8]]) -> Result<Traffic, SimError> {
    let kernel = parse(ptx)?;
    let mut memory = Memory::new();
    let params: Vec<u64> = bufs.iter().map(|b| b.as_ptr() as u64).collect();
    for b in bufs.iter() {
        memory.allow(b.as_ptr() as usize, b.len());
    }
    // SAFETY: the regions are the test's own buffers.
    unsafe { kernel.launch(grid, block, &params, &memory) }
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_floats(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

/// Each block sums 64 floats: warp shuffles, then shared memory across the
/// two warps, then thread 0 stores.
#[test]
fn block_sum_with_shuffles_and_a_barrier() {
    let body = "
	ld.param.u64 %rd0, [t_p0];
	ld.param.u64 %rd1, [t_p1];
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, %ctaid.x;
	cvt.u64.u32 %rd2, %r0;
	cvt.u64.u32 %rd3, %r1;
	mad.lo.s64 %rd4, %rd3, 64, %rd2;
	mad.lo.s64 %rd5, %rd4, 4, %rd0;
	ld.global.f32 %f0, [%rd5];
	shfl.sync.bfly.b32 %f1, %f0, 16, 31, -1;
	add.rn.f32 %f0, %f0, %f1;
	shfl.sync.bfly.b32 %f1, %f0, 8, 31, -1;
	add.rn.f32 %f0, %f0, %f1;
	shfl.sync.bfly.b32 %f1, %f0, 4, 31, -1;
	add.rn.f32 %f0, %f0, %f1;
	shfl.sync.bfly.b32 %f1, %f0, 2, 31, -1;
	add.rn.f32 %f0, %f0, %f1;
	shfl.sync.bfly.b32 %f1, %f0, 1, 31, -1;
	add.rn.f32 %f0, %f0, %f1;
	and.b64 %rd6, %rd2, 31;
	shr.u64 %rd7, %rd2, 5;
	setp.eq.s64 %p0, %rd6, 0;
	mov.u64 %rd8, t_smem;
	mad.lo.s64 %rd9, %rd7, 4, %rd8;
	@%p0 st.shared.f32 [%rd9], %f0;
	bar.sync 0;
	setp.ne.s64 %p1, %rd2, 0;
	@%p1 bra $L_end;
	ld.shared.f32 %f2, [%rd8];
	ld.shared.f32 %f3, [%rd8+4];
	add.rn.f32 %f2, %f2, %f3;
	mad.lo.s64 %rd10, %rd3, 4, %rd1;
	st.global.f32 [%rd10], %f2;
$L_end:
	ret;";
    let ptx = module(&["t_p0", "t_p1"], body);
    let input: Vec<f32> = (0..192).map(|i| (i % 7) as f32 - 2.5).collect();
    let mut x = floats(&input);
    let mut out = floats(&[0.0; 3]);
    let traffic = run(&ptx, 3, 64, &mut [&mut x, &mut out]).expect("the kernel runs");
    let want: Vec<f32> = input.chunks(64).map(|c| c.iter().sum()).collect();
    assert_eq!(to_floats(&out), want);
    // Every input float read once, one float stored per block.
    assert_eq!((traffic.bytes_loaded, traffic.bytes_stored), (192 * 4, 3 * 4));
}

/// Float → integer conversions saturate and send NaN to 0; integer
/// rounding modes; 64-bit moves split and join.
#[test]
fn conversions_match_ptx_rules() {
    let body = "
	ld.param.u64 %rd0, [t_p0];
	ld.param.u64 %rd1, [t_p1];
	ld.global.f32 %f0, [%rd0];
	ld.global.f32 %f1, [%rd0+4];
	ld.global.f32 %f2, [%rd0+8];
	cvt.rzi.s32.f32 %r0, %f0;
	st.global.s32 [%rd1], %r0;
	cvt.rzi.s32.f32 %r1, %f1;
	st.global.s32 [%rd1+4], %r1;
	cvt.rni.f32.f32 %f3, %f2;
	cvt.rzi.s32.f32 %r2, %f3;
	st.global.s32 [%rd1+8], %r2;
	cvt.rmi.f32.f32 %f4, %f2;
	cvt.rzi.s32.f32 %r3, %f4;
	st.global.s32 [%rd1+12], %r3;
	mov.b64 %rd2, 0x0000000500000007;
	mov.b64 {%r4, %r5}, %rd2;
	sub.s32 %r6, %r4, %r5;
	st.global.s32 [%rd1+16], %r6;
	ret;";
    let ptx = module(&["t_p0", "t_p1"], body);
    let mut x = floats(&[3.0e10, f32::NAN, -2.5]);
    let mut out = vec![0u8; 20];
    run(&ptx, 1, 1, &mut [&mut x, &mut out]).expect("the kernel runs");
    let got: Vec<i32> = out.chunks(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    assert_eq!(got, vec![i32::MAX, 0, -2, -3, 2]);
}

#[test]
fn an_access_outside_the_buffers_is_an_error() {
    let body = "
	ld.param.u64 %rd0, [t_p0];
	ld.global.f32 %f0, [%rd0+16];
	ret;";
    let mut x = floats(&[1.0; 4]);
    let err = run(&module(&["t_p0"], body), 1, 1, &mut [&mut x]).expect_err("an error");
    assert!(err.to_string().contains("outside every buffer"), "{err}");
}

#[test]
fn a_shuffle_some_lanes_skip_is_an_error() {
    let body = "
	mov.u32 %r0, %tid.x;
	setp.lt.u32 %p0, %r0, 5;
	@%p0 bra $L_end;
	shfl.sync.bfly.b32 %r1, %r0, 1, 31, -1;
$L_end:
	ret;";
    let err = run(&module(&[], body), 1, 32, &mut []).expect_err("an error");
    assert!(err.to_string().contains("not at this warp-wide instruction"), "{err}");
}

#[test]
fn unknown_instructions_are_named() {
    let err = parse(&module(&[], "\tvote.sync.all.pred %p0, %p1, -1;\n\tret;")).expect_err("an error");
    assert!(matches!(err, SimError::Parse { .. }) && err.to_string().contains("vote.sync"), "{err}");
}

/// A vector access must sit at a multiple of its whole size, as on a GPU:
/// 16 floats read 4 at a time from element 0 work, from element 1 fail.
#[test]
fn a_misaligned_vector_access_is_an_error() {
    let body = |offset: u32| {
        format!(
            "
	ld.param.u64 %rd0, [t_p0];
	ld.global.v4.f32 {{%f0, %f1, %f2, %f3}}, [%rd0+{offset}];
	add.rn.f32 %f0, %f0, %f3;
	st.global.v4.f32 [%rd0+{offset}], {{%f0, %f1, %f2, %f3}};
	ret;"
        )
    };
    // 16 floats from a 16-byte boundary inside a larger buffer.
    let mut whole = floats(&(0..20).map(|i| i as f32).collect::<Vec<_>>());
    let pad = (16 - whole.as_ptr() as usize % 16) % 16;
    let data = &mut whole[pad..pad + 64];
    let before = to_floats(data);
    run(&module(&["t_p0"], &body(16)), 1, 1, &mut [&mut *data]).expect("aligned");
    assert_eq!(to_floats(data)[4], before[4] + before[7]);
    let err = run(&module(&["t_p0"], &body(4)), 1, 1, &mut [data]).expect_err("misaligned");
    assert!(err.to_string().contains("misaligned"), "{err}");
}
