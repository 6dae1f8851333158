//! Splitting dimensions that indices divide.
//!
//! A reshape that splits or merges dimensions (attention heads, pixel
//! shuffles, channel groups) leaves `i // k` and `i % k` in an index. Along
//! the tile such an index is not affine, so the executor would evaluate it
//! lane by lane. When `k` divides the dimension, splitting `i` into
//! `(n / k, k)` with `i = k·a + b` turns both atoms into plain variables
//! (`a` and `b`) and the index affine again. The kernel's outer dimensions
//! split so, and so does a stage's reduction (a bias gradient summed over
//! the tokens of a `[batch, heads, seq, dim]` gradient): `a` then `b` walk
//! the same elements in the same order as `i` did; an outer-tiled reduction's
//! compiled code then runs its last reduction dimension in one call per point
//! of the others.
//!
//! The last outer dimension may set the tile width: unless every stage tiles
//! along its own range, it splits for any `k` when every stage is float32
//! (compiled code runs narrow rows many per call: a max pool read through a flat
//! `[c, h·w]` view), and only when `k ≥ MIN_TILE` (16) for interpreted stages,
//! which pay per tile. At most `MAX_SPLITS` splits per range.

use rdyn_ir::{Atom, Ctx, Expr, Var};

/// A range of consecutive variables after splitting (the outer ones, or a
/// stage's reduction ones after the outer and inner ones), and each
/// original variable of the range as an expression over the new ones.
#[derive(Clone, Debug)]
pub(crate) struct Split {
    pub sizes: Vec<i64>,
    /// The extents of the variables before the range, which stay.
    prefix: Vec<i64>,
    map: Vec<Expr>,
    original: usize,
    /// What the range's last dimension may be left as (see `find`).
    tile: Tile,
}

/// What a split of a kernel's last outer dimension may leave as the tile.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tile {
    /// Every stage tiles its own inner or reduction range: any split.
    Own,
    /// The last dimension may be the tile of compiled (float32) stages,
    /// which run many narrow rows per call: a tile of 2 lanes beats
    /// computing a divided index lane by lane (a max pool's windows read
    /// through a flattened `[c, h·w]` view: 2.2 ms to 0.5 ms).
    Compiled,
    /// The last dimension may be an interpreted tile, which pays per tile:
    /// at least [`MIN_TILE`] lanes.
    Interpreted,
}

/// The narrowest interpreted tile a split of the last dimension may leave.
const MIN_TILE: i64 = 16;

/// At most this many splits per range (each adds a dimension).
const MAX_SPLITS: usize = 8;

impl Split {
    /// Split the outer dimensions `outer` as the kernel's indices `exprs`
    /// (over outer variables first, then any stage variables) divide them.
    /// `tile`: whether some stage has no inner or reduction range, so the
    /// last outer dimension may be the tile's, and how narrow splitting may
    /// leave it then.
    pub fn find(outer: &[i64], exprs: &[Expr], syms: &Ctx, tile: Tile) -> Split {
        Split::find_after(&[], outer, exprs, syms, tile)
    }

    /// Split the dimensions `dims` of the variables that follow the ones of
    /// extents `prefix`, as `exprs` (over all of them, then any later
    /// variables) divide them.
    pub fn find_after(prefix: &[i64], dims: &[i64], exprs: &[Expr], syms: &Ctx, tile: Tile) -> Split {
        let first = prefix.len();
        let mut split = Split {
            sizes: dims.to_vec(),
            prefix: prefix.to_vec(),
            map: (first..first + dims.len()).map(|k| Expr::v(k as u32)).collect(),
            original: dims.len(),
            tile,
        };
        let mut current: Vec<Expr> = exprs.to_vec();
        for _ in 0..MAX_SPLITS {
            let Some((dim, k)) = current.iter().find_map(|e| split.candidate(e)) else {
                break;
            };
            let before = first + split.sizes.len();
            let v = (first + dim) as u32;
            // Variable `v` becomes `k·v + (v + 1)`; later ones shift up.
            let mut vars: Vec<Expr> = (0..before as u32).map(|u| Expr::v(if u > v { u + 1 } else { u })).collect();
            vars[v as usize] = Expr::v(v).scale(k).add(&Expr::v(v + 1));
            let n = split.sizes[dim];
            split.sizes[dim] = n / k;
            split.sizes.insert(dim + 1, k);
            let ctx = split.ctx(syms, &[]);
            split.map = split.map.iter().map(|e| e.substitute_vars(&vars, &ctx)).collect();
            // Later variables (a stage's, after the outer ones) shift by one.
            let extra = current.iter().filter_map(|e| e.max_var()).max().map_or(0, |u| u as usize + 1);
            vars.extend((before..extra.max(before)).map(|u| Expr::v(u as u32 + 1)));
            current = current.iter().map(|e| e.substitute_vars(&vars, &ctx)).collect();
        }
        split
    }

    /// A dimension `d` and factor `f` such that some atom is
    /// `(a·i_d + c) // k` or `(a·i_d + c) % k`, `f = k / gcd(a, k)` a proper
    /// divisor of the dimension's size: with `i_d = f·q + r` the atom is
    /// `(a·f/k)·q` plus a function of `r` alone (nearest interpolation by
    /// 1.5 reads `(2·i) // 3`: affine in `q`, three values of `r`).
    fn candidate(&self, e: &Expr) -> Option<(usize, i64)> {
        e.terms().iter().find_map(|(atom, _)| self.atom_candidate(atom))
    }

    fn atom_candidate(&self, atom: &Atom) -> Option<(usize, i64)> {
        match atom {
            Atom::FloorDiv(x, d) | Atom::Mod(x, d) => {
                if let (Some(d), [(Atom::Var(Var(v)), a)]) = (d.as_const(), x.terms()) {
                    let k = d / rdyn_ir::expr::gcd(a.abs(), d.abs()).max(1);
                    // Only the range's variables split.
                    let dim = (*v as usize).checked_sub(self.prefix.len()).filter(|d| *d < self.sizes.len());
                    if let Some(dim) = dim {
                        // Splitting the last dimension shortens the tile to
                        // `k` lanes: for the interpreter, worth it only
                        // when that stays wide.
                        let wide = dim + 1 < self.sizes.len() || k >= MIN_TILE || self.tile != Tile::Interpreted;
                        if k > 1 && k < self.sizes[dim] && self.sizes[dim] % k == 0 && wide {
                            return Some((dim, k));
                        }
                    }
                }
                self.candidate(x)
            }
            Atom::Prod(factors) => factors.iter().find_map(|f| self.atom_candidate(f)),
            Atom::Var(_) | Atom::Sym(_) => None,
        }
    }

    /// Move the range's last dimension to its front when a split left it
    /// narrower than an interpreted tile (`i = 2·a + b` of an interleave:
    /// `[512, 2]` becomes `[2, 512]`), so the tile runs along the wide
    /// quotient. Only for ranges whose points may run in any order (a
    /// pointwise stage's inner dims): the lanes then walk `a` with a
    /// constant step, and `b` is the same on every lane.
    pub fn widen_last(&mut self, syms: &Ctx) {
        let n = self.sizes.len();
        if self.is_identity() || n < 2 || self.sizes[n - 1] >= MIN_TILE {
            return;
        }
        let first = self.prefix.len();
        // Old position → new: the last moves to the front, the rest shift.
        let vars: Vec<Expr> = (0..(first + n) as u32)
            .map(|u| {
                let u = u as usize;
                let new = if u < first {
                    u
                } else if u == first + n - 1 {
                    first
                } else {
                    u + 1
                };
                Expr::v(new as u32)
            })
            .collect();
        self.sizes.rotate_right(1);
        let ctx = self.ctx(syms, &[]);
        self.map = self.map.iter().map(|e| e.substitute_vars(&vars, &ctx)).collect();
    }

    /// Whether any dimension was split.
    pub fn is_identity(&self) -> bool {
        self.sizes.len() == self.original
    }

    /// Ranges of the variables before the range, the split ones, then
    /// `extra` ones.
    fn ctx(&self, syms: &Ctx, extra: &[i64]) -> Ctx {
        let mut extents = self.prefix.clone();
        extents.extend_from_slice(&self.sizes);
        extents.extend_from_slice(extra);
        let mut ctx = Ctx::with_extents(&extents);
        ctx.sym_values = syms.sym_values.clone();
        ctx
    }

    /// `e` (over the variables before the range, the original ones of the
    /// range, then `extra.len()` later ones) over the split variables.
    pub fn apply(&self, e: &Expr, syms: &Ctx, extra: &[i64]) -> Expr {
        if self.is_identity() {
            return e.clone();
        }
        let first = self.prefix.len();
        let mut vars: Vec<Expr> = (0..first as u32).map(Expr::v).collect();
        vars.extend(self.map.iter().cloned());
        vars.extend((0..extra.len() as u32).map(|j| Expr::v((first + self.sizes.len()) as u32 + j)));
        e.substitute_vars(&vars, &self.ctx(syms, extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_merge_becomes_affine() {
        // out[i0, i1] = in[8192·(i0 // 64) + 2048·(i1 // 32) + 32·(i0 % 64) + i1 % 32]
        let ctx = Ctx::with_extents(&[256, 128]);
        let (i0, i1) = (Expr::v(0), Expr::v(1));
        let c = |k| Expr::c(k);
        let load = i0
            .floordiv(&c(64), &ctx)
            .scale(8192)
            .add(&i1.floordiv(&c(32), &ctx).scale(2048))
            .add(&i0.modulo(&c(64), &ctx).scale(32))
            .add(&i1.modulo(&c(32), &ctx));
        let store = i0.scale(128).add(&i1);
        let split = Split::find(&[256, 128], &[load.clone(), store.clone()], &Ctx::default(), Tile::Interpreted);
        assert_eq!(split.sizes, vec![4, 64, 4, 32]);
        let load2 = split.apply(&load, &Ctx::default(), &[]);
        let store2 = split.apply(&store, &Ctx::default(), &[]);
        for e in [&load2, &store2] {
            assert!(e.terms().iter().all(|(a, _)| matches!(a, Atom::Var(_))), "{e} is not affine");
        }
        // Same values at every point.
        for a in 0..4 {
            for b in 0..64 {
                for c2 in 0..4 {
                    for d in 0..32 {
                        let old = [64 * a + b, 32 * c2 + d];
                        let new = [a, b, c2, d];
                        assert_eq!(load.eval(&old, &[]), load2.eval(&new, &[]));
                        assert_eq!(store.eval(&old, &[]), store2.eval(&new, &[]));
                    }
                }
            }
        }
    }

    #[test]
    fn stage_variables_shift() {
        // A reduction variable i1 after one outer variable i0 that splits.
        let ctx = Ctx::with_extents(&[64, 5]);
        let e = Expr::v(0).modulo(&Expr::c(16), &ctx).scale(100).add(&Expr::v(1));
        let split = Split::find(&[64], std::slice::from_ref(&e), &Ctx::default(), Tile::Interpreted);
        assert_eq!(split.sizes, vec![4, 16]);
        let e2 = split.apply(&e, &Ctx::default(), &[5]);
        for i0 in 0..64 {
            for r in 0..5 {
                assert_eq!(e.eval(&[i0, r], &[]), e2.eval(&[i0 / 16, i0 % 16, r], &[]));
            }
        }
    }

    #[test]
    fn reduction_dims_split_behind_their_prefix() {
        // A bias gradient: out[i0] = sum over r of in[4096·(r // 64) + 32·(r % 64) + i0],
        // with an outer [32] before the reduction [256].
        let ctx = Ctx::with_extents(&[32, 256]);
        let r = Expr::v(1);
        let load =
            r.floordiv(&Expr::c(64), &ctx).scale(4096).add(&r.modulo(&Expr::c(64), &ctx).scale(32)).add(&Expr::v(0));
        let split = Split::find_after(&[32], &[256], std::slice::from_ref(&load), &Ctx::default(), Tile::Interpreted);
        assert_eq!(split.sizes, vec![4, 64]);
        let load2 = split.apply(&load, &Ctx::default(), &[]);
        assert!(load2.terms().iter().all(|(a, _)| matches!(a, Atom::Var(_))), "{load2} is not affine");
        // The outer variable stays, and (a, b) walk r's elements in r's order.
        for i0 in 0..32 {
            for r in 0..256 {
                assert_eq!(load.eval(&[i0, r], &[]), load2.eval(&[i0, r / 64, r % 64], &[]));
            }
        }
        // A division of a prefix variable splits nothing.
        let prefix_only = Expr::v(0).floordiv(&Expr::c(4), &ctx).add(&Expr::v(1));
        assert!(Split::find_after(&[32], &[256], &[prefix_only], &Ctx::default(), Tile::Interpreted).is_identity());
    }

    #[test]
    fn narrow_tiles_stay() {
        // Nearest upsampling: `i // 2` along the tile is left to the lanes.
        let ctx = Ctx::with_extents(&[64]);
        let e = Expr::v(0).floordiv(&Expr::c(2), &ctx);
        assert!(Split::find(&[64], std::slice::from_ref(&e), &Ctx::default(), Tile::Interpreted).is_identity());
        // Unless every stage tiles its own range (the heads of attention's
        // per-head copies).
        assert_eq!(Split::find(&[64], &[e], &Ctx::default(), Tile::Own).sizes, vec![32, 2]);
    }

    #[test]
    fn compiled_tiles_split_narrow() {
        // A 3x3 max pool's window read through a flattened `[c, 7·7]` view
        // (`62·(i1 // 7) + 2·(i1 % 7)`): compiled rows of 7 lanes, and of 3
        // for a 3x3 map; the interpreter keeps the flat dimension.
        for k in [7, 3] {
            let ctx = Ctx::with_extents(&[512, k * k]);
            let i1 = Expr::v(1);
            let e = i1.floordiv(&Expr::c(k), &ctx).scale(62).add(&i1.modulo(&Expr::c(k), &ctx).scale(2));
            let split = Split::find(&[512, k * k], std::slice::from_ref(&e), &Ctx::default(), Tile::Compiled);
            assert_eq!(split.sizes, vec![512, k, k]);
            let flat = split.apply(&e, &Ctx::default(), &[]);
            assert_eq!(flat, Expr::v(1).scale(62).add(&Expr::v(2).scale(2)), "affine after the split");
            assert!(Split::find(&[512, k * k], &[e], &Ctx::default(), Tile::Interpreted).is_identity());
        }
    }

    #[test]
    fn an_interleave_splits_with_the_narrow_remainder_in_front() {
        // `stack((a, b), -1).flatten(-2)` over [4, 64]: index `i1 // 2` and
        // `i1 % 2` along the last dim; the split keeps the wide quotient last.
        let ctx = Ctx::with_extents(&[4, 64]);
        let i1 = Expr::v(1);
        let e = i1.floordiv(&Expr::c(2), &ctx).scale(3).add(&i1.modulo(&Expr::c(2), &ctx).scale(1000)).add(&Expr::v(0));
        let mut split = Split::find_after(&[4], &[64], std::slice::from_ref(&e), &Ctx::default(), Tile::Own);
        assert_eq!(split.sizes, vec![32, 2]);
        split.widen_last(&Ctx::default());
        assert_eq!(split.sizes, vec![2, 32]);
        let e2 = split.apply(&e, &Ctx::default(), &[]);
        assert_eq!(e2, Expr::v(2).scale(3).add(&Expr::v(1).scale(1000)).add(&Expr::v(0)), "affine, remainder first");
        for i0 in 0..4 {
            for i1 in 0..64 {
                assert_eq!(e.eval(&[i0, i1], &[]), e2.eval(&[i0, i1 % 2, i1 / 2], &[]));
            }
        }
    }

    #[test]
    fn non_divisors_stay() {
        let ctx = Ctx::with_extents(&[10]);
        let e = Expr::v(0).floordiv(&Expr::c(3), &ctx);
        let split = Split::find(&[10], &[e], &Ctx::default(), Tile::Interpreted);
        assert!(split.is_identity());
    }
}
