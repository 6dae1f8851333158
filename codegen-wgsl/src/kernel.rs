//! Loop-IR kernels → WGSL compute modules.
//!
//! Two shapes:
//! - pointwise kernels (no inner or reduction dims): one invocation per
//!   outer point, 256 per workgroup;
//! - everything else: one workgroup of 256 invocations per outer point. A
//!   reduction stage has each invocation fold a strided share of the
//!   reduction, then a tree in workgroup memory; a pointwise stage with inner
//!   dims spreads them over the invocations. Barriers separate stages, so a
//!   later stage reads what an earlier one stored (softmax, layer norm).
//!
//! Scatter kernels run on a single invocation, in order. GEMM steps are a tiled
//! GEMM module (`gemm_wgsl`).

use std::collections::BTreeMap;
use std::fmt::Write;

use rdyn_ir::loops::{BufId, Kernel, Program, ReduceOp, Stage};
use rdyn_ir::{Ctx, DType, Expr, Kind};

use crate::expr::{elem, hash_source, index, BodyWriter, PRELUDE, SPECIAL};
use crate::lit::{float_lit, int_lit};
use crate::special;
use crate::WgslError;

pub const WORKGROUP: u32 = 256;

/// One storage binding of a kernel: the buffer whose storage it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub buf: BufId,
    pub read_only: bool,
}

/// A compiled WGSL kernel and how to launch it.
#[derive(Clone, Debug)]
pub struct WgslKernel {
    pub name: String,
    pub source: String,
    pub bindings: Vec<Binding>,
    /// Total workgroups (the runtime folds them into a 2-D grid).
    pub workgroups: u32,
    /// An explicit 3-D grid instead (GEMM tiles and batches).
    pub grid: Option<[u32; 3]>,
    /// A last binding holds an error flag (set when a data-dependent index
    /// was out of range).
    pub error_flag: bool,
}

fn concrete(e: &Expr, syms: &Ctx) -> Result<i64, WgslError> {
    e.simplify(syms).as_const().ok_or_else(|| WgslError::Unsupported(format!("symbolic size {e}")))
}

fn numel(sizes: &[i64]) -> i64 {
    sizes.iter().product()
}

/// `let vK = ...;` lines unravelling `linear` over `sizes` into variables
/// `first..`.
fn unravel(out: &mut String, indent: &str, linear: &str, sizes: &[i64], first: usize) {
    if sizes.is_empty() {
        return;
    }
    let _ = writeln!(out, "{indent}var rem{first}: i32 = {linear};");
    for k in (0..sizes.len()).rev() {
        if k == 0 {
            let _ = writeln!(out, "{indent}let v{}: i32 = rem{first};", first + k);
        } else {
            // (A zero-size range never runs; 1 keeps the module valid.)
            let size = sizes[k].max(1);
            let _ = writeln!(out, "{indent}let v{}: i32 = rem{first} % {};", first + k, int_lit(size));
            let _ = writeln!(out, "{indent}rem{first} = rem{first} / {};", int_lit(size));
        }
    }
}

fn identity(op: ReduceOp, kind: Kind) -> String {
    match (op, kind) {
        (ReduceOp::Sum | ReduceOp::Any, Kind::F32) => "0.0f".into(),
        (ReduceOp::Prod | ReduceOp::All, Kind::F32) => "1.0f".into(),
        (ReduceOp::Max | ReduceOp::ArgMax, Kind::F32) => float_lit(f64::NEG_INFINITY),
        (ReduceOp::Min | ReduceOp::ArgMin, Kind::F32) => float_lit(f64::INFINITY),
        (ReduceOp::Sum | ReduceOp::Any, _) => "0i".into(),
        (ReduceOp::Prod | ReduceOp::All, _) => "1i".into(),
        (ReduceOp::Max | ReduceOp::ArgMax, _) => int_lit(i32::MIN as i64),
        (ReduceOp::Min | ReduceOp::ArgMin, _) => int_lit(i32::MAX as i64),
    }
}

fn combine(op: ReduceOp, kind: Kind, a: &str, b: &str) -> String {
    let f = kind == Kind::F32;
    match op {
        ReduceOp::Sum => format!("{a} + {b}"),
        ReduceOp::Prod => format!("{a} * {b}"),
        ReduceOp::Max if f => format!("maxf({a}, {b})"),
        ReduceOp::Min if f => format!("minf({a}, {b})"),
        ReduceOp::Max => format!("max({a}, {b})"),
        ReduceOp::Min => format!("min({a}, {b})"),
        ReduceOp::Any => format!("b2i({a} != 0i || {b} != 0i)"),
        ReduceOp::All => format!("b2i({a} != 0i && {b} != 0i)"),
        // Arg-reductions combine through `better_*` (see `reduce_stage`).
        ReduceOp::ArgMax | ReduceOp::ArgMin => String::new(),
    }
}

const ARG_HELPERS: &str = r#"
fn better_f(is_max: bool, av: f32, ai: i32, bv: f32, bi: i32) -> bool {
    if (bi < 0i) { return false; }
    if (ai < 0i) { return true; }
    let an = is_nan(av);
    let bn = is_nan(bv);
    if (an || bn) { return bn && (!an || (bi < ai)); }
    let greater = (bv > av);
    let less = (bv < av);
    let strictly = select(less, greater, is_max);
    return strictly || ((bv == av) && (bi < ai));
}
fn better_i(is_max: bool, av: i32, ai: i32, bv: i32, bi: i32) -> bool {
    if (bi < 0i) { return false; }
    if (ai < 0i) { return true; }
    let greater = (bv > av);
    let less = (bv < av);
    let strictly = select(less, greater, is_max);
    return strictly || ((bv == av) && (bi < ai));
}
"#;

struct Emitter<'a> {
    program: &'a Program,
    syms: &'a Ctx,
    /// Storage root → binding index.
    bindings: BTreeMap<BufId, usize>,
    error_flag: bool,
}

impl Emitter<'_> {
    fn binding_name(&self, buf: BufId) -> Option<String> {
        self.bindings.get(&self.program.storage_of(buf)).map(|k| format!("b{k}"))
    }

    fn body(&mut self, stage: &Stage, out: &mut String, indent: &str) -> Result<(), WgslError> {
        let mut roots = vec![stage.value];
        roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
        let syms = self.syms;
        let index_of = |e: &Expr| index(&e.simplify(syms));
        let names: BTreeMap<BufId, String> = self
            .program
            .scalars
            .loaded_buffers(&roots)
            .into_iter()
            .filter_map(|b| self.binding_name(b).map(|n| (b, n)))
            .collect();
        let binding_name = |b: BufId| names.get(&b).cloned();
        let mut writer = BodyWriter {
            program: self.program,
            binding_name: &binding_name,
            index_of: &index_of,
            uses_error_flag: false,
        };
        writer.write(&roots, out, indent)?;
        self.error_flag |= writer.uses_error_flag;
        Ok(())
    }

    fn store_target(&self, stage: &Stage) -> Result<(String, String), WgslError> {
        let name = self.binding_name(stage.out).ok_or(WgslError::Internal("store to unbound buffer"))?;
        let mut idx = index(&stage.store.simplify(self.syms))?;
        for (s, stride) in &stage.store_indirect {
            idx = format!("{idx} + t{} * {}", s.0, index(&stride.simplify(self.syms))?);
        }
        Ok((name, idx))
    }

    fn convert(&self, value: &str, from: Kind, to: DType) -> Result<String, WgslError> {
        Ok(match (from, elem(to)?) {
            (Kind::F32, "i32") => format!("i32({value})"),
            (Kind::I64, "f32") => format!("f32({value})"),
            _ => value.to_string(),
        })
    }

    fn store(&self, stage: &Stage, value: &str, kind: Kind, out: &mut String, indent: &str) -> Result<(), WgslError> {
        let (name, idx) = self.store_target(stage)?;
        let value = self.convert(value, kind, self.program.buffer(stage.out).dtype)?;
        let _ = writeln!(out, "{indent}{name}[{idx}] = {value};");
        Ok(())
    }

    fn reduce_stage(&mut self, stage: &Stage, m: usize, out: &mut String) -> Result<(), WgslError> {
        let Some(reduce) = &stage.reduce else { return Err(WgslError::Internal("not a reduction")) };
        let inner: Vec<i64> = stage.ranges[m..].iter().map(|e| concrete(e, self.syms)).collect::<Result<_, _>>()?;
        let red: Vec<i64> = reduce.ranges.iter().map(|e| concrete(e, self.syms)).collect::<Result<_, _>>()?;
        let kind = self.program.scalars.dtype(stage.value).kind();
        let ty = if kind == Kind::F32 { "f32" } else { "i32" };
        let arg = matches!(reduce.op, ReduceOp::ArgMax | ReduceOp::ArgMin);
        let is_max = if reduce.op == ReduceOp::ArgMax { "true" } else { "false" };
        let better = if kind == Kind::F32 { "better_f" } else { "better_i" };
        let sh = if kind == Kind::F32 { "shf" } else { "shi" };
        let _ = writeln!(out, "    for (var ii: i32 = 0i; ii < {}; ii = ii + 1i) {{", int_lit(numel(&inner)));
        unravel(out, "        ", "ii", &inner, m);
        let _ = writeln!(out, "        var acc: {ty} = {};", identity(reduce.op, kind));
        let _ = writeln!(out, "        var acci: i32 = -1i;");
        let _ = writeln!(
            out,
            "        for (var r: i32 = i32(lid); r < {}; r = r + {}i) {{",
            int_lit(numel(&red)),
            WORKGROUP
        );
        unravel(out, "            ", "r", &red, m + inner.len());
        self.body(stage, out, "            ")?;
        let v = format!("t{}", stage.value.0);
        if arg {
            let _ = writeln!(out, "            if ({better}({is_max}, acc, acci, {v}, r)) {{ acc = {v}; acci = r; }}");
        } else {
            let _ = writeln!(out, "            acc = {};", combine(reduce.op, kind, "acc", &v));
        }
        let _ = writeln!(out, "        }}");
        let _ = writeln!(out, "        {sh}[lid] = acc;");
        let _ = writeln!(out, "        shx[lid] = acci;");
        let _ = writeln!(out, "        workgroupBarrier();");
        let _ = writeln!(out, "        for (var s: u32 = {}u; s > 0u; s = s >> 1u) {{", WORKGROUP / 2);
        let _ = writeln!(out, "            if (lid < s) {{");
        if arg {
            let _ = writeln!(
                out,
                "                if ({better}({is_max}, {sh}[lid], shx[lid], {sh}[lid + s], shx[lid + s])) {{ {sh}[lid] = {sh}[lid + s]; shx[lid] = shx[lid + s]; }}"
            );
        } else {
            let _ = writeln!(
                out,
                "                {sh}[lid] = {};",
                combine(reduce.op, kind, &format!("{sh}[lid]"), &format!("{sh}[lid + s]"))
            );
        }
        let _ = writeln!(out, "            }}");
        let _ = writeln!(out, "            workgroupBarrier();");
        let _ = writeln!(out, "        }}");
        let _ = writeln!(out, "        if (lid == 0u) {{");
        if arg {
            self.store(stage, "max(shx[0], 0i)", Kind::I64, out, "            ")?;
        } else {
            self.store(stage, &format!("{sh}[0]"), kind, out, "            ")?;
        }
        let _ = writeln!(out, "        }}");
        let _ = writeln!(out, "        workgroupBarrier();");
        let _ = writeln!(out, "    }}");
        Ok(())
    }

    fn pointwise_stage(&mut self, stage: &Stage, m: usize, out: &mut String) -> Result<(), WgslError> {
        let inner: Vec<i64> = stage.ranges[m..].iter().map(|e| concrete(e, self.syms)).collect::<Result<_, _>>()?;
        let kind = self.program.scalars.dtype(stage.value).kind();
        let _ =
            writeln!(out, "    for (var j: i32 = i32(lid); j < {}; j = j + {}i) {{", int_lit(numel(&inner)), WORKGROUP);
        unravel(out, "        ", "j", &inner, m);
        self.body(stage, out, "        ")?;
        self.store(stage, &format!("t{}", stage.value.0), kind, out, "        ")?;
        let _ = writeln!(out, "    }}");
        Ok(())
    }
}

/// The WGSL module for `kernel`, with sizes from `syms`.
pub fn kernel_wgsl(program: &Program, kernel: &Kernel, syms: &Ctx, name: String) -> Result<WgslKernel, WgslError> {
    let outer: Vec<i64> = kernel.outer.iter().map(|e| concrete(e, syms)).collect::<Result<_, _>>()?;
    let m = outer.len();
    let outer_numel = numel(&outer);
    if outer_numel >= i32::MAX as i64 {
        return Err(WgslError::Unsupported("more than 2^31 points".into()));
    }
    // Bindings: every storage root the kernel touches.
    let mut touched: BTreeMap<BufId, bool> = BTreeMap::new();
    for stage in &kernel.stages {
        let mut roots = vec![stage.value];
        roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
        for b in program.scalars.loaded_buffers(&roots) {
            touched.entry(program.storage_of(b)).or_insert(true);
        }
    }
    for stage in &kernel.stages {
        touched.insert(program.storage_of(stage.out), false);
    }
    for buf in touched.keys() {
        elem(program.buffer(*buf).dtype)?;
    }
    let bindings: Vec<Binding> = touched.iter().map(|(b, ro)| Binding { buf: *b, read_only: *ro }).collect();
    let mut emitter = Emitter {
        program,
        syms,
        bindings: bindings.iter().enumerate().map(|(k, b)| (b.buf, k)).collect(),
        error_flag: false,
    };
    let serial = kernel.stages.iter().any(|s| !s.store_indirect.is_empty());
    let pointwise = !serial && kernel.stages.iter().all(|s| s.ranges.len() == m && s.reduce.is_none());
    let mut main = String::new();
    let workgroups;
    if serial {
        workgroups = 1;
        let _ = writeln!(main, "@compute @workgroup_size(1)\nfn main() {{");
        let _ = writeln!(main, "    for (var o: i32 = 0i; o < {}; o = o + 1i) {{", int_lit(outer_numel));
        unravel(&mut main, "        ", "o", &outer, 0);
        for stage in &kernel.stages {
            if stage.reduce.is_some() || stage.ranges.len() != m {
                return Err(WgslError::Unsupported("scatter with inner dims".into()));
            }
            // Each stage in its own block: stages share scalar names.
            let _ = writeln!(main, "        {{");
            emitter.body(stage, &mut main, "            ")?;
            let kind = program.scalars.dtype(stage.value).kind();
            emitter.store(stage, &format!("t{}", stage.value.0), kind, &mut main, "            ")?;
            let _ = writeln!(main, "        }}");
        }
        let _ = writeln!(main, "    }}\n}}");
    } else if pointwise {
        workgroups = (outer_numel.max(1) as u32).div_ceil(WORKGROUP);
        let _ = writeln!(
            main,
            "@compute @workgroup_size({WORKGROUP})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{"
        );
        let _ = writeln!(main, "    let o: i32 = i32(gid.x + gid.y * nwg.x * {WORKGROUP}u);");
        let _ = writeln!(main, "    if (o >= {}) {{ return; }}", int_lit(outer_numel.max(1)));
        unravel(&mut main, "    ", "o", &outer, 0);
        for stage in &kernel.stages {
            // Each stage in its own block: stages share scalar names.
            let _ = writeln!(main, "    {{");
            emitter.body(stage, &mut main, "        ")?;
            let kind = program.scalars.dtype(stage.value).kind();
            emitter.store(stage, &format!("t{}", stage.value.0), kind, &mut main, "        ")?;
            let _ = writeln!(main, "    }}");
        }
        let _ = writeln!(main, "}}");
    } else {
        workgroups = outer_numel.max(1) as u32;
        let _ = writeln!(
            main,
            "@compute @workgroup_size({WORKGROUP})\nfn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{"
        );
        let _ = writeln!(main, "    let o: i32 = i32(wg.x + wg.y * nwg.x);");
        let _ = writeln!(main, "    if (o >= {}) {{ return; }}", int_lit(outer_numel.max(1)));
        unravel(&mut main, "    ", "o", &outer, 0);
        for (k, stage) in kernel.stages.iter().enumerate() {
            if k > 0 {
                let _ = writeln!(main, "    storageBarrier();\n    workgroupBarrier();");
            }
            if stage.reduce.is_some() {
                emitter.reduce_stage(stage, m, &mut main)?;
            } else {
                emitter.pointwise_stage(stage, m, &mut main)?;
            }
        }
        let _ = writeln!(main, "}}");
    }
    let mut source = String::new();
    for (k, binding) in bindings.iter().enumerate() {
        let ty = elem(program.buffer(binding.buf).dtype)?;
        let access = if binding.read_only { "read" } else { "read_write" };
        let _ = writeln!(source, "@group(0) @binding({k}) var<storage, {access}> b{k}: array<{ty}>;");
    }
    if emitter.error_flag {
        let _ = writeln!(
            source,
            "@group(0) @binding({}) var<storage, read_write> err: array<atomic<u32>>;",
            bindings.len()
        );
        source.push_str(
            "fn bounded(x: i32, n: i32) -> i32 {\n    let w = select(x, x + n, x < 0i);\n    if (w < 0i || w >= n) { atomicStore(&err[0], 1u); return 0i; }\n    return w;\n}\n",
        );
    }
    if !pointwise && !serial {
        let _ = writeln!(source, "var<workgroup> shf: array<f32, {WORKGROUP}>;");
        let _ = writeln!(source, "var<workgroup> shi: array<i32, {WORKGROUP}>;");
        let _ = writeln!(source, "var<workgroup> shx: array<i32, {WORKGROUP}>;");
        source.push_str(ARG_HELPERS);
    }
    source.push_str(PRELUDE);
    if main.contains("special_") {
        source.push_str(SPECIAL);
    }
    for sp in special::ON_DEVICE {
        if main.contains(&format!("{}(", special::name(sp))) {
            source.push_str(&special::source(sp)?);
        }
    }
    if main.contains("hash_mix(") {
        source.push_str(&hash_source());
    }
    source.push_str(&main);
    Ok(WgslKernel { name, source, bindings, workgroups, grid: None, error_flag: emitter.error_flag })
}

/// A tiled GEMM: `out = scale · (a @ b)` for 2-D or batched 3-D strided buffers.
pub fn gemm_wgsl(
    program: &Program,
    a: BufId,
    b: BufId,
    out: BufId,
    scale: f64,
    syms: &Ctx,
) -> Result<WgslKernel, WgslError> {
    let layout = |buf: BufId| -> Result<(Vec<i64>, Vec<i64>, i64), WgslError> {
        let b = program.buffer(buf);
        if b.dtype.kind() != Kind::F32 {
            return Err(WgslError::Unsupported(format!("GEMM on {}", b.dtype)));
        }
        Ok((
            b.sizes.iter().map(|e| concrete(e, syms)).collect::<Result<_, _>>()?,
            b.strides.iter().map(|e| concrete(e, syms)).collect::<Result<_, _>>()?,
            concrete(&b.offset, syms)?,
        ))
    };
    let (sa, ta, oa) = layout(a)?;
    let (sb, tb, ob) = layout(b)?;
    let (so, to, oo) = layout(out)?;
    let batched = so.len() == 3;
    let pick = |s: &[i64], t: &[i64]| -> (i64, i64, i64, i64, i64) {
        if batched {
            (s[1], s[2], t[0], t[1], t[2])
        } else {
            (s[0], s[1], 0, t[0], t[1])
        }
    };
    let (m, k, a_bs, a_rs, a_cs) = pick(&sa, &ta);
    let (_, n, b_bs, b_rs, b_cs) = pick(&sb, &tb);
    let (_, _, o_bs, o_rs, o_cs) = pick(&so, &to);
    let batch = if batched { so[0] } else { 1 };
    let roots = [program.storage_of(a), program.storage_of(b), program.storage_of(out)];
    let mut src = String::new();
    let _ = writeln!(src, "@group(0) @binding(0) var<storage, read> ga: array<f32>;");
    let _ = writeln!(src, "@group(0) @binding(1) var<storage, read> gb: array<f32>;");
    let _ = writeln!(src, "@group(0) @binding(2) var<storage, read_write> go: array<f32>;");
    let _ =
        writeln!(src, "var<workgroup> ta: array<array<f32, 16>, 16>;\nvar<workgroup> tb: array<array<f32, 16>, 16>;");
    let _ = writeln!(
        src,
        "@compute @workgroup_size(16, 16)\nfn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {{"
    );
    let i = |v: i64| int_lit(v);
    let _ = writeln!(
        src,
        "    let bi = i32(wg.z);\n    let row = i32(wg.y) * 16i + i32(l.y);\n    let col = i32(wg.x) * 16i + i32(l.x);"
    );
    let _ = writeln!(src, "    var acc: f32 = 0.0f;");
    let _ = writeln!(src, "    for (var k0: i32 = 0i; k0 < {}; k0 = k0 + 16i) {{", i(k));
    let _ = writeln!(src, "        let ak = k0 + i32(l.x);\n        let bk = k0 + i32(l.y);");
    let _ = writeln!(
        src,
        "        ta[l.y][l.x] = select(0.0f, ga[max(0i, {} + bi * {} + row * {} + ak * {})], row < {} && ak < {});",
        i(oa),
        i(a_bs),
        i(a_rs),
        i(a_cs),
        i(m),
        i(k)
    );
    let _ = writeln!(
        src,
        "        tb[l.y][l.x] = select(0.0f, gb[max(0i, {} + bi * {} + bk * {} + col * {})], bk < {} && col < {});",
        i(ob),
        i(b_bs),
        i(b_rs),
        i(b_cs),
        i(k),
        i(n)
    );
    let _ = writeln!(src, "        workgroupBarrier();");
    let _ = writeln!(
        src,
        "        for (var kk: u32 = 0u; kk < 16u; kk = kk + 1u) {{ acc = acc + ta[l.y][kk] * tb[kk][l.x]; }}"
    );
    let _ = writeln!(src, "        workgroupBarrier();\n    }}");
    let _ = writeln!(src, "    if (row < {} && col < {}) {{", i(m), i(n));
    let _ = writeln!(src, "        let at = {} + bi * {} + row * {} + col * {};", i(oo), i(o_bs), i(o_rs), i(o_cs));
    let scaled = if scale == 1.0 { "acc".to_string() } else { format!("acc * {}", float_lit(scale)) };
    let _ = writeln!(src, "        go[at] = {scaled};");
    let _ = writeln!(src, "    }}\n}}");
    let tiles = |v: i64| (v.max(1) as u32).div_ceil(16);
    Ok(WgslKernel {
        name: "gemm".into(),
        source: src,
        bindings: vec![
            Binding { buf: roots[0], read_only: true },
            Binding { buf: roots[1], read_only: true },
            Binding { buf: roots[2], read_only: false },
        ],
        workgroups: tiles(n) * tiles(m) * batch as u32,
        grid: Some([tiles(n), tiles(m), batch as u32]),
        error_flag: false,
    })
    .map(|mut kernel| {
        kernel.name = format!("gemm {m}x{k}x{n} batch {batch}");
        kernel
    })
}
